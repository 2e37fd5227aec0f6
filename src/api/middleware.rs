//! One log line and one set of metrics per request, tagged with a request id.

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::Error;
use uuid::Uuid;

/// Response header carrying the id that the log line names.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The label of every method outside the fixed set, and of every path no route matches.
const OTHER: &str = "other";

/// The method as a label from a fixed set.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => OTHER,
    }
}

/// Logs method, route pattern (not the raw path: bounded label values),
/// status and latency. Headers are never logged, so neither are API keys.
pub async fn observe(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let started = Instant::now();
    let request_id = Uuid::new_v4();
    let method = method_label(req.method());
    let mut res = next.call(req).await?;
    // Label values come from fixed sets only: anything a caller can invent
    // (a method, a path) would otherwise add a series that never goes away.
    let route = res
        .request()
        .match_pattern()
        .unwrap_or_else(|| OTHER.into());
    let status = res.status().as_u16();
    let elapsed = started.elapsed();
    if let Ok(v) = HeaderValue::from_str(&request_id.to_string()) {
        res.headers_mut().insert(REQUEST_ID, v);
    }
    tracing::info!(%request_id, %method, %route, status, latency_ms = elapsed.as_secs_f64() * 1e3, "request");
    let labels = [
        ("route", route),
        ("method", method.to_owned()),
        ("status", status.to_string()),
    ];
    metrics::counter!("payrail_http_requests_total", &labels).increment(1);
    metrics::histogram!("payrail_http_request_duration_seconds", &labels[..2])
        .record(elapsed.as_secs_f64());
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invented_methods_share_one_label() {
        assert_eq!(method_label(&Method::POST), "POST");
        for m in ["X1", "X2", "PROPFIND", "BREW"] {
            assert_eq!(
                method_label(&Method::from_bytes(m.as_bytes()).unwrap()),
                OTHER
            );
        }
    }
}
