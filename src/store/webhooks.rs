//! Webhook endpoints, events and deliveries. Events are written inside the
//! relay's settlement transaction ([`insert_events`]); deliveries are a
//! leased queue ([`DELIVERIES`], `store::queue`) like the outbox, claimed
//! fairly by endpoint.

use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::queue::{self, Claim, QueueTable, Reschedule};
use super::{Store, StoreError};
use crate::domain::webhook::{EndpointUrl, EventType, NewEvent, WebhookSecret};
use crate::domain::ClientId;

/// An endpoint as its owner sees it (never with its secret).
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Its id.
    pub id: Uuid,
    /// Where deliveries go.
    pub url: String,
    /// The owner's note.
    pub description: Option<String>,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
    /// When a receiver answered `410 Gone` and it stopped receiving.
    pub disabled_at: Option<DateTime<Utc>>,
}

/// Why an endpoint was not created.
#[derive(Debug, thiserror::Error)]
pub enum EndpointRefused {
    /// The client already has the most endpoints allowed.
    #[error("the client has the most webhook endpoints allowed")]
    TooMany,
    /// Postgres failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where a delivery stands, for the `delivery` filter of `GET /events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    /// Neither delivered nor dead yet.
    Pending,
    /// Accepted by the receiver.
    Delivered,
    /// Out of attempts (or its endpoint is gone).
    Dead,
}

impl DeliveryState {
    /// The filter's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Dead => "dead",
        }
    }

    /// The state named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Pending, Self::Delivered, Self::Dead]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

/// One delivery of an event, as `GET /events` shows it.
#[derive(Debug, Clone)]
pub struct DeliveryRecord {
    /// The endpoint it goes to.
    pub endpoint_id: Uuid,
    /// Attempts so far.
    pub attempts: i32,
    /// The receiver's last HTTP status, if it answered.
    pub last_status: Option<i32>,
    /// What went wrong last.
    pub last_error: Option<String>,
    /// When it is next tried (pending only).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// When the receiver accepted it.
    pub delivered_at: Option<DateTime<Utc>>,
    /// When it ran out of attempts.
    pub dead_at: Option<DateTime<Utc>>,
}

/// A stored event with its deliveries.
#[derive(Debug, Clone)]
pub struct EventRecord {
    /// Its id.
    pub id: Uuid,
    /// Its type.
    pub kind: EventType,
    /// The bytes every delivery sends.
    pub body: String,
    /// One per endpoint the client had when it was written.
    pub deliveries: Vec<DeliveryRecord>,
}

/// One page of a client's events, newest first.
#[derive(Debug)]
pub struct EventPage {
    /// At most the requested number of events.
    pub events: Vec<EventRecord>,
    /// True when older events follow.
    pub has_more: bool,
}

/// Which events a page holds.
#[derive(Debug, Clone, Copy)]
pub struct EventFilter {
    /// Page size.
    pub limit: i64,
    /// The last event of the previous page.
    pub starting_after: Option<Uuid>,
    /// Only events of this type.
    pub kind: Option<EventType>,
    /// Only events with a delivery in this state (`Delivered`: all delivered).
    pub delivery: Option<DeliveryState>,
}

/// A delivery this process now holds until its lease runs out.
#[derive(Debug, Clone)]
pub struct ClaimedDelivery {
    /// The event.
    pub event_id: Uuid,
    /// The endpoint.
    pub endpoint_id: Uuid,
    /// This claim's number: the fencing token.
    pub attempt: i32,
    /// Attempts of the current schedule, this one included.
    pub schedule_attempt: i32,
    /// The exact body to send.
    pub body: String,
    /// The endpoint's URL; `None` once the endpoint was deleted or disabled.
    pub url: Option<EndpointUrl>,
    /// The current secret, then the previous one while a rotation overlaps.
    pub secrets: Vec<WebhookSecret>,
}

