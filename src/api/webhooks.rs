//! `/webhook_endpoints` and `/events`: where a client's final statuses are
//! pushed, and what was pushed.

use std::time::Duration;

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::body::{parse_endpoint, read_limited, require_json};
use super::query::{self, invalid};
use super::{ApiError, AppState, Caller};
use crate::domain::webhook::{event_id_text, parse_event_id, EventType, WebhookSecret};
use crate::store::webhooks::{
    DeliveryRecord, DeliveryState, Endpoint, EndpointRefused, EventFilter, EventRecord,
};

/// How long the previous secret keeps signing after a rotation.
pub const ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);

fn ts(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A webhook endpoint (its secret is shown only when created or rotated).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EndpointView {
    /// Endpoint id (a UUID).
    pub id: Uuid,
    /// Where deliveries are POSTed.
    pub url: String,
    /// The owner's note.
    pub description: Option<String>,
    /// When it was registered (RFC 3339).
    pub created_at: String,
    /// When it stopped receiving because a delivery was answered `410 Gone`.
    pub disabled_at: Option<String>,
}

impl From<&Endpoint> for EndpointView {
    fn from(e: &Endpoint) -> Self {
        Self {
            id: e.id,
            url: e.url.clone(),
            description: e.description.clone(),
            created_at: ts(e.created_at),
            disabled_at: e.disabled_at.map(ts),
        }
    }
}

/// A new endpoint, with its signing secret: the only time it is shown.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CreatedEndpoint {
    /// Endpoint id (a UUID).
    pub id: Uuid,
    /// Where deliveries are POSTed.
    pub url: String,
    /// The owner's note.
    pub description: Option<String>,
    /// `whsec_` and the base64 of 32 random bytes; the HMAC-SHA256 key is
    /// the decoded bytes.
    #[schema(pattern = "^whsec_[A-Za-z0-9+/]{43}=$")]
    pub secret: String,
    /// When it was registered (RFC 3339).
    pub created_at: String,
}

/// A rotated secret.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RotatedSecret {
    /// Endpoint id.
    pub id: Uuid,
    /// The new secret; deliveries carry a signature by it and, for 24 hours,
    /// one by the previous secret too.
    #[schema(pattern = "^whsec_[A-Za-z0-9+/]{43}=$")]
    pub secret: String,
}

/// `POST /webhook_endpoints`, for the document only: the handler parses the
/// JSON itself to report every broken rule.
#[derive(utoipa::ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct CreateEndpoint {
    /// An `http` or `https` URL without credentials. Loopback, private and
    /// link-local addresses (and host names resolving to them) are refused
    /// unless the server runs with `--webhook-allow-private`.
    #[schema(
        format = "uri",
        max_length = 2048,
        example = "https://example.com/payrail-hooks"
    )]
    url: String,
    /// At most 140 characters; null means absent.
    #[schema(max_length = 140, pattern = "^[^\\u0000]*$")]
    description: Option<String>,
}

/// The client's endpoints.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EndpointList {
    /// Oldest first.
    pub data: Vec<EndpointView>,
}

/// One delivery of an event.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryView {
    /// The endpoint.
    pub endpoint_id: Uuid,
    /// Attempts so far.
    pub attempts: i32,
    /// The receiver's last HTTP status, if it answered.
    pub last_status: Option<i32>,
    /// What went wrong last (at most 255 characters).
    pub last_error: Option<String>,
    /// When it is tried next; null once delivered or dead.
    pub next_attempt_at: Option<String>,
    /// When the receiver accepted it.
    pub delivered_at: Option<String>,
    /// When it ran out of attempts (or its endpoint went away).
    pub dead_at: Option<String>,
}

impl From<&DeliveryRecord> for DeliveryView {
    fn from(d: &DeliveryRecord) -> Self {
        Self {
            endpoint_id: d.endpoint_id,
            attempts: d.attempts,
            last_status: d.last_status,
            last_error: d.last_error.clone(),
            next_attempt_at: d.next_attempt_at.map(ts),
            delivered_at: d.delivered_at.map(ts),
            dead_at: d.dead_at.map(ts),
        }
    }
}

