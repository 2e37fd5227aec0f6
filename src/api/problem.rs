//! The one place where errors become HTTP: every error the API returns is an
//! [`ApiError`], rendered as `application/problem+json` (RFC 9457).

use std::time::Duration;

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

use crate::domain::{FieldError, IdempotencyKeyError};
use crate::store::StoreError;

/// How long clients are told to wait before retrying a 503 or 409.
const RETRY_AFTER_SECS: u64 = 1;

/// Every error the HTTP API can answer with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Missing, malformed, unknown or revoked API key.
    #[error("a valid API key is required: Authorization: Bearer <api_key>")]
    Unauthorized,
    /// `POST /transfers` without `Idempotency-Key`.
    #[error("the Idempotency-Key header is required")]
    IdempotencyKeyMissing,
    /// An `Idempotency-Key` that is not 1-255 visible ASCII characters.
    #[error("the Idempotency-Key header is invalid: {0}")]
    IdempotencyKeyInvalid(#[from] IdempotencyKeyError),
    /// The key already names a different request.
    #[error("this Idempotency-Key was already used with a different request")]
    IdempotencyKeyReused,
    /// The key's first attempt is still being written.
    #[error("a request with this Idempotency-Key is still in progress; retry later")]
    RequestInProgress,
    /// The body is not JSON.
    #[error("the body is not valid JSON: {0}")]
    MalformedJson(String),
    /// The body is not declared as `application/json`.
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    /// The body did not arrive within the client request timeout.
    #[error("the body did not arrive within {0:?}")]
    RequestTimeout(Duration),
    /// The body is larger than the limit.
    #[error("the body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// The body or query broke a rule.
    #[error("the request is invalid")]
    ValidationFailed(Vec<FieldError>),
    /// No such resource for this client.
    #[error("no such resource")]
    NotFound,
    /// The resource exists but not with this method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// Postgres failed or timed out; nothing was stored.
    #[error("the service is temporarily unavailable; retry with the same Idempotency-Key")]
    Unavailable,
    /// Load is being shed.
    #[error("the service is overloaded; retry with the same Idempotency-Key")]
    Overloaded,
    /// Settlement is behind by more than `--outbox-lag-max`; no new
    /// transfer is taken until it catches up.
    #[error("payouts are being settled behind schedule; retry with the same Idempotency-Key")]
    SettlementLagging,
    /// The client is over its rate limit.
    #[error("rate limit exceeded")]
    RateLimited(Duration),
    /// The client already has the most webhook endpoints allowed.
    #[error("a client may have at most {0} webhook endpoints; delete one first")]
    EndpointLimit(i64),
    /// A provider notification without a valid signature.
    #[error("{0}")]
    NotificationUnauthenticated(&'static str),
    /// A signed provider notification this engine does not understand.
    #[error("{0}")]
    NotificationMalformed(String),
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        // The detail stays in the log: a client never sees SQL or driver text.
        tracing::warn!(error = %e, "database operation failed");
        Self::Unavailable
    }
}

/// The RFC 9457 body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// `/problems/<slug>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Short summary of the problem type.
    pub title: &'static str,
    /// The HTTP status.
    pub status: u16,
    /// What happened in this case.
    pub detail: String,
    /// Broken rules, for `validation-failed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<FieldError>>,
}

