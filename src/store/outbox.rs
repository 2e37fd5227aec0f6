//! Outbox rows: claimed by the relay with a lease, then completed (deleted,
//! together with the transfer's final status), rescheduled, or dead-lettered.
//! The row's `attempts`, raised by every claim, fences a holder whose lease
//! ran out: its late writes match no row.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Store, StoreError};
use crate::domain::TransferStatus;
use crate::provider::Payout;

/// The channel the shard flush notifies and the relay listens on.
pub const OUTBOX_CHANNEL: &str = "payrail_outbox";

/// A row this process now holds until its lease runs out.
#[derive(Debug, Clone)]
pub struct ClaimedRow {
    /// What to send.
    pub payout: Payout,
    /// This claim's attempt number (1 for the first); also the fencing token.
    pub attempt: i32,
}

/// How a provider call ended, as the outbox records it.
#[derive(Debug, Clone)]
pub enum Settlement {
    /// Final: the transfer becomes `succeeded` or `failed`; the row is deleted.
    Final {
        /// `Succeeded` or `Failed`.
        status: TransferStatus,
        /// Provider reference, for `Succeeded`.
        provider_reference: Option<String>,
        /// Why, for `Failed`.
        failure_reason: Option<String>,
    },
    /// Try again after `delay`.
    Retry {
        /// Backoff before the row is due again.
        delay: Duration,
        /// What went wrong.
        error: String,
    },
    /// Out of attempts: the transfer stays `pending` until an operator retries.
    Dead {
        /// What went wrong last.
        error: String,
    },
}

/// An outbox row as `payrail outbox list` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OutboxEntry {
    /// The transfer (and business id).
    pub transfer_id: Uuid,
    /// Claims so far.
    pub attempts: i32,
    /// When it is next due.
    pub available_at: DateTime<Utc>,
    /// The current lease, if held.
    pub locked_until: Option<DateTime<Utc>>,
    /// The last failure.
    pub last_error: Option<String>,
    /// When it was dead-lettered.
    pub dead_at: Option<DateTime<Utc>>,
}

/// Figures for `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutboxStats {
    /// Rows not yet final and not dead.
    pub backlog: i64,
    /// Dead-lettered rows.
    pub dead: i64,
    /// Age of the oldest row that is due now, in seconds (0 when none is).
    pub oldest_due_age_secs: f64,
}

/// One statement claims: lock due rows that nobody holds (SKIP LOCKED, so
/// processes never wait on each other), stamp the lease and the attempt,
/// and return what the provider call needs.
const CLAIM: &str = "
WITH due AS (
    SELECT transfer_id FROM outbox
    WHERE dead_at IS NULL AND available_at <= now() AND (locked_until IS NULL OR locked_until <= now())
    ORDER BY available_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE outbox o SET locked_until = now() + make_interval(secs => $2), attempts = o.attempts + 1
    FROM due WHERE o.transfer_id = due.transfer_id
    RETURNING o.transfer_id, o.attempts
)
SELECT c.transfer_id, c.attempts, t.amount, t.currency, t.source_account, t.destination_account
FROM claimed c JOIN transfers t ON t.id = c.transfer_id";

impl Store {
    /// Claims up to `limit` due rows for `lease`.
    pub async fn claim_outbox(
        &self,
        limit: i64,
        lease: Duration,
    ) -> Result<Vec<ClaimedRow>, StoreError> {
        self.with_client(|client| async move {
            let stmt = client.prepare_cached(CLAIM).await?;
            let rows = client.query(&stmt, &[&limit, &lease.as_secs_f64()]).await?;
            Ok(rows
                .iter()
                .map(|r| ClaimedRow {
                    payout: Payout {
                        transfer_id: r.get(0),
                        amount: r.get(2),
                        currency: r.get(3),
                        source_account: r.get(4),
                        destination_account: r.get(5),
                    },
                    attempt: r.get(1),
                })
                .collect())
        })
        .await
    }