/// An event, as delivered, with its deliveries.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventView {
    /// `evt_<uuid>`: the `webhook-id` of its deliveries.
    #[schema(pattern = "^evt_[0-9a-f-]{36}$")]
    pub id: String,
    /// What happened.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// When (RFC 3339).
    pub created_at: String,
    /// `{"object": <the transfer>}`.
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
    /// One per endpoint the client had when the event was written.
    pub deliveries: Vec<DeliveryView>,
}

impl TryFrom<&EventRecord> for EventView {
    type Error = ApiError;

    fn try_from(e: &EventRecord) -> Result<Self, ApiError> {
        #[derive(Deserialize)]
        struct Stored {
            created_at: String,
            data: serde_json::Value,
        }
        let stored: Stored = serde_json::from_str(&e.body).map_err(|err| {
            tracing::error!(event = %e.id, error = %err, "stored event body does not parse");
            ApiError::Unavailable
        })?;
        Ok(Self {
            id: event_id_text(e.id),
            kind: e.kind,
            created_at: stored.created_at,
            data: stored.data,
            deliveries: e.deliveries.iter().map(DeliveryView::from).collect(),
        })
    }
}

/// A page of events.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventList {
    /// Newest first.
    pub data: Vec<EventView>,
    /// True when older events follow; pass the last `id` as `starting_after`.
    pub has_more: bool,
}

/// What `redeliver` did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Redelivery {
    /// The event.
    pub id: String,
    /// Deliveries now due (dead or pending ones to live endpoints).
    pub deliveries_due: u64,
}

