//! The operator console (`payrail serve --console`): server-rendered pages
//! at `/console` for watching and repairing payouts in a browser. Its own
//! trust domain: operator tokens and sessions, never a client's API key.
//!
//! Pages are HTML rendered here (maud), with one small script for the live
//! view and one stylesheet, both compiled into the binary; nothing runs in
//! Node and no page holds inline script, so the Content-Security-Policy can
//! forbid it.

mod pages;
mod session;
mod views;

use std::time::Duration;

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{middleware::DefaultHeaders, web, HttpResponse, ResponseError};

use crate::config::ServeConfig;
use crate::store::{Store, StoreError};

/// What the console's handlers share.
pub struct ConsoleState {
    /// Postgres.
    pub store: Store,
    /// `--console-session-ttl`.
    pub session_ttl: Duration,
    /// `--console-page-rows-max`.
    pub page_rows_max: i64,
    /// `--console-scan-rows-max`.
    pub scan_rows_max: i64,
    /// `--console-bulk-rows-max`.
    pub bulk_rows_max: i64,
    /// `--console-bulk-retry-rows-per-second`.
    pub bulk_retry_rows_per_second: u32,
    /// `--provider-processing-max`: how long `processing` counts as stuck.
    pub processing_max: Duration,
}

impl ConsoleState {
    /// The console's limits from `serve`'s flags.
    pub fn new(config: &ServeConfig, store: &Store) -> Self {
        let c = &config.console;
        Self {
            store: store.clone(),
            session_ttl: c.console_session_ttl,
            page_rows_max: c.console_page_rows_max,
            scan_rows_max: c.console_scan_rows_max,
            bulk_rows_max: c.console_bulk_rows_max,
            bulk_retry_rows_per_second: c.console_bulk_retry_rows_per_second,
            processing_max: config.outcomes.provider_processing_max,
        }
    }
}

/// Why a console request was not served.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No live session: the browser is sent to sign in.
    #[error("not signed in")]
    NotSignedIn,
    /// The token opens no console (unknown, revoked, or not an operator's).
    #[error("that token does not open the console")]
    BadToken,
    /// A state-changing request without this session's CSRF token.
    #[error("the form's CSRF token is missing or stale; reload the page and try again")]
    Csrf,
    /// A filter or a form field that does not parse.
    #[error("{0}")]
    BadInput(String),
    /// Nothing has this id.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// Postgres could not answer.
    #[error("the database did not answer; try again")]
    Store(#[from] StoreError),
}

impl ResponseError for ConsoleError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::NotSignedIn => StatusCode::SEE_OTHER,
            Self::BadToken => StatusCode::UNAUTHORIZED,
            Self::Csrf => StatusCode::FORBIDDEN,
            Self::BadInput(_) => StatusCode::BAD_REQUEST,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        if let Self::Store(e) = self {
            tracing::warn!(error = %e, "console request failed");
        }
        match self {
            Self::NotSignedIn => see_other("/console/sign-in"),
            _ => HttpResponse::build(self.status_code())
                .content_type("text/html; charset=utf-8")
                .body(views::error_page(self.status_code(), &self.to_string()).into_string()),
        }
    }
}

/// A `303 See Other` to `location` (after a form's POST, or to sign in).
pub fn see_other(location: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .finish()
}

/// What every console response carries: no inline script, no framing, no
/// caching of pages that show payouts, no referrer leaving the console.
fn security_headers() -> DefaultHeaders {
    DefaultHeaders::new()
        .add((
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                 connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            ),
        ))
        .add((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .add((header::X_FRAME_OPTIONS, "DENY"))
        .add((header::REFERRER_POLICY, "no-referrer"))
        .add((header::CACHE_CONTROL, "no-store"))
}

/// Registers the console's routes under `/console`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/console")
            .wrap(security_headers())
            .route("", web::get().to(pages::index))
            .route("/", web::get().to(pages::index))
            .route("/assets/console.css", web::get().to(pages::stylesheet))
            .route("/assets/console.js", web::get().to(pages::script))
            .route("/sign-in", web::get().to(pages::sign_in_page))
            .route("/sign-in", web::post().to(pages::sign_in))
            .route("/sign-out", web::post().to(pages::sign_out))
            .route("/transfers", web::get().to(pages::transfers))
            .route("/transfers/{id}", web::get().to(pages::transfer))
            .route("/outbox", web::get().to(pages::dead_rows))
            .route("/outbox/retry", web::get().to(pages::retry_confirm))
            .route("/outbox/retry", web::post().to(pages::retry))
            .route("/processing", web::get().to(pages::processing))
            .route("/events", web::get().to(pages::events))
            .route("/events/{id}/redeliver", web::post().to(pages::redeliver))
            .route("/endpoints", web::get().to(pages::endpoints))
            .route(
                "/endpoints/{id}/revive",
                web::get().to(pages::revive_confirm),
            )
            .route("/endpoints/{id}/revive", web::post().to(pages::revive))
            .route("/live", web::get().to(pages::live))
            .route("/live.json", web::get().to(pages::live_json))
            .route("/audit", web::get().to(pages::audit))
            .default_service(web::to(|| async {
                ConsoleError::NotFound("page").error_response()
            })),
    );
}
