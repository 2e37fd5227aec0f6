//! `POST /transfers`, `GET /transfers/{id}`, `GET /transfers`.

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::body::{idempotency_key, parse_transfer, read_limited, require_json};
use super::query::{self, invalid};
use super::{ApiError, AppState, Caller};
use crate::domain::{BodyDigest, Fingerprint, Transfer, TransferView};
use crate::shard::Verdict;
use crate::store::{KeyWrite, StoredAnswer};

/// Creates a transfer, or replays the first answer for this Idempotency-Key.
#[utoipa::path(
    post, path = "/transfers", tag = "transfers",
    request_body(content = super::schemas::CreateTransfer, content_type = "application/json",
        description = "Unknown fields are rejected; at most 64 KiB (413 beyond)."),
    params(("Idempotency-Key" = String, Header,
        description = "1-255 visible ASCII characters (0x21-0x7E), bare or as a quoted Structured Field string (`\"...\"`, with `\\\"` and `\\\\` escapes) naming the same key; a bare key cannot start with `\"`. A UUID v4 chosen before the first attempt is recommended. Missing: 400 idempotency-key-missing; malformed or repeated: 400 idempotency-key-invalid.",
        min_length = 1, max_length = 512,
        pattern = r#"^(?:[!#-~][!-~]{0,254}|"(?:[!#-\[\]-~]|\\["\\]){1,255}")$"#,
        example = "8e03978e-40d5-43e8-bc93-6894a57f9324")),
    responses(
        (status = 201, description = "Created (or, with `Idempotent-Replayed: true`, the stored first answer, byte for byte)", body = TransferView, content_type = "application/json",
            headers(("Location" = String, description = "`/transfers/{id}`"), ("Idempotent-Replayed" = String, description = "`true` on a replay; absent on the first answer"))),
        (status = 400, description = "idempotency-key-missing, idempotency-key-invalid or malformed-json", body = crate::api::problem::Problem, content_type = "application/problem+json"),
        (status = 408, description = "request-timeout: the body did not arrive within the client request timeout", body = crate::api::problem::Problem, content_type = "application/problem+json"),
        (status = 409, description = "request-in-progress: the first attempt with this key is still being written past the coalesce timeout", body = crate::api::problem::Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u32, description = "Seconds to wait before retrying with the same key"))),
        (status = 413, description = "payload-too-large", body = crate::api::problem::Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported-media-type: Content-Type is not application/json", body = crate::api::problem::Problem, content_type = "application/problem+json"),
        (status = 422, description = "validation-failed (with `errors`) or idempotency-key-reused", body = crate::api::problem::Problem, content_type = "application/problem+json"),
        (status = 503, description = "unavailable (Postgres failing; nothing stored, unless the connection broke during COMMIT: retry with the same Idempotency-Key to learn the outcome) or overloaded (load shed)", body = crate::api::problem::Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u32, description = "Seconds to wait before retrying with the same key"))),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let key = idempotency_key(&req)?;
    require_json(&req)?;
    let body = read_limited(&req, payload, state.body_bytes_max, state.body_read_timeout).await?;

    // A retry of a committed key is answered here, on this worker's thread,
    // without parsing its body again if the bytes are those already seen.
    let scope = (caller.0, key);
    let digest = BodyDigest::of(&body);
    let cached = state.shards.cached(&scope);
    if let Some(verdict) = cached.as_ref().and_then(|c| c.verdict_for_body(digest)) {
        return respond(verdict);
    }
    let request = parse_transfer(&body)?;
    let fingerprint = Fingerprint::of_create(&request);
    if let Some(cached) = cached {
        return respond(cached.verdict(fingerprint));
    }
    let (client, key) = scope;
    let transfer = Transfer::accept(client, key, request);
    let body = serde_json::to_vec(&TransferView::from(&transfer))
        .map_err(|e| ApiError::MalformedJson(e.to_string()))?;
    let write = KeyWrite {
        transfer,
        fingerprint,
        body: body.into(),
    };
    respond(state.shards.submit(write, digest).await)
}

