use std::fmt;

/// Longest key accepted, in characters (docs/API.md).
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 255;

/// A client-chosen idempotency key: 1–255 visible ASCII characters (0x21–0x7E).
///
/// The header may carry it bare (`Idempotency-Key: 8e03…`) or as a Structured
/// Field string (`Idempotency-Key: "8e03…"`, the IETF draft's form); both name
/// the same key, so the quotes and escapes are removed here, once.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

/// Why a header value is not an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdempotencyKeyError {
    /// The key is empty (bare or quoted).
    #[error("the key is empty")]
    Empty,
    /// The key is longer than 255 characters.
    #[error("the key is longer than {IDEMPOTENCY_KEY_LEN_MAX} characters")]
    TooLong,
    /// A character outside visible ASCII (0x21–0x7E).
    #[error("the key may contain only visible ASCII characters (0x21-0x7E)")]
    InvalidCharacter,
    /// A value that starts with `"` but is not a well-formed string.
    #[error("the quoted form is not a well-formed Structured Field string")]
    BadQuoting,
    /// More than one `Idempotency-Key` header: which one was meant is unknowable.
    #[error("the header appears more than once")]
    Repeated,
}

impl IdempotencyKey {
    /// Parses a raw header value in bare or quoted form.
    pub fn parse(raw: &[u8]) -> Result<Self, IdempotencyKeyError> {
        let key = match raw.first() {
            Some(b'"') => unquote(raw)?,
            _ => raw.to_vec(),
        };
        if key.is_empty() {
            return Err(IdempotencyKeyError::Empty);
        }
        if key.len() > IDEMPOTENCY_KEY_LEN_MAX {
            return Err(IdempotencyKeyError::TooLong);
        }
        if !key.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return Err(IdempotencyKeyError::InvalidCharacter);
        }
        // Every byte is ASCII, so this cannot fail.
        let key = String::from_utf8(key).map_err(|_| IdempotencyKeyError::InvalidCharacter)?;
        Ok(Self(key))
    }

    /// The key as the client meant it (without quotes or escapes).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Rebuilds a key read back from Postgres, where only parsed keys are stored.
    pub fn from_trusted(key: String) -> Self {
        debug_assert!(
            (1..=IDEMPOTENCY_KEY_LEN_MAX).contains(&key.len())
                && key.bytes().all(|b| (0x21..=0x7e).contains(&b))
        );
        Self(key)
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// RFC 8941 §4.2.5: a string is `"` … `"` with `\"` and `\\` as the only escapes
/// and printable ASCII (0x20–0x7E) inside.
fn unquote(raw: &[u8]) -> Result<Vec<u8>, IdempotencyKeyError> {
    let inner = raw
        .strip_prefix(b"\"")
        .and_then(|r| r.strip_suffix(b"\""))
        .ok_or(IdempotencyKeyError::BadQuoting)?;
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&e @ (b'"' | b'\\')) => out.push(e),
                _ => return Err(IdempotencyKeyError::BadQuoting),
            },
            b'"' => return Err(IdempotencyKeyError::BadQuoting),
            0x20..=0x7e => out.push(b),
            _ => return Err(IdempotencyKeyError::InvalidCharacter),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(raw: &str) -> Result<String, IdempotencyKeyError> {
        IdempotencyKey::parse(raw.as_bytes()).map(|k| k.0)
    }

    #[test]
    fn bare_keys_are_taken_as_they_are() {
        assert_eq!(
            key("8e03978e-40d5-43e8-bc93-6894a57f9324").unwrap(),
            "8e03978e-40d5-43e8-bc93-6894a57f9324"
        );
        assert_eq!(key("a").unwrap(), "a");
        assert_eq!(key("!~").unwrap(), "!~");
        assert_eq!(key("ab\"c").unwrap(), "ab\"c");
    }

    #[test]
    fn quoted_and_bare_forms_name_the_same_key() {
        assert_eq!(key("\"abc\"").unwrap(), key("abc").unwrap());
        assert_eq!(key(r#""a\\b""#).unwrap(), "a\\b");
        assert_eq!(key(r#""a\"b""#).unwrap(), "a\"b");
    }

    #[test]
    fn lengths_are_bounded() {
        assert_eq!(key(""), Err(IdempotencyKeyError::Empty));
        assert_eq!(key("\"\""), Err(IdempotencyKeyError::Empty));
        assert!(key(&"k".repeat(255)).is_ok());
        assert_eq!(key(&"k".repeat(256)), Err(IdempotencyKeyError::TooLong));
        assert!(key(&format!("\"{}\"", "k".repeat(255))).is_ok());
    }

    #[test]
    fn invisible_and_non_ascii_characters_are_rejected() {
        assert_eq!(key("a b"), Err(IdempotencyKeyError::InvalidCharacter));
        assert_eq!(key("\"a b\""), Err(IdempotencyKeyError::InvalidCharacter));
        assert_eq!(key("a\tb"), Err(IdempotencyKeyError::InvalidCharacter));
        assert_eq!(key("é"), Err(IdempotencyKeyError::InvalidCharacter));
        assert_eq!(
            IdempotencyKey::parse(&[0x61, 0xff]),
            Err(IdempotencyKeyError::InvalidCharacter)
        );
    }

    #[test]
    fn broken_quoting_is_rejected() {
        assert_eq!(key("\"abc"), Err(IdempotencyKeyError::BadQuoting));
        assert_eq!(key("\""), Err(IdempotencyKeyError::BadQuoting));
        assert_eq!(key(r#""a"b""#), Err(IdempotencyKeyError::BadQuoting));
        assert_eq!(key(r#""a\b""#), Err(IdempotencyKeyError::BadQuoting));
        assert_eq!(key(r#""abc\""#), Err(IdempotencyKeyError::BadQuoting));
    }
}
