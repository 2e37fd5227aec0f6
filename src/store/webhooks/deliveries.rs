//! Deliveries: the webhook queue on the one leased queue (`store::queue`).

use std::sync::LazyLock;
use std::time::Duration;

use uuid::Uuid;

use crate::domain::webhook::{EndpointUrl, WebhookSecret};
use crate::store::queue::{self, Claim, QueueTable, Reschedule};
use crate::store::{Db, StoreError};

/// Deliveries: claim, settle, give back, and the backlog figures.
#[derive(Clone)]
pub struct DeliveryStore(pub(in crate::store) Db);

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
    pub oldest_due_age_seconds: f64,
}

/// The channel a settlement that wrote deliveries (or a redelivery)
/// notifies, and every delivery worker listens on.
pub const WEBHOOK_CHANNEL: &str = "payrail_webhooks";

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
    group_by: Some(("endpoint_id", "uuid")),
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

static PICK: LazyLock<String> = LazyLock::new(|| DELIVERIES.pick_sql());
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

/// Most characters of a receiver's answer kept in `last_error`.
const ERROR_CHARS_MAX: usize = 255;

/// Bounds `text` to what `last_error` keeps.
pub fn bounded_error(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(ERROR_CHARS_MAX)
        .collect()
}

impl DeliveryStore {
    /// Claims up to `limit` due deliveries for `lease`, at most
    /// `endpoint_max` in flight per endpoint and `client_max` per client.
    pub async fn claim(
        &self,
        limit: i64,
        lease: Duration,
        endpoint_max: i64,
        client_max: i64,
    ) -> Result<Vec<ClaimedDelivery>, StoreError> {
        self.0
            .with_client(|conn| async move {
                let shares = [endpoint_max, client_max];
                let rows = queue::claim_fairly(&conn, &PICK, &CLAIM, limit, lease, &shares).await?;
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
                            secrets.push(WebhookSecret::parse(&text).map_err(|e| {
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
    pub async fn release(&self, claims: &[(Uuid, Uuid, i32)]) -> Result<u64, StoreError> {
        let events: Vec<Uuid> = claims.iter().map(|c| c.0).collect();
        let endpoints: Vec<Uuid> = claims.iter().map(|c| c.1).collect();
        let attempts: Vec<i32> = claims.iter().map(|c| c.2).collect();
        self.0
            .with_client(|conn| async move {
                let stmt = conn.prepare_cached(&RELEASE).await?;
                Ok(conn
                    .execute(&stmt, &[&events, &endpoints, &attempts])
                    .await?)
            })
            .await
    }

    /// Records how a batch of attempts ended, in one transaction; an attempt
    /// whose claim was taken over (lease expired) writes nothing.
    pub async fn settle(
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
        self.0
            .with_client(|mut conn| async move {
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
    pub async fn stats(&self) -> Result<WebhookStats, StoreError> {
        self.0
            .with_client(|conn| async move {
                // Each count reads at most FIGURE_ROWS_MAX rows.
                let sql = format!(
                    "SELECT {}, {}, {}",
                    crate::store::capped_count(
                        "FROM webhook_deliveries WHERE delivered_at IS NULL AND dead_at IS NULL",
                        "$1"
                    ),
                    crate::store::capped_count(
                        "FROM webhook_deliveries WHERE dead_at IS NOT NULL",
                        "$1"
                    ),
                    DELIVERIES.oldest_due_age_sql(),
                );
                let row = conn
                    .query_one(&sql, &[&crate::store::FIGURE_ROWS_MAX])
                    .await?;
                Ok(WebhookStats {
                    backlog: row.get(0),
                    dead: row.get(1),
                    oldest_due_age_seconds: row.get(2),
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
}
