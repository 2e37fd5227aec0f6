//! Query strings of the list endpoints: decoded as text, so that every bad
//! value becomes a `422 validation-failed` naming its parameter.

use serde::de::DeserializeOwned;

use super::ApiError;
use crate::domain::FieldError;

/// Page size when `limit` is absent.
pub const PAGE_LIMIT_DEFAULT: i64 = 20;
/// Largest page.
pub const PAGE_LIMIT_MAX: i64 = 100;

/// `422 validation-failed` naming one parameter.
pub fn invalid(field: &str, message: &str) -> ApiError {
    ApiError::ValidationFailed(vec![FieldError {
        field: field.into(),
        message: message.into(),
    }])
}

/// The query string, decoded into `T` (whose fields are all text).
pub fn parse<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    serde_urlencoded::from_str(query)
        .map_err(|_| invalid("query", "must be a URL-encoded query string"))
}

/// `limit`: 1 to 100, 20 when absent.
pub fn page_limit(raw: Option<&str>) -> Result<i64, ApiError> {
    match raw {
        None => Ok(PAGE_LIMIT_DEFAULT),
        Some(raw) => raw
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=PAGE_LIMIT_MAX).contains(n))
            .ok_or_else(|| invalid("limit", "must be an integer from 1 to 100")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_bounded() {
        assert_eq!(page_limit(None).unwrap(), 20);
        assert_eq!(page_limit(Some("100")).unwrap(), 100);
        for bad in ["0", "101", "-1", "ten", ""] {
            assert!(page_limit(Some(bad)).is_err(), "{bad}");
        }
    }
}