/// How a delivery attempt ended, as Postgres records it.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliverySettlement {
    /// A `2xx`.
    Delivered {
        /// The status.
        status: u16,
    },
    /// Try again after `delay`.
    Retry {
        /// When.
        delay: Duration,
        /// The status, if the receiver answered.
        status: Option<u16>,
        /// What went wrong (bounded).
        error: String,
    },
    /// No more attempts.
    Dead {
        /// The status, if the receiver answered.
        status: Option<u16>,
        /// What went wrong (bounded).
        error: String,
    },
    /// The receiver answered `410 Gone`: the delivery is dead and the
    /// endpoint disabled, with every delivery still pending to it.
    Gone,
}

/// Figures for `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct WebhookStats {
    /// Deliveries neither delivered nor dead.
    pub backlog: i64,
    /// Dead deliveries.
    pub dead: i64,
    /// Age of the oldest due delivery, in seconds (0 when none is due).
    pub oldest_due_age_secs: f64,
}

/// The channel a settlement that wrote deliveries (or a redelivery)
/// notifies, and every delivery worker listens on.
pub const WEBHOOK_CHANNEL: &str = "payrail_webhooks";

/// Writes one event per transfer that became final, and one delivery per
/// live endpoint of its client, in the caller's transaction. Returns the
/// number of deliveries written.
const INSERT_EVENTS: &str = "
WITH e AS (
    INSERT INTO webhook_events (client_id, id, transfer_id, type, body, created_at)
    SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::timestamptz[])
    RETURNING client_id, id
), d AS (
    INSERT INTO webhook_deliveries (event_id, endpoint_id, client_id)
    SELECT e.id, ep.id, e.client_id FROM e
    JOIN webhook_endpoints ep ON ep.client_id = e.client_id
        AND ep.deleted_at IS NULL AND ep.disabled_at IS NULL
    RETURNING 1
)
SELECT count(*) FROM d";

/// Deliveries as a leased queue: claimed oldest first, but at most
/// `--webhook-endpoint-in-flight-max` at once per endpoint and
/// `--webhook-client-in-flight-max` per client, so a receiver that hangs
/// holds its owner's slots only.
pub const DELIVERIES: QueueTable = QueueTable {
    table: "webhook_deliveries",
    key: &[("event_id", "uuid"), ("endpoint_id", "uuid")],
    due: "next_attempt_at",
    open: "q.delivered_at IS NULL AND q.dead_at IS NULL",
    on_claim: "",
    claim_returns: "",
    fair_by: &["endpoint_id", "client_id"],
    payload:
        "SELECT c.event_id, c.endpoint_id, c.attempts, c.budget_used, c.reclaimed, c.leased, e.body,
       CASE WHEN ep.deleted_at IS NULL AND ep.disabled_at IS NULL THEN ep.url END AS url,
       ep.secret,
       CASE WHEN ep.previous_secret_until > now() THEN ep.previous_secret END AS previous_secret
FROM claimed c
JOIN webhook_events e ON e.id = c.event_id
JOIN webhook_endpoints ep ON ep.id = c.endpoint_id",
    reschedule_extra: ("status", "int4", "last_status = i.status"),
};

static CLAIM: LazyLock<String> = LazyLock::new(|| DELIVERIES.claim_sql());
static RESCHEDULE: LazyLock<String> = LazyLock::new(|| DELIVERIES.reschedule_sql());
static RELEASE: LazyLock<String> = LazyLock::new(|| DELIVERIES.release_sql());

/// What "done" writes for a delivery: accepted, each only if still held
/// under its claim.
const SETTLE_DELIVERED: &str = "
UPDATE webhook_deliveries q SET delivered_at = now(), locked_until = NULL,
    last_status = i.status, last_error = NULL
FROM UNNEST($1::uuid[], $2::uuid[], $3::int4[], $4::int4[]) AS i(event_id, endpoint_id, attempt, status)
WHERE q.event_id = i.event_id AND q.endpoint_id = i.endpoint_id AND q.attempts = i.attempt";

