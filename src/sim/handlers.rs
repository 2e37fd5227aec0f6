//! HTTP routes of the sim (the README's provider-sim section) and the order in which faults apply.

use std::io;

use actix_web::http::header::{self, ContentType};
use actix_web::http::StatusCode;
use actix_web::web::{self, Bytes, BytesMut};
use actix_web::{HttpRequest, HttpResponse};
use futures::StreamExt;
use uuid::Uuid;

use super::app::App;
use super::faults::Faults;
use super::state::Admission;
use super::wire::{Answer, ErrorBody, PayoutRequest};

/// Largest `POST /payouts` body read; a §6 body is well under 1 KiB.
pub const MAX_REQUEST_BODY: usize = 64 * 1024;

/// Registers the routes on an actix `App`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/payouts", web::post().to(post_payout))
        .route("/payouts/{id}", web::get().to(get_payout))
        .route("/stats", web::get().to(get_stats))
        .route("/healthz", web::get().to(healthz))
        .default_service(web::to(not_found));
}

fn error(status: StatusCode, slug: &str, message: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status).json(ErrorBody {
        error: slug.to_owned(),
        message: message.into(),
    })
}

fn answer(bytes: Bytes) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header(ContentType::json())
        .body(bytes)
}

/// A response whose body fails before its first byte. actix-http then aborts
/// the connection before flushing anything — not even the status line — so the
/// client sees a closed connection, the same as a provider crashing between
/// committing a payout and answering it.
fn dropped_connection() -> HttpResponse {
    HttpResponse::Ok().streaming(futures::stream::once(async {
        Err::<Bytes, _>(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "provider-sim: ambiguous-rate drop",
        ))
    }))
}

/// `POST /payouts`. Order: count → fail-rate → validate → execute or replay →
/// latency → ambiguous-rate. Failing first models a provider that is down and
/// never looks at the request; dropping last models one that executed and then
/// lost the answer.
async fn post_payout(req: HttpRequest, payload: web::Payload, app: web::Data<App>) -> HttpResponse {
    app.state.count_request();

    if app.faults.fail() {
        app.state.count_injected_failure();
        return HttpResponse::ServiceUnavailable()
            .insert_header((header::RETRY_AFTER, "1"))
            .json(ErrorBody {
                error: "unavailable".into(),
                message: "provider-sim: injected failure (--fail-rate)".into(),
            });
    }

    let request = match parse_request(&req, payload).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let id = request.transfer_id;

    let admission = app
        .state
        .admit(request, |r| decide(&app.faults, app.later.async_rate, r));
    if let Admission::Executed(_) = &admission {
        // What happens after the answer, in the background.
        if let Some(record) = app.state.record(id) {
            super::later::after_execution(&app, id, &record.status);
        }
    }

    if !app.latency.is_zero() {
        // Spent after the decision: a client that times out here leaves an
        // executed payout behind, which is exactly what retries must survive.
        tokio::time::sleep(app.latency).await;
    }

    match admission {
        Admission::Executed(bytes) => {
            if app.faults.ambiguous() {
                app.state.mark_ambiguous(id);
                tracing::debug!(%id, "provider-sim: dropping the answer of an executed payout");
                return dropped_connection();
            }
            answer(bytes)
        }
        // Replays are always answered: a retry after an ambiguous drop must be
        // able to learn the outcome, or --ambiguous-rate 1.0 would be unusable.
        Admission::Replayed(_) if app.faults.reject_repeat() => {
            app.state.count_injected_failure();
            error(
                StatusCode::FORBIDDEN,
                "forbidden",
                "provider-sim: repeat refused (--repeat-reject-rate)",
            )
        }
        Admission::Replayed(bytes) => {
            let mut resp = answer(bytes);
            resp.headers_mut().insert(
                header::HeaderName::from_static("idempotent-replayed"),
                header::HeaderValue::from_static("true"),
            );
            resp
        }
        Admission::Conflict => error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused",
            "this Idempotency-Key was used with a different body",
        ),
        // 507 rather than 503 so an operator can tell "sim full" from an injected
        // failure; clients treat both as transient (5xx).
        Admission::Full => error(
            StatusCode::INSUFFICIENT_STORAGE,
            "store_full",
            "provider-sim holds --max-payouts records; restart it or raise the bound",
        ),
    }
}

fn decide(faults: &Faults, async_rate: f64, r: &PayoutRequest) -> Answer {
    if faults.chance(async_rate) {
        // Decided later (`later::settle_later`).
        return Answer::Processing {
            reference: format!("sim_{}", Uuid::new_v4()),
            transfer_id: r.transfer_id,
        };
    }
    match faults.decline(&r.destination_account) {
        Some(reason) => Answer::Declined {
            reason: reason.to_owned(),
            transfer_id: r.transfer_id,
        },
        None => Answer::Succeeded {
            reference: format!("sim_{}", Uuid::new_v4()),
            transfer_id: r.transfer_id,
        },
    }
}

/// Header and body checks. Every rejection happens before the store is touched,
/// so a rejected request leaves nothing behind.
async fn parse_request(
    req: &HttpRequest,
    mut payload: web::Payload,
) -> Result<PayoutRequest, HttpResponse> {
    let key = match req.headers().get("idempotency-key") {
        None => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "idempotency_key_missing",
                "Idempotency-Key header is required",
            ))
        }
        Some(v) => v.to_str().ok().and_then(|s| Uuid::parse_str(s.trim()).ok()),
    };
    let Some(key) = key else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "idempotency_key_invalid",
            "Idempotency-Key must be the transfer id (a UUID)",
        ));
    };

    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "Content-Type must be application/json",
        ));
    }

    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| error(StatusCode::BAD_REQUEST, "bad_body", e.to_string()))?;
        if body.len() + chunk.len() > MAX_REQUEST_BODY {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("body over {MAX_REQUEST_BODY} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
    }

    let request: PayoutRequest = serde_json::from_slice(&body).map_err(|e| {
        if e.is_data() {
            error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_payout",
                e.to_string(),
            )
        } else {
            error(StatusCode::BAD_REQUEST, "malformed_json", e.to_string())
        }
    })?;
    if let Err((field, message)) = request.validate() {
        return Err(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_payout",
            format!("{field}: {message}"),
        ));
    }
    if request.transfer_id != key {
        return Err(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_mismatch",
            "Idempotency-Key must equal transfer_id",
        ));
    }
    Ok(request)
}

/// `GET /payouts/{id}`.
async fn get_payout(path: web::Path<String>, app: web::Data<App>) -> HttpResponse {
    let record = Uuid::parse_str(&path)
        .ok()
        .and_then(|id| app.state.record(id));
    match record {
        Some(record) => HttpResponse::Ok().json(record),
        None => error(
            StatusCode::NOT_FOUND,
            "payout_not_found",
            "no payout with this id",
        ),
    }
}

/// `GET /stats`.
async fn get_stats(app: web::Data<App>) -> HttpResponse {
    HttpResponse::Ok().json(app.state.stats())
}

/// `GET /healthz`.
async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

async fn not_found() -> HttpResponse {
    // Not the same body as an unknown payout: an engine pointed at a wrong
    // path must be able to tell "no such route" from "never executed".
    error(StatusCode::NOT_FOUND, "route_not_found", "no such route")
}
