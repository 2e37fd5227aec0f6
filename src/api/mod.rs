//! The HTTP API (actix-web): parsing and validation at the edge, then the
//! shard router or the store. No SQL here.

mod auth;
mod auth_cache;
pub mod body;
mod middleware;
pub mod openapi;
mod ops;
pub mod problem;
mod provider_notifications;
mod query;
mod rate_limit;
mod schemas;
mod strict_json;
mod transfers;
mod webhooks;

use std::time::Duration;

use actix_web::web;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::shard::ShardRouter;
use crate::store::Store;

pub use auth::Caller;
pub use auth_cache::AuthCache;
pub use middleware::observe;
pub use ops::ReadinessCache;
pub use problem::ApiError;
pub use rate_limit::{ClientRateLimiter, LookupLimiter};

/// What every handler shares.
pub struct AppState {
    /// Postgres.
    pub store: Store,
    /// The key-shard actors.
    pub shards: ShardRouter,
    /// Recently authenticated API keys.
    pub auth_cache: std::sync::Arc<AuthCache>,
    /// Per-client request budget.
    pub rate_limiter: ClientRateLimiter,
    /// Lookups of keys no cache knows.
    pub auth_lookups: LookupLimiter,
    /// Largest accepted body, in bytes.
    pub body_bytes_max: usize,
    /// How long a client may take to send its body.
    pub body_read_timeout: Duration,
    /// The last `/readyz` answer.
    pub readiness: ReadinessCache,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// Which webhook endpoint URLs are accepted.
    pub webhook_policy: crate::domain::webhook::AddressPolicy,
    /// Most live webhook endpoints per client.
    pub webhook_endpoints_max: i64,
    /// Where verified provider notifications go; `None` without a secret.
    pub notifications: Option<crate::outcome::notifications::Intake>,
}

/// Registers every route.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/transfers")
            .route(web::post().to(transfers::create))
            .route(web::get().to(transfers::list))
            .default_service(web::to(|| ops::method_not_allowed("GET, POST"))),
    )
    .service(get_only("/transfers/{id}", transfers::get))
    .service(
        web::resource("/webhook_endpoints")
            .route(web::post().to(webhooks::create_endpoint))
            .route(web::get().to(webhooks::list_endpoints))
            .default_service(web::to(|| ops::method_not_allowed("GET, POST"))),
    )
    .service(
        web::resource("/webhook_endpoints/{id}")
            .route(web::delete().to(webhooks::delete_endpoint))
            .default_service(web::to(|| ops::method_not_allowed("DELETE"))),
    )
    .service(post_only(
        "/webhook_endpoints/{id}/rotate_secret",
        webhooks::rotate_secret,
    ))
    .service(get_only("/events", webhooks::list_events))
    .service(post_only("/events/{id}/redeliver", webhooks::redeliver))
    .service(post_only(
        "/provider/notifications",
        provider_notifications::receive,
    ))
    .service(get_only("/healthz", ops::healthz))
    .service(get_only("/readyz", ops::readyz))
    .service(get_only("/metrics", ops::metrics))
    .service(get_only("/openapi.json", openapi::serve))
    .default_service(web::to(ops::not_found));
}

/// A path served by GET alone; any other method gets `405` with `Allow: GET`
/// (RFC 9110 requires the header), not the `404` of an unknown path.
fn get_only<F, Args>(path: &str, handler: F) -> actix_web::Resource
where
    F: actix_web::Handler<Args>,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    web::resource(path)
        .route(web::get().to(handler))
        .default_service(web::to(|| ops::method_not_allowed("GET")))
}

/// A path served by POST alone (`405` with `Allow: POST` otherwise).
fn post_only<F, Args>(path: &str, handler: F) -> actix_web::Resource
where
    F: actix_web::Handler<Args>,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    web::resource(path)
        .route(web::post().to(handler))
        .default_service(web::to(|| ops::method_not_allowed("POST")))
}