/// Disables endpoints that answered `410 Gone`, and ends what was pending to them.
const DISABLE_ENDPOINTS: &str = "
WITH off AS (
    UPDATE webhook_endpoints SET disabled_at = now()
    WHERE id = ANY($1) AND disabled_at IS NULL
    RETURNING id
)
UPDATE webhook_deliveries SET dead_at = now(), locked_until = NULL,
    last_error = COALESCE(last_error, 'endpoint disabled: a delivery was answered 410 Gone')
WHERE endpoint_id = ANY($1) AND delivered_at IS NULL AND dead_at IS NULL";

/// Deletes up to `$2` events made before `$1` (an id floor: event ids are
/// UUID v7) with their delivery records, skipping any event that still has
/// a delivery to make. `FOR UPDATE SKIP LOCKED` leaves alone an event that
/// a redelivery holds (it takes `FOR SHARE`), so a revived delivery is never
/// deleted under it, and two reapers never wait on each other.
const DELETE_OLD_EVENTS: &str = "
WITH old AS (
    SELECT e.id FROM webhook_events e
    WHERE e.id < $1
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                      WHERE d.event_id = e.id AND d.delivered_at IS NULL AND d.dead_at IS NULL)
    ORDER BY e.id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deliveries AS (
    DELETE FROM webhook_deliveries d USING old WHERE d.event_id = old.id
)
DELETE FROM webhook_events e USING old WHERE e.id = old.id";

/// Most characters of a receiver's answer kept in `last_error`.
const ERROR_CHARS_MAX: usize = 255;

/// Bounds `text` to what `last_error` keeps.
pub fn bounded_error(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(ERROR_CHARS_MAX)
        .collect()
}

/// Writes the events of transfers that just became final, in `tx`.
pub(super) async fn insert_events(
    tx: &deadpool_postgres::Transaction<'_>,
    events: &[NewEvent],
) -> Result<i64, StoreError> {
    if events.is_empty() {
        return Ok(0);
    }
    let mut client_id = Vec::with_capacity(events.len());
    let mut id = Vec::with_capacity(events.len());
    let mut transfer_id = Vec::with_capacity(events.len());
    let mut kind = Vec::with_capacity(events.len());
    let mut body = Vec::with_capacity(events.len());
    let mut created_at = Vec::with_capacity(events.len());
    for e in events {
        client_id.push(e.client_id);
        id.push(e.id);
        transfer_id.push(e.transfer_id);
        kind.push(e.kind.as_str());
        body.push(e.body.as_str());
        created_at.push(e.created_at);
    }
    let stmt = tx.prepare_cached(INSERT_EVENTS).await?;
    let row = tx
        .query_one(
            &stmt,
            &[&client_id, &id, &transfer_id, &kind, &body, &created_at],
        )
        .await?;
    let deliveries: i64 = row.get(0);
    if deliveries > 0 {
        // Delivered on COMMIT: no worker looks before the rows are visible.
        tx.execute("SELECT pg_notify($1, '')", &[&WEBHOOK_CHANNEL])
            .await?;
    }
    Ok(deliveries)
}

fn endpoint_from_row(row: &tokio_postgres::Row) -> Endpoint {
    Endpoint {
        id: row.get("id"),
        url: row.get("url"),
        description: row.get("description"),
        created_at: row.get("created_at"),
        disabled_at: row.get("disabled_at"),
    }
}

const ENDPOINT_COLUMNS: &str = "id, url, description, created_at, disabled_at";

