//! The console's handlers: parse the query or form, ask the store, render.

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use uuid::Uuid;

use super::session::{cookie, removal, Operator, SESSION_COOKIE, SIGN_IN_COOKIE};
use super::views::{self, TransferQuery};
use super::{see_other, ConsoleError, ConsoleState};
use crate::domain::{secrets_match, ConsoleSecret, TransferStatus};
use crate::store::console::TransferFilter;

type State = web::Data<ConsoleState>;

fn html(markup: maud::Markup) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(markup.into_string())
}

/// Empty form fields mean "no filter".
fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

fn parse_uuid(v: &Option<String>, what: &str) -> Result<Option<Uuid>, ConsoleError> {
    given(v)
        .map(|s| {
            Uuid::parse_str(s)
                .map_err(|_| ConsoleError::BadInput(format!("{what}: expected a UUID, got {s:?}")))
        })
        .transpose()
}

/// A time from a filter: RFC 3339, or a browser's `datetime-local` value
/// (read as UTC), or a date.
fn parse_time(v: &Option<String>, what: &str) -> Result<Option<DateTime<Utc>>, ConsoleError> {
    let Some(s) = given(v) else { return Ok(None) };
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(Some(t.with_timezone(&Utc)));
    }
    for format in ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, format) {
            return Ok(Some(t.and_utc()));
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).map(|t| t.and_utc()));
    }
    Err(ConsoleError::BadInput(format!(
        "{what}: expected a time such as 2026-12-06T16:30 (UTC), got {s:?}"
    )))
}

/// `path?query` for a next-page link.
fn link<T: serde::Serialize>(path: &str, query: &T) -> String {
    format!(
        "{path}?{}",
        serde_urlencoded::to_string(query).unwrap_or_default()
    )
}

/// `GET /console`
pub async fn index() -> HttpResponse {
    see_other("/console/transfers")
}

/// The stylesheet, compiled in.
pub async fn stylesheet() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css; charset=utf-8")
        .body(include_str!("assets/console.css"))
}

/// The live view's script, compiled in.
pub async fn script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .body(include_str!("assets/console.js"))
}

/// `GET /console/sign-in`: the form, with a fresh double-submit token.
pub async fn sign_in_page(req: HttpRequest) -> HttpResponse {
    let csrf = ConsoleSecret::session();
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .cookie(cookie(
            &req,
            SIGN_IN_COOKIE,
            csrf.expose_secret().to_owned(),
        ))
        .body(views::sign_in(csrf.expose_secret(), None).into_string())
}

/// The sign-in form.
#[derive(serde::Deserialize)]
pub struct SignInForm {
    token: String,
    csrf: Option<String>,
}

/// `POST /console/sign-in`: an operator token opens a session.
pub async fn sign_in(
    req: HttpRequest,
    state: State,
    form: web::Form<SignInForm>,
) -> Result<HttpResponse, ConsoleError> {
    let expected = req.cookie(SIGN_IN_COOKIE).map(|c| c.value().to_owned());
    match (expected.as_deref(), form.csrf.as_deref()) {
        (Some(a), Some(b)) if secrets_match(a, b) => {}
        _ => return Err(ConsoleError::Csrf),
    }
    let token = ConsoleSecret::from_presented(&form.token).hash();
    let session = ConsoleSecret::session();
    let csrf = ConsoleSecret::session();
    let signed_in = state
        .store
        .console()
        .sign_in(
            &token,
            &session.hash(),
            csrf.expose_secret(),
            state.session_ttl,
        )
        .await?;
    let Some(name) = signed_in else {
        tracing::warn!("console sign-in refused: the token matches no live operator");
        let retry = ConsoleSecret::session();
        return Ok(HttpResponse::Unauthorized()
            .content_type("text/html; charset=utf-8")
            .cookie(cookie(
                &req,
                SIGN_IN_COOKIE,
                retry.expose_secret().to_owned(),
            ))
            .body(
                views::sign_in(
                    retry.expose_secret(),
                    Some(&ConsoleError::BadToken.to_string()),
                )
                .into_string(),
            ));
    };
    tracing::info!(operator = %name, "console sign-in");
    let mut session_cookie = cookie(&req, SESSION_COOKIE, session.expose_secret().to_owned());
    session_cookie.set_max_age(
        actix_web::cookie::time::Duration::try_from(state.session_ttl)
            .unwrap_or(actix_web::cookie::time::Duration::HOUR),
    );
    Ok(HttpResponse::SeeOther()
        .insert_header((header::LOCATION, "/console/transfers"))
        .cookie(session_cookie)
        .cookie(removal(&req, SIGN_IN_COOKIE))
        .finish())
}

