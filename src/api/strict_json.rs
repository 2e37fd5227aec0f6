//! JSON decoding that refuses an object with the same key twice.
//!
//! `serde_json` keeps the last of duplicate keys; another parser on the way
//! (a gateway, an audit log) may keep the first, so `{"amount": 1, "amount":
//! 1000000}` could mean two different payments to two readers. A payment
//! request that is ambiguous is refused as `400 malformed-json` instead.
//! Depth stays bounded by `serde_json`'s recursion limit (128), which also
//! guards this visitor.

use std::fmt;

use serde::de::{Deserialize, Deserializer, Error, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A JSON value in which no object repeats a key.
pub struct StrictValue(pub Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // JSON text cannot spell NaN or infinity, so `None` cannot happen.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let StrictValue(value) = map.next_value()?;
            if object.insert(key, value).is_some() {
                return Err(A::Error::custom("an object has the same key twice"));
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Value, String> {
        serde_json::from_str::<StrictValue>(s)
            .map(|v| v.0)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn decodes_like_serde_json_when_no_key_repeats() {
        for text in [
            r#"{"a": [1, -2, 3.5, true, null, "x"], "b": {"c": {}}}"#,
            "[]",
            "18446744073709551615",
            r#""é\u0000""#,
        ] {
            assert_eq!(
                parse(text).unwrap(),
                serde_json::from_str::<Value>(text).unwrap()
            );
        }
    }

    #[test]
    fn refuses_a_repeated_key_at_any_depth() {
        assert!(parse(r#"{"amount": 1, "amount": 2}"#)
            .unwrap_err()
            .contains("same key twice"));
        assert!(parse(r#"{"metadata": {"k": "a", "k": "b"}}"#).is_err());
        assert!(parse(r#"[{"x": 1, "x": 1}]"#).is_err());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        assert!(parse(&deep).unwrap_err().contains("recursion limit"));
    }
}
