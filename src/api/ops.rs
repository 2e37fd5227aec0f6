//! Operational endpoints: liveness, readiness, metrics, the OpenAPI document.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use actix_web::{web, HttpResponse};

use super::{ApiError, AppState};
use crate::store::Store;

/// The last readiness answer, reused for `--readyz-cache-ttl`: load
/// balancers and anyone else may probe `/readyz` as often as they like, and
/// Postgres answers at most one probe per interval.
pub struct ReadinessCache {
    ttl: Duration,
    last: Mutex<Option<(Instant, bool)>>,
}

impl ReadinessCache {
    /// Reuses an answer for `ttl` (zero: ask every time).
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            last: Mutex::new(None),
        }
    }

    async fn is_ready(&self, store: &Store) -> bool {
        if let Some((at, ready)) = *crate::sync::lock(&self.last) {
            if at.elapsed() < self.ttl {
                return ready;
            }
        }
        let ready = store.is_ready().await;
        *crate::sync::lock(&self.last) = Some((Instant::now(), ready));
        ready
    }
}

/// 200 while the process runs.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses(
    (status = 200, description = "The process runs: `{\"status\": \"ok\"}`", body = super::schemas::OpsStatus, content_type = "application/json"),
))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

/// 200 when Postgres answers and the schema is current, else 503.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses(
    (status = 200, description = "Ready: `{\"status\": \"ready\"}`", body = super::schemas::OpsStatus, content_type = "application/json"),
    (status = 503, description = "unavailable: Postgres does not answer or the schema is not current", body = crate::api::problem::Problem, content_type = "application/problem+json",
        headers(("Retry-After" = u32, description = "Seconds to wait before asking again"))),
))]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    if state.readiness.is_ready(&state.store).await {
        Ok(HttpResponse::Ok().json(serde_json::json!({"status": "ready"})))
    } else {
        Err(ApiError::Unavailable)
    }
}

/// Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text exposition (format 0.0.4)", body = String, content_type = "text/plain")))]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    state.metrics.run_upkeep();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}

/// Unknown paths.
pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound)
}

/// Known paths, wrong method.
pub async fn method_not_allowed(allow: &'static str) -> HttpResponse {
    use actix_web::ResponseError;
    let mut res = ApiError::MethodNotAllowed.error_response();
    res.headers_mut().insert(
        actix_web::http::header::ALLOW,
        actix_web::http::header::HeaderValue::from_static(allow),
    );
    res
}
