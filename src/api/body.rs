//! Turning a raw `POST /transfers` request into a [`NewTransfer`]: headers
//! first, then a bounded body read, then JSON, then the field rules.

use actix_web::http::header;
use actix_web::{web, HttpRequest};
use futures::StreamExt;
use serde_json::{Map, Value};

use super::ApiError;
use crate::domain::{FieldError, IdempotencyKey, IdempotencyKeyError, NewTransfer};

/// The request's idempotency key; exactly one header must be present.
pub fn idempotency_key(req: &HttpRequest) -> Result<IdempotencyKey, ApiError> {
    let mut values = req.headers().get_all("idempotency-key");
    let value = values.next().ok_or(ApiError::IdempotencyKeyMissing)?;
    if values.next().is_some() {
        return Err(IdempotencyKeyError::Repeated.into());
    }
    Ok(IdempotencyKey::parse(value.as_bytes())?)
}

/// `application/json`, with or without parameters such as `charset`.
pub fn require_json(req: &HttpRequest) -> Result<(), ApiError> {
    let essence = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim);
    match essence {
        Some(t) if t.eq_ignore_ascii_case("application/json") => Ok(()),
        _ => Err(ApiError::UnsupportedMediaType),
    }
}

/// Reads at most `limit` bytes; a larger body is refused without reading
/// the rest, whether or not it declared its length.
pub async fn read_limited(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<web::Bytes, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge(limit));
    }
    let mut body = web::BytesMut::with_capacity(declared.unwrap_or(1024).min(limit));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::MalformedJson(format!("the body could not be read: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// JSON, then SPEC §3's field rules.
pub fn parse_transfer(body: &[u8]) -> Result<NewTransfer, ApiError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::MalformedJson(e.to_string()))?;
    let object: Map<String, Value> = match value {
        Value::Object(o) => o,
        _ => {
            return Err(ApiError::ValidationFailed(vec![FieldError {
                field: "body".into(),
                message: "must be a JSON object".into(),
            }]))
        }
    };
    NewTransfer::parse(&object).map_err(ApiError::ValidationFailed)
}