impl Store {
    /// Registers an endpoint, unless the client already has `endpoints_max`.
    pub async fn create_endpoint(
        &self,
        client: ClientId,
        url: &EndpointUrl,
        description: Option<&str>,
        secret: &WebhookSecret,
        endpoints_max: i64,
    ) -> Result<Endpoint, EndpointRefused> {
        let id = Uuid::now_v7();
        let secret = secret.encode();
        let created = self
            .with_client(|mut conn| async move {
                let tx = conn.transaction().await?;
                // The client row's lock serializes creations, so two at once
                // cannot both pass the count.
                tx.execute(
                    "SELECT 1 FROM clients WHERE id = $1 FOR NO KEY UPDATE",
                    &[&client.0],
                )
                .await?;
                let live: i64 = tx
                    .query_one(
                        "SELECT count(*) FROM webhook_endpoints WHERE client_id = $1 AND deleted_at IS NULL",
                        &[&client.0],
                    )
                    .await?
                    .get(0);
                if live >= endpoints_max {
                    return Ok(None);
                }
                let row = tx
                    .query_one(
                        &format!(
                            "INSERT INTO webhook_endpoints (id, client_id, url, description, secret) \
                             VALUES ($1, $2, $3, $4, $5) RETURNING {ENDPOINT_COLUMNS}"
                        ),
                        &[&id, &client.0, &url.as_str(), &description, &secret],
                    )
                    .await?;
                tx.commit().await?;
                Ok(Some(endpoint_from_row(&row)))
            })
            .await?;
        created.ok_or(EndpointRefused::TooMany)
    }

    /// A client's live endpoints, oldest first.
    pub async fn endpoints(&self, client: ClientId) -> Result<Vec<Endpoint>, StoreError> {
        self.with_client(|conn| async move {
            let rows = conn
                .query(
                    &format!(
                        "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints \
                         WHERE client_id = $1 AND deleted_at IS NULL ORDER BY id"
                    ),
                    &[&client.0],
                )
                .await?;
            Ok(rows.iter().map(endpoint_from_row).collect())
        })
        .await
    }

    /// Deletes a client's endpoint: no later event goes to it, and what was
    /// pending to it is dead. False when the client has no such endpoint.
    pub async fn delete_endpoint(&self, client: ClientId, id: Uuid) -> Result<bool, StoreError> {
        self.with_client(|mut conn| async move {
            let tx = conn.transaction().await?;
            let n = tx
                .execute(
                    "UPDATE webhook_endpoints SET deleted_at = now() \
                     WHERE id = $1 AND client_id = $2 AND deleted_at IS NULL",
                    &[&id, &client.0],
                )
                .await?;
            if n == 1 {
                tx.execute(
                    "UPDATE webhook_deliveries SET dead_at = now(), locked_until = NULL, \
                     last_error = 'endpoint deleted' \
                     WHERE endpoint_id = $1 AND delivered_at IS NULL AND dead_at IS NULL",
                    &[&id],
                )
                .await?;
            }
            tx.commit().await?;
            Ok(n == 1)
        })
        .await
    }

    /// Gives an endpoint a new secret; the old one keeps signing alongside
    /// it for `overlap`. `None` when the client has no such endpoint.
    pub async fn rotate_endpoint_secret(
        &self,
        client: ClientId,
        id: Uuid,
        secret: &WebhookSecret,
        overlap: Duration,
    ) -> Result<Option<Endpoint>, StoreError> {
        let secret = secret.encode();
        self.with_client(|conn| async move {
            let row = conn
                .query_opt(
                    &format!(
                        "UPDATE webhook_endpoints SET previous_secret = secret, \
                         previous_secret_until = now() + make_interval(secs => $4), secret = $3 \
                         WHERE id = $1 AND client_id = $2 AND deleted_at IS NULL \
                         RETURNING {ENDPOINT_COLUMNS}"
                    ),
                    &[&id, &client.0, &secret, &overlap.as_secs_f64()],
                )
                .await?;
            Ok(row.as_ref().map(endpoint_from_row))
        })
        .await
    }

