//! Operational endpoints: liveness, readiness, metrics, the OpenAPI document.

use actix_web::{web, HttpResponse};
use utoipa::OpenApi;

use super::{ApiError, AppState};

/// 200 while the process runs.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "The process runs")))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

/// 200 when Postgres answers and the schema is current, else 503.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses(
    (status = 200, description = "Ready"),
    (status = 503, description = "unavailable", body = crate::api::problem::Problem, content_type = "application/problem+json"),
))]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    if state.store.is_ready().await {
        Ok(HttpResponse::Ok().json(serde_json::json!({"status": "ready"})))
    } else {
        Err(ApiError::Unavailable)
    }
}

/// Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text", content_type = "text/plain")))]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    state.metrics.run_upkeep();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}

/// This API's OpenAPI 3.1 document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "OpenAPI 3.1 document", content_type = "application/json")))]
pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok().json(super::openapi::ApiDoc::openapi())
}

/// Unknown paths.
pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound)
}

/// Known paths, wrong method.
pub async fn method_not_allowed() -> Result<HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed)
}
