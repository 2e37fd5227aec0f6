//! One log line and one set of metrics per request, tagged with a request id.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

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

/// One route's metric handles, by method and status.
#[derive(Default)]
struct RouteMetrics {
    duration: HashMap<&'static str, metrics::Histogram>,
    requests: HashMap<(&'static str, u16), metrics::Counter>,
}

thread_local! {
    /// The request metrics' handles, registered once per label set and kept
    /// per server thread: registering them per request built their keys
    /// and looked them up in the registry every time. Bounded, as their
    /// label values are.
    static HTTP_METRICS: RefCell<HashMap<String, RouteMetrics>> = RefCell::new(HashMap::new());
}

/// Counts a request and records its duration.
fn record(route: String, method: &'static str, status: u16, elapsed: Duration) {
    HTTP_METRICS.with_borrow_mut(|routes| {
        if !routes.contains_key(route.as_str()) {
            routes.insert(route.clone(), RouteMetrics::default());
        }
        let m = routes.get_mut(route.as_str()).expect("inserted above");
        m.requests
            .entry((method, status))
            .or_insert_with(|| {
                let labels = [
                    ("route", route.clone()),
                    ("method", method.to_owned()),
                    ("status", status.to_string()),
                ];
                metrics::counter!("payrail_http_requests_total", &labels)
            })
            .increment(1);
        m.duration
            .entry(method)
            .or_insert_with(|| {
                let labels = [("route", route.clone()), ("method", method.to_owned())];
                metrics::histogram!("payrail_http_request_duration_seconds", &labels)
            })
            .record(elapsed.as_secs_f64());
    });
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
    let mut id = Uuid::encode_buffer();
    if let Ok(v) = HeaderValue::from_str(request_id.hyphenated().encode_lower(&mut id)) {
        res.headers_mut().insert(REQUEST_ID, v);
    }
    tracing::info!(%request_id, %method, %route, status, latency_ms = elapsed.as_secs_f64() * 1e3, "request");
    record(route, method, status, elapsed);
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