    /// A page of a client's events, newest first. `None` when the cursor
    /// names no event of this client.
    pub async fn events_page(
        &self,
        client: ClientId,
        filter: EventFilter,
    ) -> Result<Option<EventPage>, StoreError> {
        self.with_client(|conn| async move {
            if let Some(cursor) = filter.starting_after {
                let found = conn
                    .query_opt(
                        "SELECT 1 FROM webhook_events WHERE client_id = $1 AND id = $2",
                        &[&client.0, &cursor],
                    )
                    .await?;
                if found.is_none() {
                    return Ok(None);
                }
            }
            let fetch = filter.limit + 1;
            let kind = filter.kind.map(EventType::as_str);
            let delivery = filter.delivery.map(DeliveryState::as_str);
            let stmt = conn
                .prepare_cached(
                    "SELECT e.id, e.type, e.body FROM webhook_events e \
                     WHERE e.client_id = $1 AND ($2::uuid IS NULL OR e.id < $2) \
                       AND ($3::text IS NULL OR e.type = $3) \
                       AND CASE $4::text \
                         WHEN 'pending' THEN EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id \
                              AND d.delivered_at IS NULL AND d.dead_at IS NULL) \
                         WHEN 'dead' THEN EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id \
                              AND d.dead_at IS NOT NULL) \
                         WHEN 'delivered' THEN EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id) \
                              AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id \
                              AND d.delivered_at IS NULL) \
                         ELSE true END \
                     ORDER BY e.id DESC LIMIT $5",
                )
                .await?;
            let rows = conn
                .query(&stmt, &[&client.0, &filter.starting_after, &kind, &delivery, &fetch])
                .await?;
            let has_more = rows.len() as i64 > filter.limit;
            let mut events = Vec::with_capacity(rows.len());
            for row in rows.iter().take(filter.limit as usize) {
                let kind: String = row.get(1);
                events.push(EventRecord {
                    id: row.get(0),
                    kind: EventType::parse(&kind)
                        .ok_or_else(|| StoreError::Corrupt(format!("event type {kind}")))?,
                    body: row.get(2),
                    deliveries: Vec::new(),
                });
            }
            let ids: Vec<Uuid> = events.iter().map(|e| e.id).collect();
            let deliveries = conn
                .query(
                    "SELECT event_id, endpoint_id, attempts, last_status, last_error, \
                     CASE WHEN delivered_at IS NULL AND dead_at IS NULL THEN next_attempt_at END, \
                     delivered_at, dead_at \
                     FROM webhook_deliveries WHERE event_id = ANY($1) ORDER BY endpoint_id",
                    &[&ids],
                )
                .await?;
            for row in &deliveries {
                let event_id: Uuid = row.get(0);
                if let Some(event) = events.iter_mut().find(|e| e.id == event_id) {
                    event.deliveries.push(DeliveryRecord {
                        endpoint_id: row.get(1),
                        attempts: row.get(2),
                        last_status: row.get(3),
                        last_error: row.get(4),
                        next_attempt_at: row.get(5),
                        delivered_at: row.get(6),
                        dead_at: row.get(7),
                    });
                }
            }
            Ok(Some(EventPage { events, has_more }))
        })
        .await
    }

    /// Makes an event's dead and pending deliveries due now, each with a
    /// fresh schedule. `None` when the client has no such event; else how
    /// many deliveries are due.
    pub async fn redeliver_event(
        &self,
        client: ClientId,
        event_id: Uuid,
    ) -> Result<Option<u64>, StoreError> {
        self.with_client(|mut conn| async move {
            let tx = conn.transaction().await?;
            // FOR SHARE: the reaper skips an event held here, and an event
            // it has just deleted is not found (404) rather than revived.
            let found = tx
                .query_opt(
                    "SELECT 1 FROM webhook_events WHERE client_id = $1 AND id = $2 FOR SHARE",
                    &[&client.0, &event_id],
                )
                .await?;
            if found.is_none() {
                return Ok(None);
            }
            let n = tx
                .execute(
                    &format!(
                        "UPDATE webhook_deliveries q SET {} \
                         FROM webhook_endpoints ep \
                         WHERE q.event_id = $1 AND q.delivered_at IS NULL AND ep.id = q.endpoint_id \
                           AND ep.deleted_at IS NULL AND ep.disabled_at IS NULL",
                        DELIVERIES.requeue_set()
                    ),
                    &[&event_id],
                )
                .await?;
            if n > 0 {
                tx.execute("SELECT pg_notify($1, '')", &[&WEBHOOK_CHANNEL])
                    .await?;
            }
            tx.commit().await?;
            Ok(Some(n))
        })
        .await
    }

