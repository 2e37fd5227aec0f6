//! What was said: one event per transfer that became final, with one
//! delivery per endpoint its client had then.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::deliveries::{DELIVERIES, WEBHOOK_CHANNEL};
use crate::domain::webhook::EventType;
use crate::domain::ClientId;
use crate::store::{Db, StoreError};

/// Events: a client's pages, redelivery, and the reaper's deletions.
#[derive(Clone)]
pub struct EventStore(pub(in crate::store) Db);

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

/// The deliveries of `events`, each with its event's id, by endpoint.
pub(in crate::store) async fn deliveries_of(
    conn: &impl GenericClient,
    events: &[Uuid],
) -> Result<Vec<(Uuid, DeliveryRecord)>, StoreError> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let rows = conn
        .query(
            "SELECT event_id, endpoint_id, attempts, last_status, last_error, \
             CASE WHEN delivered_at IS NULL AND dead_at IS NULL THEN next_attempt_at END, \
             delivered_at, dead_at \
             FROM webhook_deliveries WHERE event_id = ANY($1) ORDER BY endpoint_id",
            &[&events],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| {
            (
                row.get(0),
                DeliveryRecord {
                    endpoint_id: row.get(1),
                    attempts: row.get(2),
                    last_status: row.get(3),
                    last_error: row.get(4),
                    next_attempt_at: row.get(5),
                    delivered_at: row.get(6),
                    dead_at: row.get(7),
                },
            )
        })
        .collect())
}

/// Makes an event's undelivered deliveries to live endpoints due now, each
/// with a fresh schedule, in the caller's transaction, and wakes the
/// delivery workers on commit; how many are due. `None` when no event has
/// this id (of this client, when `client` is given).
pub(in crate::store) async fn requeue_deliveries(
    tx: &deadpool_postgres::Transaction<'_>,
    client: Option<ClientId>,
    event_id: Uuid,
) -> Result<Option<u64>, StoreError> {
    // FOR SHARE: the reaper skips an event held here, and an event it has
    // just deleted is not found rather than revived.
    let found = tx
        .query_opt(
            "SELECT 1 FROM webhook_events WHERE id = $1 AND ($2::uuid IS NULL OR client_id = $2) \
             FOR SHARE",
            &[&event_id, &client.map(|c| c.0)],
        )
        .await?;
    if found.is_none() {
        return Ok(None);
    }
    let n = requeue(
        tx,
        "FROM webhook_endpoints ep \
         WHERE q.event_id = $1 AND q.delivered_at IS NULL AND ep.id = q.endpoint_id \
           AND ep.deleted_at IS NULL AND ep.disabled_at IS NULL",
        &[&event_id],
    )
    .await?;
    Ok(Some(n))
}

/// Puts the deliveries `q` that `rest` (a `FROM`/`WHERE` on the alias `q`)
/// selects back in line with a fresh schedule, and wakes the delivery
/// workers on commit when it did any: the deliveries' one requeue.
async fn requeue(
    tx: &deadpool_postgres::Transaction<'_>,
    rest: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64, StoreError> {
    let sql = format!(
        "UPDATE webhook_deliveries q SET {} {rest}",
        DELIVERIES.requeue_set("now()")
    );
    let n = tx.execute(&sql, params).await?;
    if n > 0 {
        tx.execute("SELECT pg_notify($1, '')", &[&WEBHOOK_CHANNEL])
            .await?;
    }
    Ok(n)
}

/// Re-enables an endpoint (if disabled) and makes up to `rows_max` of its
/// dead deliveries due again with a fresh schedule, in the caller's
/// transaction, waking the delivery workers on commit; whether it was
/// disabled, and how many are due. `None` when no live endpoint has this id.
pub(in crate::store) async fn revive_endpoint(
    tx: &deadpool_postgres::Transaction<'_>,
    endpoint_id: Uuid,
    rows_max: i64,
) -> Result<Option<(bool, u64)>, StoreError> {
    // The row as it was, locked, then enabled.
    let Some(before) = tx
        .query_opt(
            "SELECT disabled_at IS NOT NULL FROM webhook_endpoints \
             WHERE id = $1 AND deleted_at IS NULL FOR UPDATE",
            &[&endpoint_id],
        )
        .await?
    else {
        return Ok(None);
    };
    let was_disabled: bool = before.get(0);
    if was_disabled {
        tx.execute(
            "UPDATE webhook_endpoints SET disabled_at = NULL WHERE id = $1",
            &[&endpoint_id],
        )
        .await?;
    }
    let n = requeue(
        tx,
        "WHERE (event_id, endpoint_id) IN (
            SELECT event_id, endpoint_id FROM webhook_deliveries
            WHERE endpoint_id = $1 AND dead_at IS NOT NULL AND delivered_at IS NULL
            ORDER BY event_id LIMIT $2 FOR UPDATE)",
        &[&endpoint_id, &rows_max],
    )
    .await?;
    assert!(
        n <= rows_max as u64,
        "a bulk redelivery stays within its limit"
    );
    Ok(Some((was_disabled, n)))
}

impl EventStore {
    /// A page of a client's events, newest first. `None` when the cursor
    /// names no event of this client.
    pub async fn page(
        &self,
        client: ClientId,
        filter: EventFilter,
    ) -> Result<Option<EventPage>, StoreError> {
        self.0.with_client(|conn| async move {
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
            for (event_id, delivery) in deliveries_of(&conn, &ids).await? {
                if let Some(event) = events.iter_mut().find(|e| e.id == event_id) {
                    event.deliveries.push(delivery);
                }
            }
            Ok(Some(EventPage { events, has_more }))
        })
        .await
    }

    /// Makes an event's dead and pending deliveries due now, each with a
    /// fresh schedule. `None` when the client has no such event; else how
    /// many deliveries are due.
    pub async fn redeliver(
        &self,
        client: ClientId,
        event_id: Uuid,
    ) -> Result<Option<u64>, StoreError> {
        self.0
            .with_client(|mut conn| async move {
                let tx = conn.transaction().await?;
                let n = requeue_deliveries(&tx, Some(client), event_id).await?;
                tx.commit().await?;
                Ok(n)
            })
            .await
    }

    /// Deletes up to `batch` events made before `before` whose deliveries
    /// are all finished (delivered or dead), with those delivery records;
    /// returns how many events went.
    pub async fn delete_old(&self, before: Uuid, batch: i64) -> Result<u64, StoreError> {
        self.0
            .with_client(|conn| async move {
                let stmt = conn.prepare_cached(DELETE_OLD_EVENTS).await?;
                Ok(conn.execute(&stmt, &[&before, &batch]).await?)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