/// Registers an endpoint for the caller's final transfer statuses.
#[utoipa::path(
    post, path = "/webhook_endpoints", tag = "webhooks",
    request_body(content = CreateEndpoint, content_type = "application/json"),
    responses(
        (status = 201, description = "Registered; `secret` is shown only here", body = CreatedEndpoint, content_type = "application/json"),
        (status = 400, description = "malformed-json", body = crate::api::problem::Problem, content_type = "application/problem+json"),
        (status = 408, description = "request-timeout", body = crate::api::problem::Problem, content_type = "application/problem+json"),
        (status = 413, description = "payload-too-large", body = crate::api::problem::Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported-media-type", body = crate::api::problem::Problem, content_type = "application/problem+json"),
        (status = 422, description = "validation-failed (naming `url` or `description`), or webhook-endpoint-limit: the client has the most endpoints allowed (10 by default)", body = crate::api::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn create_endpoint(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    require_json(&req)?;
    let body = read_limited(&req, payload, state.body_bytes_max, state.body_read_timeout).await?;
    let new = parse_endpoint(&body, state.webhook_policy)?;
    let secret = WebhookSecret::generate();
    let description = new.description.as_ref().map(|d| d.as_str());
    let endpoint = state
        .store
        .endpoints()
        .create(
            caller.0,
            &new.url,
            description,
            &secret,
            state.webhook_endpoints_max,
        )
        .await
        .map_err(|e| match e {
            EndpointRefused::TooMany => ApiError::EndpointLimit(state.webhook_endpoints_max),
            EndpointRefused::Store(e) => e.into(),
        })?;
    Ok(HttpResponse::Created().json(CreatedEndpoint {
        id: endpoint.id,
        url: endpoint.url,
        description: endpoint.description,
        secret: secret.encode(),
        created_at: ts(endpoint.created_at),
    }))
}

/// The caller's endpoints, without secrets.
#[utoipa::path(
    get, path = "/webhook_endpoints", tag = "webhooks",
    responses(
        (status = 200, body = EndpointList, content_type = "application/json"),
    ),
    security(("bearer" = []))
)]
pub async fn list_endpoints(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let endpoints = state.store.endpoints().list(caller.0).await?;
    Ok(HttpResponse::Ok().json(EndpointList {
        data: endpoints.iter().map(EndpointView::from).collect(),
    }))
}

/// Deletes an endpoint: no later event goes to it.
#[utoipa::path(
    delete, path = "/webhook_endpoints/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id. Any other text, or another client's id, answers 404.")),
    responses(
        (status = 204, description = "Deleted; its pending deliveries are dead"),
        (status = 404, description = "not-found (also for another client's endpoint)", body = crate::api::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn delete_endpoint(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = Uuid::parse_str(&id).map_err(|_| ApiError::NotFound)?;
    if state.store.endpoints().delete(caller.0, id).await? {
        Ok(HttpResponse::NoContent().finish())
    } else {
        Err(ApiError::NotFound)
    }
}

/// Gives an endpoint a new secret; the old one keeps signing for 24 hours.
#[utoipa::path(
    post, path = "/webhook_endpoints/{id}/rotate_secret", tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id. Any other text, or another client's id, answers 404.")),
    responses(
        (status = 200, body = RotatedSecret, content_type = "application/json"),
        (status = 404, description = "not-found", body = crate::api::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn rotate_secret(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = Uuid::parse_str(&id).map_err(|_| ApiError::NotFound)?;
    let secret = WebhookSecret::generate();
    let endpoint = state
        .store
        .endpoints()
        .rotate_secret(caller.0, id, &secret, ROTATION_OVERLAP)
        .await?
        .ok_or(ApiError::NotFound)?;
    assert_eq!(endpoint.id, id, "the rotated endpoint is the one named");
    Ok(HttpResponse::Ok().json(RotatedSecret {
        id: endpoint.id,
        secret: secret.encode(),
    }))
}

/// Query of `GET /events`, taken as text so bad values become problems.
#[derive(Debug, Deserialize)]
struct EventQuery {
    limit: Option<String>,
    starting_after: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    delivery: Option<String>,
}

/// The caller's events, newest first, with their deliveries.
#[utoipa::path(
    get, path = "/events", tag = "webhooks",
    params(
        ("limit" = Option<i64>, Query, description = "Page size, 1-100, default 20", minimum = 1, maximum = 100),
        ("starting_after" = Option<String>, Query, description = "Id of the last event of the previous page; it must name one of the caller's events (else 422 validation-failed)", pattern = "^evt_[0-9a-f-]{36}$"),
        ("type" = Option<EventType>, Query, description = "Only events of this type"),
        ("delivery" = Option<String>, Query, description = "Only events with a delivery pending (`pending`), dead (`dead`), or all delivered (`delivered`)", pattern = "^(pending|delivered|dead)$"),
    ),
    responses(
        (status = 200, body = EventList, content_type = "application/json"),
        (status = 422, description = "validation-failed: a bad query value (with `errors`)", body = crate::api::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn list_events(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let query: EventQuery = query::parse(req.query_string())?;
    let limit = query::page_limit(query.limit.as_deref())?;
    let starting_after = query
        .starting_after
        .as_deref()
        .map(|raw| {
            parse_event_id(raw).ok_or_else(|| invalid("starting_after", "must be an event id"))
        })
        .transpose()?;
    let kind = query
        .kind
        .as_deref()
        .map(|raw| {
            EventType::parse(raw)
                .ok_or_else(|| invalid("type", "must be transfer.succeeded or transfer.failed"))
        })
        .transpose()?;
    let delivery = query
        .delivery
        .as_deref()
        .map(|raw| {
            DeliveryState::parse(raw)
                .ok_or_else(|| invalid("delivery", "must be pending, delivered or dead"))
        })
        .transpose()?;
    let filter = EventFilter {
        limit,
        starting_after,
        kind,
        delivery,
    };
    let page = state
        .store
        .events()
        .page(caller.0, filter)
        .await?
        .ok_or_else(|| invalid("starting_after", "names no event of yours"))?;
    assert!(
        page.events.len() as i64 <= limit,
        "a page keeps to its limit"
    );
    Ok(HttpResponse::Ok().json(EventList {
        data: page
            .events
            .iter()
            .map(EventView::try_from)
            .collect::<Result<_, _>>()?,
        has_more: page.has_more,
    }))
}

/// Makes an event's dead and pending deliveries due now, each with a new
/// retry schedule.
#[utoipa::path(
    post, path = "/events/{id}/redeliver", tag = "webhooks",
    params(("id" = String, Path, description = "Event id (`evt_<uuid>`). Any other text, or another client's id, answers 404.")),
    responses(
        (status = 202, description = "Due now", body = Redelivery, content_type = "application/json"),
        (status = 404, description = "not-found", body = crate::api::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn redeliver(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_event_id(&id).ok_or(ApiError::NotFound)?;
    let due = state
        .store
        .events()
        .redeliver(caller.0, id)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Accepted().json(Redelivery {
        id: event_id_text(id),
        deliveries_due: due,
    }))
}
