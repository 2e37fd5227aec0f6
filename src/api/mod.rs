//! The HTTP API (actix-web): parsing and validation at the edge, then the
//! shard router or the store. No SQL here.

mod auth;
pub mod body;
mod middleware;
pub mod openapi;
mod ops;
pub mod problem;
mod rate_limit;
mod strict_json;
mod transfers;

use std::time::Duration;

use actix_web::web;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::shard::ShardRouter;
use crate::store::Store;

pub use auth::Caller;
pub use middleware::observe;
pub use problem::ApiError;
pub use rate_limit::ClientRateLimiter;

/// What every handler shares.
pub struct AppState {
    /// Postgres.
    pub store: Store,
    /// The key-shard actors.
    pub shards: ShardRouter,
    /// Per-client request budget.
    pub rate_limiter: ClientRateLimiter,
    /// Largest accepted body, in bytes.
    pub body_limit: usize,
    /// How long a client may take to send its body.
    pub body_read_timeout: Duration,
    /// How long a key is remembered.
    pub key_retention: chrono::Duration,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
}

impl AppState {
    /// Converts the retention to the clock type the domain uses.
    pub fn retention(d: Duration) -> chrono::Duration {
        chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
    }
}

/// Registers every route.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/transfers")
            .route(web::post().to(transfers::create))
            .route(web::get().to(transfers::list))
            .default_service(web::to(ops::method_not_allowed)),
    )
    .service(
        web::resource("/transfers/{id}")
            .route(web::get().to(transfers::get))
            .default_service(web::to(ops::method_not_allowed)),
    )
    .route("/healthz", web::get().to(ops::healthz))
    .route("/readyz", web::get().to(ops::readyz))
    .route("/metrics", web::get().to(ops::metrics))
    .route("/openapi.json", web::get().to(ops::openapi))
    .default_service(web::to(ops::not_found));
}