    /// Deletes up to `batch` endpoints deleted before `before` that no
    /// delivery record names any more (their events were reaped first);
    /// returns how many went.
    pub async fn purge_deleted_endpoints(
        &self,
        before: DateTime<Utc>,
        batch: i64,
    ) -> Result<u64, StoreError> {
        self.with_client(|conn| async move {
            Ok(conn
                .execute(
                    "DELETE FROM webhook_endpoints WHERE id = ANY(ARRAY( \
                       SELECT ep.id FROM webhook_endpoints ep \
                       WHERE ep.deleted_at < $1 \
                         AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.endpoint_id = ep.id) \
                       LIMIT $2))",
                    &[&before, &batch],
                )
                .await?)
        })
        .await
    }

    /// Deletes up to `batch` events made before `before` whose deliveries
    /// are all finished (delivered or dead), with those delivery records;
    /// returns how many events went.
    pub async fn delete_old_events(&self, before: Uuid, batch: i64) -> Result<u64, StoreError> {
        self.with_client(|conn| async move {
            let stmt = conn.prepare_cached(DELETE_OLD_EVENTS).await?;
            Ok(conn.execute(&stmt, &[&before, &batch]).await?)
        })
        .await
    }

    /// Claims up to `limit` due deliveries for `lease`, at most
    /// `endpoint_max` in flight per endpoint and `client_max` per client.
    pub async fn claim_deliveries(
        &self,
        limit: i64,
        lease: Duration,
        endpoint_max: i64,
        client_max: i64,
    ) -> Result<Vec<ClaimedDelivery>, StoreError> {
        self.with_client(|conn| async move {
            let shares = [endpoint_max, client_max];
            let rows = queue::claim(&conn, &CLAIM, limit, lease, &shares).await?;
            rows.iter()
                .map(|r| {
                    let claim = Claim::of(r);
                    let mut secrets = Vec::with_capacity(2);
                    for text in [
                        r.get::<_, Option<String>>("secret"),
                        r.get("previous_secret"),
                    ]
                    .into_iter()
                    .flatten()
                    {
                        secrets
                            .push(WebhookSecret::parse(&text).map_err(|e| {
                                StoreError::Corrupt(format!("endpoint secret {e}"))
                            })?);
                    }
                    let url: Option<String> = r.get("url");
                    Ok(ClaimedDelivery {
                        event_id: r.get("event_id"),
                        endpoint_id: r.get("endpoint_id"),
                        attempt: claim.attempt,
                        schedule_attempt: claim.budget_used,
                        body: r.get("body"),
                        url: url.as_deref().and_then(EndpointUrl::from_trusted),
                        secrets,
                    })
                })
                .collect()
        })
        .await
    }

    /// Gives back deliveries claimed and never attempted (a drain); see
    /// `QueueTable::release_sql`.
    pub async fn release_deliveries(
        &self,
        claims: &[(Uuid, Uuid, i32)],
    ) -> Result<u64, StoreError> {
        let events: Vec<Uuid> = claims.iter().map(|c| c.0).collect();
        let endpoints: Vec<Uuid> = claims.iter().map(|c| c.1).collect();
        let attempts: Vec<i32> = claims.iter().map(|c| c.2).collect();
        self.with_client(|conn| async move {
            let stmt = conn.prepare_cached(&RELEASE).await?;
            Ok(conn
                .execute(&stmt, &[&events, &endpoints, &attempts])
                .await?)
        })
        .await
    }

