//! One log line and one set of metrics per request, tagged with a request id.

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::Error;
use uuid::Uuid;

/// Response header carrying the id that the log line names.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Logs method, route pattern (not the raw path: bounded label values),
/// status and latency. Headers are never logged, so neither are API keys.
pub async fn observe(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let started = Instant::now();
    let request_id = Uuid::new_v4();
    let method = req.method().to_string();
    let mut res = next.call(req).await?;
    let route = res
        .request()
        .match_pattern()
        .unwrap_or_else(|| "unmatched".into());
    let status = res.status().as_u16();
    let elapsed = started.elapsed();
    if let Ok(v) = HeaderValue::from_str(&request_id.to_string()) {
        res.headers_mut().insert(REQUEST_ID, v);
    }
    tracing::info!(%request_id, %method, %route, status, latency_ms = elapsed.as_secs_f64() * 1e3, "request");
    let labels = [
        ("route", route),
        ("method", method),
        ("status", status.to_string()),
    ];
    metrics::counter!("payrail_http_requests_total", &labels).increment(1);
    metrics::histogram!("payrail_http_request_duration_seconds", &labels[..2])
        .record(elapsed.as_secs_f64());
    Ok(res)
}
