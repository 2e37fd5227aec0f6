//! Types that exist only to describe request and answer bodies in the
//! OpenAPI document: the handlers parse and build the JSON themselves (see
//! `domain::NewTransfer`), so these never carry data at run time. They live
//! apart so that handlers and the document both depend on them and not on
//! each other.

use std::sync::OnceLock;

use serde_json::Value;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::RefOr;
use utoipa::ToSchema;

use crate::domain::Currency;

/// `Idempotency-Key` as the server accepts it (docs/API.md): either bare, 1-255
/// visible ASCII characters not starting with `"`, or the quoted Structured
/// Field form, whose content (after `\"` and `\\` are unescaped) is 1-255
/// visible ASCII characters.
///
/// utoipa takes only a literal for `pattern`, so `transfers::create` repeats
/// it; a test checks that the served document carries exactly this one.
#[cfg(test)]
pub const IDEMPOTENCY_KEY_PATTERN: &str =
    r#"^(?:[!#-~][!-~]{0,254}|"(?:[!#-\[\]-~]|\\["\\]){1,255}")$"#;

use crate::domain::transfer_limits::{
    METADATA_ENTRIES_MAX, METADATA_KEY_LEN_MAX, METADATA_VALUE_LEN_MAX,
};

/// The `POST /transfers` body, for the document only: the handler parses the
/// JSON itself so it can report every broken rule (see `domain::NewTransfer`).
/// Two rules cannot be said in JSON Schema: `destination_account` must differ
/// from `source_account`, and `amount` must be written without a fraction.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct CreateTransfer {
    /// Minor units of the currency, written as a JSON integer: no fraction
    /// or exponent (`1500.0` and `1.5e3` are refused with 422, although JSON
    /// Schema's `integer` would admit them).
    #[schema(minimum = 1, maximum = 999_999_999_999_i64, example = 1500)]
    amount: i64,
    /// Active ISO 4217 code, upper case.
    #[schema(schema_with = currency_schema)]
    currency: String,
    /// Account debited.
    #[schema(
        pattern = "^[A-Za-z0-9_.:-]{1,64}$",
        min_length = 1,
        max_length = 64,
        example = "acc_alice"
    )]
    source_account: String,
    /// Account credited; must differ from `source_account`.
    #[schema(
        pattern = "^[A-Za-z0-9_.:-]{1,64}$",
        min_length = 1,
        max_length = 64,
        example = "acc_bob"
    )]
    destination_account: String,
    /// At most 140 characters; null means absent.
    #[schema(max_length = 140, pattern = "^[^\\u0000]*$")]
    description: Option<String>,
    /// At most 20 entries; keys 1-40 characters, values strings of up to 500
    /// characters; null means absent.
    #[schema(schema_with = metadata_schema)]
    metadata: Option<std::collections::BTreeMap<String, String>>,
}

/// Every code `Currency::parse` accepts, so the document cannot drift from
/// the validation.
fn active_currencies() -> &'static [&'static str] {
    static CODES: OnceLock<Vec<&'static str>> = OnceLock::new();
    CODES.get_or_init(|| {
        let letters = b'A'..=b'Z';
        let mut codes = Vec::new();
        for a in letters.clone() {
            for b in letters.clone() {
                for c in letters.clone() {
                    let code = String::from_utf8(vec![a, b, c]).unwrap_or_default();
                    if let Ok(currency) = Currency::parse(&code) {
                        codes.push(currency.code());
                    }
                }
            }
        }
        codes
    })
}

fn currency_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some("Active ISO 4217 alphabetic code, upper case."))
        .enum_values(Some(active_currencies().iter().copied()))
        .examples([Value::from("USD")])
        .into()
}

fn metadata_schema() -> Schema {
    let key = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(METADATA_KEY_LEN_MAX))
        .pattern(Some("^[^\\u0000]*$"));
    let value = ObjectBuilder::new()
        .schema_type(Type::String)
        .max_length(Some(METADATA_VALUE_LEN_MAX))
        .pattern(Some("^[^\\u0000]*$"));
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .description(Some(format!(
            "At most {METADATA_ENTRIES_MAX} string entries; keys 1-{METADATA_KEY_LEN_MAX} characters, values up to {METADATA_VALUE_LEN_MAX}; null means absent."
        )))
        .max_properties(Some(METADATA_ENTRIES_MAX))
        .property_names(Some(key))
        .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(
            value.into(),
        ))))
        .into()
}

/// `{"status": ...}` of `/healthz` and `/readyz`.
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code)]
pub struct OpsStatus {
    /// `ok` (`/healthz`) or `ready` (`/readyz`).
    #[schema(example = "ok")]
    status: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_currency_enum_lists_active_codes_only() {
        let codes = active_currencies();
        assert!(codes.contains(&"USD") && codes.contains(&"JPY"));
        assert!(!codes.contains(&"XXX") && !codes.contains(&"XQV"));
    }

    proptest! {
        /// Every key the documented pattern admits is one the parser accepts.
        #[test]
        fn every_key_the_pattern_admits_parses(
            raw in proptest::string::string_regex(
                IDEMPOTENCY_KEY_PATTERN.trim_start_matches('^').trim_end_matches('$'),
            ).unwrap()
        ) {
            prop_assert!(crate::domain::IdempotencyKey::parse(raw.as_bytes()).is_ok(), "{:?}", raw);
        }
    }
}
