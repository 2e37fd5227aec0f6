//! The operator console's statements, one file each: operators and
//! sessions (`sessions.rs`), the transfers pages and a transfer's timeline
//! (`transfers.rs`), the other pages' reads (`reads.rs`), and the repairs,
//! each audited in its own transaction and made with the queue's own
//! requeue (`repairs.rs`).
//!
//! Every read is bounded and uses an index: keyset pages (never `OFFSET`,
//! never `COUNT(*)` over transfers), and filters the indexes cannot serve
//! (status, provider reference) are applied to a bounded scan of the newest
//! transfers, so a page costs the same on a table of a million rows as on
//! one of a thousand and says when it stopped looking.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

mod reads;
mod repairs;
pub(super) use repairs::audit_as;
mod sessions;
mod transfers;

use super::webhooks::{deliveries_of, DeliveryRecord};
use super::{Db, StoreError};
use crate::domain::{Transfer, TransferStatus};

/// A signed-in operator, as a request's session names them.
#[derive(Debug, Clone)]
pub struct OperatorSession {
    /// The operator.
    pub operator_id: Uuid,
    /// Their name, for the page header and the audit.
    pub operator_name: String,
    /// The session's CSRF token: every state-changing request carries it.
    pub csrf_token: String,
    /// When the session ends.
    pub expires_at: DateTime<Utc>,
}

/// Filters of the transfers page; each is optional.
#[derive(Debug, Clone, Default)]
pub struct TransferFilter {
    /// Only this status.
    pub status: Option<TransferStatus>,
    /// Only this client's.
    pub client_id: Option<Uuid>,
    /// Only this provider reference.
    pub provider_reference: Option<String>,
    /// Created at or after.
    pub from: Option<DateTime<Utc>>,
    /// Created before.
    pub to: Option<DateTime<Utc>>,
}

/// One line of the transfers page.
#[derive(Debug, Clone)]
pub struct TransferLine {
    /// The transfer.
    pub id: Uuid,
    /// Its client.
    pub client_id: Uuid,
    /// Its idempotency key.
    pub idempotency_key: String,
    /// Its status.
    pub status: String,
    /// Minor units.
    pub amount: i64,
    /// ISO 4217.
    pub currency: String,
    /// The provider's reference, once known.
    pub provider_reference: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

/// A keyset page of transfers, newest first.
#[derive(Debug, Clone)]
pub struct TransferLines {
    /// At most a page of matches.
    pub lines: Vec<TransferLine>,
    /// Where the next page starts (exclusive), when there may be one.
    pub next: Option<Uuid>,
    /// The page stopped after scanning this many transfers without filling
    /// up: older matches may exist past `next`.
    pub scan_exhausted: Option<i64>,
}

/// The idempotency key row of a transfer, while it is kept.
#[derive(Debug, Clone)]
pub struct KeyRecord {
    /// When the first attempt stored it.
    pub created_at: DateTime<Utc>,
    /// When the reaper forgets it.
    pub expires_at: DateTime<Utc>,
    /// The status every replay answers.
    pub response_status: i32,
}

/// One provider call the relay made.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    /// The claim's number.
    pub attempt: i32,
    /// How it ended.
    pub outcome: String,
    /// The provider's reference or reason, or the error.
    pub detail: Option<String>,
    /// When its outcome was recorded.
    pub at: DateTime<Utc>,
}

/// The transfer's outbox row, while it has one.
#[derive(Debug, Clone)]
pub struct OutboxRecord {
    /// Claims so far.
    pub attempts: i32,
    /// When it is next due.
    pub available_at: DateTime<Utc>,
    /// The last failure.
    pub last_error: Option<String>,
    /// When it was dead-lettered.
    pub dead_at: Option<DateTime<Utc>>,
    /// Some call's outcome is unknown.
    pub ambiguous: bool,
}

/// The transfer's status lookups, while it is `processing`.
#[derive(Debug, Clone)]
pub struct PollRecord {
    /// Lookups so far.
    pub attempts: i32,
    /// Since when it has been `processing`.
    pub processing_since: DateTime<Utc>,
    /// When it is looked up next.
    pub next_poll_at: DateTime<Utc>,
    /// What the last lookup found.
    pub last_error: Option<String>,
}

/// A provider notification about the transfer.
#[derive(Debug, Clone)]
pub struct NotificationRecord {
    /// The provider's notification id.
    pub id: String,
    /// What it reported.
    pub reported: Option<String>,
    /// When it arrived.
    pub received_at: DateTime<Utc>,
}

/// A webhook event and its deliveries.
#[derive(Debug, Clone)]
pub struct EventLine {
    /// The event.
    pub id: Uuid,
    /// Its client.
    pub client_id: Uuid,
    /// Its transfer.
    pub transfer_id: Uuid,
    /// `transfer.succeeded` and so on.
    pub kind: String,
    /// When it was made (the status change's time).
    pub created_at: DateTime<Utc>,
    /// Its deliveries, by endpoint.
    pub deliveries: Vec<DeliveryRecord>,
}

