//! Status lookups of `processing` transfers, as a leased queue
//! (`store::queue`): a transfer the provider accepted is asked about from
//! `--provider-poll-after` on, then again with backoff, until it has an
//! outcome. A notification that brings the outcome first deletes the row.
//! Rows are never dead-lettered: a payout the provider accepted is asked
//! about until it ends, and flagged when that takes too long.

use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::queue::{self, Claim, QueueTable, Reschedule};
use super::status::{Applied, FollowUp, Source};
use super::{Db, StoreError};
use crate::domain::{ProviderReport, ProviderText};

/// The channel pollers listen on (nothing announces polls today: rows fall
/// due by time, and the fallback poll finds them).
pub const POLLS_CHANNEL: &str = "payrail_polls";

/// The poll queue's description.
pub const POLLS: QueueTable = QueueTable {
    table: "provider_polls",
    key: &[("transfer_id", "uuid")],
    due: "next_poll_at",
    open: "q.dead_at IS NULL",
    on_claim: "",
    claim_returns: ", q.processing_since",
    fair_by: &[],
    group_by: None,
    payload:
        "SELECT c.transfer_id, c.attempts, c.budget_used, c.reclaimed, c.leased, c.processing_since
FROM claimed c",
    reschedule_extra: ("last_status", "text", "last_status = i.last_status"),
};

static CLAIM: LazyLock<String> = LazyLock::new(|| POLLS.claim_sql());
static RESCHEDULE: LazyLock<String> = LazyLock::new(|| POLLS.reschedule_sql());
static RELEASE: LazyLock<String> = LazyLock::new(|| POLLS.release_sql());

/// A lookup this process now holds until its lease runs out.
#[derive(Debug, Clone)]
pub struct PollRow {
    /// The transfer (and the provider's business id).
    pub transfer_id: Uuid,
    /// This claim's number, the fencing token.
    pub attempt: i32,
    /// Lookups so far, this one included.
    pub polls: i32,
    /// Since when the transfer has been `processing`.
    pub processing_since: DateTime<Utc>,
}

/// How one lookup ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollOutcome {
    /// The provider reported an outcome.
    Report(ProviderReport),
    /// Still `processing`, or no usable answer: ask again after `delay`.
    Again {
        /// Until the next lookup.
        delay: Duration,
        /// What the provider said: `processing`, `not_found` or `unknown`
        /// (no usable answer).
        status: &'static str,
        /// What the lookup found.
        note: ProviderText,
    },
}

/// A `processing` transfer flagged for operators.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StuckTransfer {
    /// The transfer.
    pub transfer_id: Uuid,
    /// Since when it has been `processing`.
    pub processing_since: DateTime<Utc>,
    /// Lookups so far.
    pub polls: i32,
    /// What the last lookup found.
    pub last_error: Option<String>,
    /// When it is looked up next.
    pub next_poll_at: DateTime<Utc>,
}

/// Figures for `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PollStats {
    /// Transfers waiting for their outcome.
    pub processing: i64,
    /// Of those, the ones `processing` for longer than the limit.
    pub stuck: i64,
    /// Age of the oldest, in seconds (0 when none).
    pub oldest_age_seconds: f64,
}

/// The poll queue's statements.
#[derive(Clone)]
pub struct PollStore(pub(super) Db);

impl PollStore {
    /// Claims up to `limit` due lookups for `lease`.
    pub async fn claim(&self, limit: i64, lease: Duration) -> Result<Vec<PollRow>, StoreError> {
        self.0
            .with_client(|client| async move {
                let rows = queue::claim(&client, &CLAIM, limit, lease).await?;
                Ok(rows
                    .iter()
                    .map(|r| {
                        let claim = Claim::of(r);
                        PollRow {
                            transfer_id: r.get("transfer_id"),
                            attempt: claim.attempt,
                            polls: claim.budget_used,
                            processing_since: r.get("processing_since"),
                        }
                    })
                    .collect())
            })
            .await
    }

    /// Records a batch of lookups in one transaction: the outcomes found
    /// are applied by the status machine, the others asked again later
    /// (each fenced by its claim).
    pub async fn settle(
        &self,
        batch: &[(PollRow, PollOutcome)],
        follow: FollowUp,
    ) -> Result<Applied, StoreError> {
        assert!(!batch.is_empty(), "a settlement batch settles a row");
        let reports: Vec<(Uuid, ProviderReport)> = batch
            .iter()
            .filter_map(|(row, o)| match o {
                PollOutcome::Report(r) => Some((row.transfer_id, r.clone())),
                PollOutcome::Again { .. } => None,
            })
            .collect();
        let mut again_ids = Vec::new();
        let mut again = Reschedule::default();
        for (row, outcome) in batch {
            if let PollOutcome::Again {
                delay,
                status,
                note,
            } = outcome
            {
                again_ids.push(row.transfer_id);
                again.push(row.attempt, Some(*delay), note.as_str(), *status);
            }
        }
        self.0
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                // The status machine ends the polls of transfers that are
                // final, the ones found final already included, and starts
                // the return watch of those now `succeeded`.
                let applied = super::status::apply(&tx, reports, Source::Poll, follow).await?;
                let keys: [&(dyn ToSql + Sync); 1] = [&again_ids];
                again.run(&tx, &RESCHEDULE, &keys).await?;
                tx.commit().await?;
                Ok(applied)
            })
            .await
    }

    /// Gives back lookups claimed and never made (a drain).
    pub async fn release(&self, claims: &[(Uuid, i32)]) -> Result<u64, StoreError> {
        queue::release_by_id(&self.0, &RELEASE, claims).await
    }

    /// Transfers `processing` for longer than `max`, longest first.
    pub async fn stuck(&self, max: Duration, limit: i64) -> Result<Vec<StuckTransfer>, StoreError> {
        self.0
            .with_client(|client| async move {
                let rows = client
                    .query(
                        "SELECT transfer_id, processing_since, attempts - attempts_base, last_error, next_poll_at \
                         FROM provider_polls WHERE processing_since < now() - make_interval(secs => $1) \
                         ORDER BY processing_since LIMIT $2",
                        &[&max.as_secs_f64(), &limit],
                    )
                    .await?;
                Ok(rows
                    .iter()
                    .map(|r| StuckTransfer {
                        transfer_id: r.get(0),
                        processing_since: r.get(1),
                        polls: r.get(2),
                        last_error: r.get(3),
                        next_poll_at: r.get(4),
                    })
                    .collect())
            })
            .await
    }

    /// How many wait, how many are stuck past `max`, the oldest's age.
    pub async fn stats(&self, max: Duration) -> Result<PollStats, StoreError> {
        self.0
            .with_client(|client| async move {
                // Each count reads at most FIGURE_ROWS_MAX rows.
                let sql = format!(
                    "SELECT {}, {}, \
                     COALESCE((SELECT EXTRACT(EPOCH FROM now() - min(processing_since))::float8 \
                       FROM provider_polls), 0)",
                    super::capped_count("FROM provider_polls", "$2"),
                    super::capped_count(
                        "FROM provider_polls WHERE processing_since < now() - make_interval(secs => $1)",
                        "$2"
                    ),
                );
                let row = client
                    .query_one(&sql, &[&max.as_secs_f64(), &super::FIGURE_ROWS_MAX])
                    .await?;
                Ok(PollStats {
                    processing: row.get(0),
                    stuck: row.get(1),
                    oldest_age_seconds: row.get(2),
                })
            })
            .await
    }
}