/// A form that only carries the CSRF token.
#[derive(serde::Deserialize)]
pub struct CsrfForm {
    csrf: Option<String>,
}

/// `POST /console/sign-out`
pub async fn sign_out(
    req: HttpRequest,
    op: Operator,
    state: State,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, ConsoleError> {
    op.check_csrf(form.csrf.as_deref())?;
    if let Some(c) = req.cookie(SESSION_COOKIE) {
        let hash = ConsoleSecret::from_presented(c.value()).hash();
        state.store.console().sign_out(&hash).await?;
    }
    Ok(HttpResponse::SeeOther()
        .insert_header((header::LOCATION, "/console/sign-in"))
        .cookie(removal(&req, SESSION_COOKIE))
        .finish())
}

/// `GET /console/transfers`: filters in the URL, so a view is a bookmark.
pub async fn transfers(
    op: Operator,
    state: State,
    q: web::Query<TransferQuery>,
) -> Result<HttpResponse, ConsoleError> {
    let q = q.into_inner();
    let console = state.store.console();
    let client_id = parse_uuid(&q.client, "client")?;
    if let Some(id) = parse_uuid(&q.id, "transfer")? {
        // An id names one transfer: go straight to its timeline.
        return Ok(see_other(&format!("/console/transfers/{id}")));
    }
    if let Some(key) = given(&q.key) {
        let lines = console
            .transfers_by_key(key, client_id, state.page_rows_max)
            .await?;
        assert!(
            lines.len() as i64 <= state.page_rows_max
                && lines.iter().all(|l| l.idempotency_key == key
                    && client_id.is_none_or(|c| l.client_id == c)),
            "a key's page holds only that key's transfers, at most a page"
        );
        return Ok(html(views::transfers(&op.0, &q, &lines, None, None)));
    }
    let status = given(&q.status)
        .map(|s| {
            TransferStatus::parse(s)
                .ok_or_else(|| ConsoleError::BadInput(format!("status: unknown status {s:?}")))
        })
        .transpose()?;
    let filter = TransferFilter {
        status,
        client_id,
        provider_reference: given(&q.reference).map(str::to_owned),
        from: parse_time(&q.from, "from")?,
        to: parse_time(&q.to, "to")?,
    };
    let before = parse_uuid(&q.before, "before")?;
    let page = console
        .transfers(&filter, before, state.page_rows_max, state.scan_rows_max)
        .await?;
    assert!(
        page.lines.len() as i64 <= state.page_rows_max
            && page.lines.iter().all(|l| {
                filter.client_id.is_none_or(|c| l.client_id == c)
                    && filter.status.is_none_or(|s| l.status == s.as_str())
                    && before.is_none_or(|b| l.id != b)
            }),
        "a page holds at most a page of matches, past its cursor"
    );
    let next = page.next.map(|n| {
        link(
            "/console/transfers",
            &TransferQuery {
                id: None,
                key: None,
                before: Some(n.to_string()),
                ..q.clone()
            },
        )
    });
    Ok(html(views::transfers(
        &op.0,
        &q,
        &page.lines,
        next,
        page.scan_exhausted,
    )))
}

/// `GET /console/transfers/{id}`: the timeline.
pub async fn transfer(
    op: Operator,
    state: State,
    path: web::Path<String>,
) -> Result<HttpResponse, ConsoleError> {
    let id = parse_uuid(&Some(path.into_inner()), "transfer")?
        .ok_or(ConsoleError::NotFound("transfer"))?;
    let timeline = state
        .store
        .console()
        .timeline(id)
        .await?
        .ok_or(ConsoleError::NotFound("transfer"))?;
    Ok(html(views::timeline(&op.0, &timeline)))
}

/// The dead rows' filter, and what the last action did.
#[derive(serde::Deserialize)]
pub struct DeadQuery {
    error: Option<String>,
    retried: Option<u64>,
}

/// `GET /console/outbox`: dead rows.
pub async fn dead_rows(
    op: Operator,
    state: State,
    q: web::Query<DeadQuery>,
) -> Result<HttpResponse, ConsoleError> {
    let error = given(&q.error);
    let (rows, count) = state
        .store
        .console()
        .dead_rows(error, state.page_rows_max)
        .await?;
    let note = q
        .retried
        .map(|n| format!("{n} rows are due again; the relay takes them now."));
    Ok(html(views::dead_rows(&op.0, error, &rows, count, note)))
}

/// `GET /console/outbox/retry`: how many rows a bulk retry would touch.
pub async fn retry_confirm(
    op: Operator,
    state: State,
    q: web::Query<DeadQuery>,
) -> Result<HttpResponse, ConsoleError> {
    let error = given(&q.error);
    let (_, count) = state.store.console().dead_rows(error, 1).await?;
    Ok(html(views::retry_confirm(
        &op.0,
        error,
        count,
        state.bulk_rows_max,
    )))
}

/// A retry: one transfer's row, or every dead row matching a filter.
#[derive(serde::Deserialize)]
pub struct RetryForm {
    csrf: Option<String>,
    transfer_id: Option<String>,
    error: Option<String>,
    all: Option<String>,
}

/// `POST /console/outbox/retry`
pub async fn retry(
    op: Operator,
    state: State,
    form: web::Form<RetryForm>,
) -> Result<HttpResponse, ConsoleError> {
    op.check_csrf(form.csrf.as_deref())?;
    let transfer_id = parse_uuid(&form.transfer_id, "transfer")?;
    if transfer_id.is_none() && given(&form.all).is_none() {
        return Err(ConsoleError::BadInput(
            "name a transfer, or confirm a retry of every matching row".into(),
        ));
    }
    let n = state
        .store
        .console()
        .retry_dead(
            &op.0,
            transfer_id,
            given(&form.error),
            state.bulk_rows_max,
            state.bulk_retry_rows_per_second,
        )
        .await?;
    assert!(
        n <= state.bulk_rows_max as u64 && (transfer_id.is_none() || n <= 1),
        "a retry stays within its limit"
    );
    tracing::info!(operator = %op.0.operator_name, rows = n, "console: dead outbox rows retried");
    Ok(match transfer_id {
        Some(id) => see_other(&format!("/console/transfers/{id}")),
        None => see_other(&format!("/console/outbox?retried={n}")),
    })
}

/// `GET /console/processing`: oldest `processing` first.
pub async fn processing(op: Operator, state: State) -> Result<HttpResponse, ConsoleError> {
    let rows = state
        .store
        .polls()
        .stuck(std::time::Duration::ZERO, state.page_rows_max)
        .await?;
    let stuck_before = Utc::now()
        - chrono::Duration::from_std(state.processing_max).unwrap_or(chrono::Duration::MAX);
    let label = humantime::format_duration(state.processing_max).to_string();
    Ok(html(views::processing(&op.0, &rows, &label, stuck_before)))
}

/// The events page's filters.
#[derive(serde::Deserialize, serde::Serialize, Default)]
pub struct EventQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    transfer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dead: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    before: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    redelivered: Option<u64>,
}