    /// Records how a batch of attempts ended, in one transaction; an attempt
    /// whose claim was taken over (lease expired) writes nothing.
    pub async fn settle_deliveries(
        &self,
        batch: &[(ClaimedDelivery, DeliverySettlement)],
    ) -> Result<(), StoreError> {
        assert!(!batch.is_empty(), "a settlement batch settles at least one");
        let mut done: [Vec<Uuid>; 2] = Default::default();
        let mut done_attempt = Vec::new();
        let mut done_status: Vec<i32> = Vec::new();
        let mut later: [Vec<Uuid>; 2] = Default::default();
        let mut reschedule: Reschedule<'_, Option<i32>> = Reschedule::default();
        let mut gone = Vec::new();
        for (claim, settlement) in batch {
            let (delay, status, error) = match settlement {
                DeliverySettlement::Delivered { status } => {
                    done[0].push(claim.event_id);
                    done[1].push(claim.endpoint_id);
                    done_attempt.push(claim.attempt);
                    done_status.push(i32::from(*status));
                    continue;
                }
                DeliverySettlement::Retry {
                    delay,
                    status,
                    error,
                } => (Some(*delay), *status, error.as_str()),
                DeliverySettlement::Dead { status, error } => (None, *status, error.as_str()),
                DeliverySettlement::Gone => {
                    gone.push(claim.endpoint_id);
                    (None, Some(410), "410 Gone: the endpoint is disabled")
                }
            };
            later[0].push(claim.event_id);
            later[1].push(claim.endpoint_id);
            reschedule.push(claim.attempt, delay, error, status.map(i32::from));
        }
        assert_eq!(done_attempt.len() + reschedule.len(), batch.len());
        self.with_client(|mut conn| async move {
            let tx = conn.transaction().await?;
            if !done_attempt.is_empty() {
                let stmt = tx.prepare_cached(SETTLE_DELIVERED).await?;
                tx.execute(&stmt, &[&done[0], &done[1], &done_attempt, &done_status])
                    .await?;
            }
            reschedule
                .run(&tx, &RESCHEDULE, &[&later[0], &later[1]])
                .await?;
            if !gone.is_empty() {
                tx.execute(DISABLE_ENDPOINTS, &[&gone]).await?;
            }
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// Backlog, dead deliveries and the age of the oldest due one.
    pub async fn webhook_stats(&self) -> Result<WebhookStats, StoreError> {
        self.with_client(|conn| async move {
            let row = conn
                .query_one(
                    "SELECT (SELECT count(*) FROM webhook_deliveries \
                             WHERE delivered_at IS NULL AND dead_at IS NULL), \
                            (SELECT count(*) FROM webhook_deliveries WHERE dead_at IS NOT NULL), \
                            COALESCE((SELECT EXTRACT(EPOCH FROM now() - min(next_attempt_at))::float8 \
                              FROM webhook_deliveries WHERE delivered_at IS NULL AND dead_at IS NULL \
                              AND next_attempt_at <= now()), 0)",
                    &[],
                )
                .await?;
            Ok(WebhookStats {
                backlog: row.get(0),
                dead: row.get(1),
                oldest_due_age_secs: row.get(2),
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_bounded_and_printable() {
        let long = "x".repeat(1000) + "\n";
        assert_eq!(bounded_error(&long).chars().count(), ERROR_CHARS_MAX);
        assert_eq!(bounded_error("a\nb\u{7}c"), "abc");
    }

    #[test]
    fn delivery_states_round_trip() {
        for s in [
            DeliveryState::Pending,
            DeliveryState::Delivered,
            DeliveryState::Dead,
        ] {
            assert_eq!(DeliveryState::parse(s.as_str()), Some(s));
        }
        assert_eq!(DeliveryState::parse("gone"), None);
    }
}