impl ApiError {
    /// The problem type's slug, as listed in docs/API.md.
    pub fn slug(&self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::IdempotencyKeyMissing => "idempotency-key-missing",
            Self::IdempotencyKeyInvalid(_) => "idempotency-key-invalid",
            Self::IdempotencyKeyReused => "idempotency-key-reused",
            Self::RequestInProgress => "request-in-progress",
            Self::MalformedJson(_) => "malformed-json",
            Self::UnsupportedMediaType => "unsupported-media-type",
            Self::PayloadTooLarge(_) => "payload-too-large",
            Self::ValidationFailed(_) => "validation-failed",
            Self::NotFound => "not-found",
            Self::MethodNotAllowed => "method-not-allowed",
            Self::RequestTimeout(_) => "request-timeout",
            Self::Unavailable => "unavailable",
            Self::Overloaded => "overloaded",
            Self::SettlementLagging => "settlement-lagging",
            Self::RateLimited(_) => "rate-limited",
            Self::EndpointLimit(_) => "webhook-endpoint-limit",
            Self::NotificationUnauthenticated(_) => "notification-unauthenticated",
            Self::NotificationMalformed(_) => "notification-malformed",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Self::Unauthorized => "Unauthorized",
            Self::IdempotencyKeyMissing => "Idempotency-Key missing",
            Self::IdempotencyKeyInvalid(_) => "Idempotency-Key invalid",
            Self::IdempotencyKeyReused => "Idempotency-Key reused",
            Self::RequestInProgress => "Request in progress",
            Self::MalformedJson(_) => "Malformed JSON",
            Self::UnsupportedMediaType => "Unsupported media type",
            Self::PayloadTooLarge(_) => "Payload too large",
            Self::ValidationFailed(_) => "Validation failed",
            Self::NotFound => "Not found",
            Self::MethodNotAllowed => "Method not allowed",
            Self::RequestTimeout(_) => "Request timeout",
            Self::Unavailable => "Service unavailable",
            Self::Overloaded => "Overloaded",
            Self::SettlementLagging => "Settlement lagging",
            Self::RateLimited(_) => "Rate limited",
            Self::EndpointLimit(_) => "Webhook endpoint limit reached",
            Self::NotificationUnauthenticated(_) => "Notification not authenticated",
            Self::NotificationMalformed(_) => "Malformed notification",
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            Self::RequestInProgress
            | Self::Unavailable
            | Self::Overloaded
            | Self::SettlementLagging => Some(RETRY_AFTER_SECS),
            Self::RateLimited(wait) => Some(wait.as_secs_f64().ceil().max(1.0) as u64),
            _ => None,
        }
    }

    /// The RFC 9457 body of this error.
    pub fn problem(&self) -> Problem {
        Problem {
            kind: format!("/problems/{}", self.slug()),
            title: self.title(),
            status: self.status_code().as_u16(),
            detail: self.to_string(),
            errors: match self {
                Self::ValidationFailed(errors) => Some(errors.clone()),
                _ => None,
            },
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Unauthorized | Self::NotificationUnauthenticated(_) => StatusCode::UNAUTHORIZED,
            Self::IdempotencyKeyMissing
            | Self::IdempotencyKeyInvalid(_)
            | Self::MalformedJson(_)
            | Self::NotificationMalformed(_) => StatusCode::BAD_REQUEST,
            Self::IdempotencyKeyReused | Self::ValidationFailed(_) | Self::EndpointLimit(_) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            Self::RequestInProgress => StatusCode::CONFLICT,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Unavailable | Self::Overloaded | Self::SettlementLagging => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut res = HttpResponse::build(self.status_code());
        res.content_type("application/problem+json");
        if let Some(secs) = self.retry_after() {
            res.insert_header((header::RETRY_AFTER, secs.to_string()));
        }
        if matches!(self, Self::Unauthorized) {
            res.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
        }
        res.json(self.problem())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_errors_say_when_to_retry() {
        for e in [
            ApiError::Unavailable,
            ApiError::Overloaded,
            ApiError::RequestInProgress,
        ] {
            let res = e.error_response();
            assert_eq!(res.headers().get(header::RETRY_AFTER).unwrap(), "1");
        }
        let res = ApiError::RateLimited(Duration::from_millis(2500)).error_response();
        assert_eq!(res.headers().get(header::RETRY_AFTER).unwrap(), "3");
        assert!(ApiError::NotFound
            .error_response()
            .headers()
            .get(header::RETRY_AFTER)
            .is_none());
    }

    #[test]
    fn problems_are_problem_json() {
        let res = ApiError::Unauthorized.error_response();
        assert_eq!(
            res.headers().get(header::CONTENT_TYPE).unwrap(),
            "application/problem+json"
        );
        assert_eq!(
            res.headers().get(header::WWW_AUTHENTICATE).unwrap(),
            "Bearer"
        );
        assert_eq!(
            ApiError::Unauthorized.problem().kind,
            "/problems/unauthorized"
        );
    }
}