/// An operator action as the audit keeps it.
#[derive(Debug, Clone)]
pub struct AuditLine {
    /// Its number, newest highest.
    pub id: i64,
    /// Who.
    pub operator_name: String,
    /// What (`outbox.retry`, `event.redeliver`, ...).
    pub action: String,
    /// On what: a transfer, an event, an endpoint, or a filter.
    pub target: String,
    /// How many rows it changed.
    pub rows_touched: i64,
    /// When.
    pub at: DateTime<Utc>,
}

/// Everything known about one transfer, for its timeline.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// The transfer, with its anomalies.
    pub transfer: Transfer,
    /// Its idempotency key's row, until the key expires.
    pub key: Option<KeyRecord>,
    /// Every provider call, in order.
    pub attempts: Vec<AttemptRecord>,
    /// Its outbox row, while not final.
    pub outbox: Option<OutboxRecord>,
    /// Its lookups, while `processing`.
    pub poll: Option<PollRecord>,
    /// Notifications about it, in arrival order.
    pub notifications: Vec<NotificationRecord>,
    /// Its events (one per status change) and their deliveries.
    pub events: Vec<EventLine>,
    /// False when some status change's event is gone (deleted after
    /// `--event-retention`).
    pub events_complete: bool,
    /// Operator actions on it.
    pub audit: Vec<AuditLine>,
}

/// A dead-lettered outbox row.
#[derive(Debug, Clone)]
pub struct DeadRow {
    /// The transfer.
    pub transfer_id: Uuid,
    /// Its client.
    pub client_id: Uuid,
    /// Minor units.
    pub amount: i64,
    /// ISO 4217.
    pub currency: String,
    /// Claims so far.
    pub attempts: i32,
    /// The last failure.
    pub last_error: Option<String>,
    /// Some call's outcome is unknown.
    pub ambiguous: bool,
    /// When it was dead-lettered.
    pub dead_at: DateTime<Utc>,
}

/// A webhook endpoint that needs an operator: disabled, or with dead
/// deliveries.
#[derive(Debug, Clone)]
pub struct EndpointLine {
    /// The endpoint.
    pub id: Uuid,
    /// Its client.
    pub client_id: Uuid,
    /// Where it delivers.
    pub url: String,
    /// When it was disabled, if it is.
    pub disabled_at: Option<DateTime<Utc>>,
    /// Its dead deliveries.
    pub dead: i64,
}

/// Rates and backlogs for the live view, from the database, so every
/// `serve` process shows the same figures.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Live {
    /// Transfers created per second over the last window.
    pub creates_per_second: f64,
    /// Transfers that reached `succeeded` or `failed` per second.
    pub settlements_per_second: f64,
    /// Outbox rows not yet final and not dead.
    pub outbox_backlog: i64,
    /// Dead outbox rows.
    pub outbox_dead: i64,
    /// Webhook deliveries neither delivered nor dead.
    pub deliveries_backlog: i64,
    /// Dead deliveries.
    pub deliveries_dead: i64,
    /// Transfers `processing`.
    pub processing: i64,
}

/// The window over which the live view's rates are counted: short enough
/// to follow load, long enough to smooth a group commit's bursts.
const LIVE_WINDOW: Duration = Duration::from_secs(5);

/// The console's statements, all on the main pool. Session checks too:
/// the authentication pool is where API keys no cache holds are looked
/// up, a flood of made-up ones included (at a bounded rate, but it may keep
/// those connections busy), and a signed-in operator must not wait behind
/// it.
#[derive(Clone)]
pub struct ConsoleStore {
    /// The pages' reads, the session checks and the repairs.
    pub(in crate::store) write: Db,
}

/// Fills in each event's deliveries (one query for the page).
async fn attach_deliveries(
    client: &deadpool_postgres::Object,
    events: &mut [EventLine],
) -> Result<(), StoreError> {
    let ids: Vec<Uuid> = events.iter().map(|e| e.id).collect();
    for (event_id, delivery) in deliveries_of(client, &ids).await? {
        if let Some(event) = events.iter_mut().find(|e| e.id == event_id) {
            event.deliveries.push(delivery);
        }
    }
    Ok(())
}

fn endpoint_of(r: &tokio_postgres::Row) -> EndpointLine {
    EndpointLine {
        id: r.get(0),
        client_id: r.get(1),
        url: r.get(2),
        disabled_at: r.get(3),
        dead: r.get(4),
    }
}

fn event_of(r: &tokio_postgres::Row) -> EventLine {
    EventLine {
        id: r.get(0),
        client_id: r.get(1),
        transfer_id: r.get(2),
        kind: r.get(3),
        created_at: r.get(4),
        deliveries: Vec::new(),
    }
}

fn audit_of(r: &tokio_postgres::Row) -> AuditLine {
    AuditLine {
        id: r.get(0),
        operator_name: r.get(1),
        action: r.get(2),
        target: r.get(3),
        rows_touched: r.get(4),
        at: r.get(5),
    }
}