/// The HTTP answer to a shard's verdict.
fn respond(verdict: Verdict) -> Result<HttpResponse, ApiError> {
    match verdict {
        Verdict::Created(a) => Ok(answer_response(&a, false)),
        Verdict::Replayed(a) => Ok(answer_response(&a, true)),
        Verdict::KeyReused => Err(ApiError::IdempotencyKeyReused),
        Verdict::InProgress => Err(ApiError::RequestInProgress),
        Verdict::Unavailable => Err(ApiError::Unavailable),
        Verdict::Overloaded => Err(ApiError::Overloaded),
        Verdict::Lagging => Err(ApiError::SettlementLagging),
    }
}

/// The stored answer, byte for byte, with the headers of the first answer.
fn answer_response(answer: &StoredAnswer, replayed: bool) -> HttpResponse {
    assert!(!answer.body.is_empty(), "a stored answer has its bytes");
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::CREATED);
    let mut res = HttpResponse::build(status);
    res.content_type("application/json").insert_header((
        header::LOCATION,
        format!("/transfers/{}", answer.transfer_id),
    ));
    if replayed {
        res.insert_header(("Idempotent-Replayed", "true"));
    }
    res.body(answer.body.clone())
}

/// One of the caller's transfers, as it is now.
#[utoipa::path(
    get, path = "/transfers/{id}", tag = "transfers",
    params(("id" = String, Path, description = "Transfer id (a UUID). Any other text, or another client's id, answers 404 like an unknown id.")),
    responses(
        (status = 200, body = TransferView, content_type = "application/json"),
        (status = 404, description = "not-found (also for another client's transfer)", body = crate::api::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    // A malformed id names no transfer: 404, exactly like an unknown one.
    let id = Uuid::parse_str(&id).map_err(|_| ApiError::NotFound)?;
    let transfer = state
        .store
        .transfer(caller.0, id)
        .await?
        .ok_or(ApiError::NotFound)?;
    assert!(
        transfer.id == id && transfer.client_id == caller.0,
        "a client reads only its own transfer"
    );
    Ok(HttpResponse::Ok().json(TransferView::from(&transfer)))
}

/// Query of `GET /transfers`, taken as text so bad values become problems.
#[derive(Debug, Deserialize)]
struct ListQuery {
    limit: Option<String>,
    starting_after: Option<String>,
}

/// A page of transfers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TransferList {
    /// The caller's transfers, newest first.
    pub data: Vec<TransferView>,
    /// True when older transfers follow; pass the last `id` as `starting_after`.
    pub has_more: bool,
}

/// The caller's transfers, newest first, with keyset pagination.
#[utoipa::path(
    get, path = "/transfers", tag = "transfers",
    params(
        ("limit" = Option<i64>, Query, description = "Page size, 1-100, default 20", minimum = 1, maximum = 100),
        ("starting_after" = Option<uuid::Uuid>, Query, description = "Id of the last transfer of the previous page; it must name one of the caller's transfers (else 422 validation-failed)"),
    ),
    responses(
        (status = 200, body = TransferList, content_type = "application/json"),
        (status = 422, description = "validation-failed: bad `limit` or `starting_after` (with `errors`)", body = crate::api::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let query: ListQuery = query::parse(req.query_string())?;
    let limit = query::page_limit(query.limit.as_deref())?;
    let cursor = query
        .starting_after
        .as_deref()
        .map(|raw| {
            Uuid::parse_str(raw).map_err(|_| invalid("starting_after", "must be a transfer id"))
        })
        .transpose()?;
    let page = state
        .store
        .transfers_page(caller.0, limit, cursor)
        .await?
        .ok_or_else(|| invalid("starting_after", "names no transfer of yours"))?;
    assert!(
        page.transfers.len() as i64 <= limit,
        "a page keeps to its limit"
    );
    assert!(
        page.transfers.iter().all(|t| t.client_id == caller.0),
        "a client lists only its own transfers"
    );
    assert!(
        page.transfers
            .windows(2)
            .all(|w| (w[0].created_at, w[0].id) > (w[1].created_at, w[1].id))
            && cursor.is_none_or(|c| page.transfers.iter().all(|t| t.id != c)),
        "a page is newest first, and past its cursor"
    );
    Ok(HttpResponse::Ok().json(TransferList {
        data: page.transfers.iter().map(TransferView::from).collect(),
        has_more: page.has_more,
    }))
}