    /// Records how a claimed row's call ended, in one transaction with the
    /// transfer's new status. False when the claim was fenced out (another
    /// process took the row over after our lease ran out).
    pub async fn settle_outbox(
        &self,
        row: &ClaimedRow,
        settlement: &Settlement,
    ) -> Result<bool, StoreError> {
        let id = row.payout.transfer_id;
        let attempt = row.attempt;
        self.with_client(|mut client| async move {
            let tx = client.transaction().await?;
            let held = match settlement {
                Settlement::Final { status, provider_reference, failure_reason } => {
                    let delete = tx
                        .prepare_cached("DELETE FROM outbox WHERE transfer_id = $1 AND attempts = $2")
                        .await?;
                    let held = tx.execute(&delete, &[&id, &attempt]).await? == 1;
                    if held {
                        let update = tx
                            .prepare_cached(
                                "UPDATE transfers SET status = $2, provider_reference = $3, failure_reason = $4, \
                                 updated_at = now() WHERE id = $1 AND status = 'pending'",
                            )
                            .await?;
                        tx.execute(&update, &[&id, &status.as_str(), provider_reference, failure_reason]).await?;
                    }
                    held
                }
                Settlement::Retry { delay, error } => {
                    let stmt = tx
                        .prepare_cached(
                            "UPDATE outbox SET available_at = now() + make_interval(secs => $3), \
                             locked_until = NULL, last_error = $4 WHERE transfer_id = $1 AND attempts = $2",
                        )
                        .await?;
                    tx.execute(&stmt, &[&id, &attempt, &delay.as_secs_f64(), error]).await? == 1
                }
                Settlement::Dead { error } => {
                    let stmt = tx
                        .prepare_cached(
                            "UPDATE outbox SET dead_at = now(), locked_until = NULL, last_error = $3 \
                             WHERE transfer_id = $1 AND attempts = $2",
                        )
                        .await?;
                    tx.execute(&stmt, &[&id, &attempt, error]).await? == 1
                }
            };
            tx.commit().await?;
            Ok(held)
        })
        .await
    }

    /// Outbox rows, oldest first; only dead ones with `dead_only`.
    pub async fn outbox_entries(
        &self,
        dead_only: bool,
        limit: i64,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        self.with_client(|client| async move {
            let rows = client
                .query(
                    "SELECT transfer_id, attempts, available_at, locked_until, last_error, dead_at FROM outbox \
                     WHERE ($1 = false OR dead_at IS NOT NULL) ORDER BY created_at LIMIT $2",
                    &[&dead_only, &limit],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| OutboxEntry {
                    transfer_id: r.get(0),
                    attempts: r.get(1),
                    available_at: r.get(2),
                    locked_until: r.get(3),
                    last_error: r.get(4),
                    dead_at: r.get(5),
                })
                .collect())
        })
        .await
    }

    /// Puts a dead row back in line with a fresh attempt budget; false when
    /// no dead row has this id.
    pub async fn retry_outbox(&self, transfer_id: Uuid) -> Result<bool, StoreError> {
        self.with_client(|client| async move {
            let n = client
                .execute(
                    "UPDATE outbox SET dead_at = NULL, attempts = 0, available_at = now(), locked_until = NULL \
                     WHERE transfer_id = $1 AND dead_at IS NOT NULL",
                    &[&transfer_id],
                )
                .await?;
            if n == 1 {
                client.execute("SELECT pg_notify($1, '')", &[&OUTBOX_CHANNEL]).await?;
            }
            Ok(n == 1)
        })
        .await
    }

    /// Backlog, dead rows and the age of the oldest due row.
    pub async fn outbox_stats(&self) -> Result<OutboxStats, StoreError> {
        self.with_client(|client| async move {
            let row = client
                .query_one(
                    "SELECT count(*) FILTER (WHERE dead_at IS NULL), count(*) FILTER (WHERE dead_at IS NOT NULL), \
                     COALESCE(EXTRACT(EPOCH FROM now() - min(available_at) \
                        FILTER (WHERE dead_at IS NULL AND available_at <= now()))::float8, 0) FROM outbox",
                    &[],
                )
                .await?;
            Ok(OutboxStats { backlog: row.get(0), dead: row.get(1), oldest_due_age_secs: row.get(2) })
        })
        .await
    }
}