/// `GET /console/events`
pub async fn events(
    op: Operator,
    state: State,
    q: web::Query<EventQuery>,
) -> Result<HttpResponse, ConsoleError> {
    if let Some(id) = parse_uuid(&q.transfer, "transfer")? {
        // One transfer's events are on its timeline, with their redeliver
        // buttons.
        return Ok(see_other(&format!("/console/transfers/{id}#events")));
    }
    let dead = given(&q.dead).is_some();
    let before = parse_uuid(&q.before, "before")?;
    let (events, next) = state
        .store
        .console()
        .events(dead, before, state.page_rows_max)
        .await?;
    let next = next.map(|n| {
        link(
            "/console/events",
            &EventQuery {
                transfer: None,
                dead: q.dead.clone(),
                before: Some(n.to_string()),
                redelivered: None,
            },
        )
    });
    let note = q
        .redelivered
        .map(|n| format!("{n} deliveries are due again."));
    Ok(html(views::events(&op.0, dead, &events, next, note)))
}

/// `POST /console/events/{id}/redeliver`
pub async fn redeliver(
    op: Operator,
    state: State,
    path: web::Path<String>,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, ConsoleError> {
    op.check_csrf(form.csrf.as_deref())?;
    let id =
        parse_uuid(&Some(path.into_inner()), "event")?.ok_or(ConsoleError::NotFound("event"))?;
    let n = state
        .store
        .console()
        .redeliver_event(&op.0, id)
        .await?
        .ok_or(ConsoleError::NotFound("event"))?;
    tracing::info!(operator = %op.0.operator_name, event = %id, deliveries = n, "console: event redelivered");
    Ok(see_other(&format!("/console/events?redelivered={n}")))
}

/// What the last endpoint action did.
#[derive(serde::Deserialize)]
pub struct EndpointQuery {
    revived: Option<u64>,
}

/// `GET /console/endpoints`
pub async fn endpoints(
    op: Operator,
    state: State,
    q: web::Query<EndpointQuery>,
) -> Result<HttpResponse, ConsoleError> {
    let lines = state.store.console().endpoints(state.page_rows_max).await?;
    let note = q
        .revived
        .map(|n| format!("Endpoint live; {n} deliveries are due again."));
    Ok(html(views::endpoints(&op.0, &lines, note)))
}

/// `GET /console/endpoints/{id}/revive`: what reviving it would touch.
pub async fn revive_confirm(
    op: Operator,
    state: State,
    path: web::Path<String>,
) -> Result<HttpResponse, ConsoleError> {
    let id = parse_uuid(&Some(path.into_inner()), "endpoint")?
        .ok_or(ConsoleError::NotFound("endpoint"))?;
    let line = state
        .store
        .console()
        .endpoint(id)
        .await?
        .ok_or(ConsoleError::NotFound("endpoint needing an operator"))?;
    Ok(html(views::revive_confirm(
        &op.0,
        &line,
        state.bulk_rows_max,
    )))
}

/// `POST /console/endpoints/{id}/revive`
pub async fn revive(
    op: Operator,
    state: State,
    path: web::Path<String>,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, ConsoleError> {
    op.check_csrf(form.csrf.as_deref())?;
    let id = parse_uuid(&Some(path.into_inner()), "endpoint")?
        .ok_or(ConsoleError::NotFound("endpoint"))?;
    let n = state
        .store
        .console()
        .revive_endpoint(&op.0, id, state.bulk_rows_max)
        .await?
        .ok_or(ConsoleError::NotFound("endpoint"))?;
    tracing::info!(operator = %op.0.operator_name, endpoint = %id, deliveries = n, "console: endpoint revived");
    Ok(see_other(&format!("/console/endpoints?revived={n}")))
}

/// `GET /console/live`
pub async fn live(op: Operator, state: State) -> Result<HttpResponse, ConsoleError> {
    let figures = state.store.console().live().await?;
    Ok(html(views::live(&op.0, &figures)))
}

/// `GET /console/live.json`: what the live view refreshes from.
pub async fn live_json(_op: Operator, state: State) -> Result<HttpResponse, ConsoleError> {
    let figures = state.store.console().live().await?;
    Ok(HttpResponse::Ok().json(figures))
}

/// The audit page's cursor.
#[derive(serde::Deserialize)]
pub struct AuditQuery {
    before: Option<i64>,
}

/// `GET /console/audit`
pub async fn audit(
    op: Operator,
    state: State,
    q: web::Query<AuditQuery>,
) -> Result<HttpResponse, ConsoleError> {
    let (lines, next) = state
        .store
        .console()
        .audit(q.before, state.page_rows_max)
        .await?;
    let next = next.map(|n| format!("/console/audit?before={n}"));
    Ok(html(views::audit(&op.0, &lines, next)))
}
