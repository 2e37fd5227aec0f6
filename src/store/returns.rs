//! Return watches, as a leased queue (`store::queue`): a transfer that
//! succeeded is looked up again `--return-lookups` times over
//! `--return-window`, so a `returned` whose notifications were all lost is
//! still found. The status machine starts a watch when a transfer becomes
//! `succeeded` and ends it when it becomes `returned`; a watch ends by
//! itself after its last lookup.

use std::collections::HashSet;
use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::queue::{self, Claim, QueueTable, Reschedule};
use super::status::{Applied, FollowUp, Source};
use super::{Db, StoreError};
use crate::domain::{ProviderReport, ProviderText};

/// The channel return lookups listen on (nothing announces them: they fall
/// due by time, and the fallback poll finds them).
pub const RETURNS_CHANNEL: &str = "payrail_returns";

/// The return watches' queue description.
pub const RETURNS: QueueTable = QueueTable {
    table: "return_watches",
    key: &[("transfer_id", "uuid")],
    due: "next_lookup_at",
    open: "q.dead_at IS NULL",
    on_claim: "",
    claim_returns: ", q.lookups_left, q.succeeded_at",
    fair_by: &[],
    group_by: None,
    payload: "SELECT c.transfer_id, c.attempts, c.budget_used, c.reclaimed, c.leased,
       c.lookups_left, c.succeeded_at
FROM claimed c",
    reschedule_extra: ("lookups_left", "int4", "lookups_left = i.lookups_left"),
};

static CLAIM: LazyLock<String> = LazyLock::new(|| RETURNS.claim_sql());
static COMPLETE: LazyLock<String> = LazyLock::new(|| RETURNS.complete_sql());
static RESCHEDULE: LazyLock<String> = LazyLock::new(|| RETURNS.reschedule_sql());
static RELEASE: LazyLock<String> = LazyLock::new(|| RETURNS.release_sql());

/// A return lookup this process now holds until its lease runs out.
#[derive(Debug, Clone)]
pub struct WatchRow {
    /// The transfer (and the provider's business id).
    pub transfer_id: Uuid,
    /// This claim's number, the fencing token.
    pub attempt: i32,
    /// Claims so far, failed lookups included.
    pub claims: i32,
    /// Lookups still to make, this one included.
    pub lookups_left: i32,
    /// When the transfer succeeded.
    pub succeeded_at: DateTime<Utc>,
}

/// How one return lookup ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchOutcome {
    /// The provider reported something other than `succeeded` (a return,
    /// or a contradiction the status machine keeps as an anomaly): applied,
    /// and the watch ends.
    Report(ProviderReport),
    /// Look again after `delay`, with `lookups_left` lookups left: the
    /// next one of the schedule after a `succeeded`, or the same one again
    /// after no usable answer.
    Again {
        /// Until the next lookup.
        delay: Duration,
        /// Lookups left after this one.
        lookups_left: i32,
        /// What the lookup found.
        note: ProviderText,
    },
    /// Still `succeeded` at the last lookup: the watch ends.
    Done,
    /// No usable answer for too long: the watch is parked for operators
    /// (`payrail_return_watches_dead`).
    Dead {
        /// What the last lookup found.
        note: ProviderText,
    },
}

/// Figures for `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct WatchStats {
    /// Succeeded transfers still watched for a return.
    pub watched: i64,
    /// Watches parked after too many unusable answers.
    pub dead: i64,
    /// Age of the oldest due lookup, in seconds (0 when none is due).
    pub oldest_due_age_seconds: f64,
}

/// The return watches' statements.
#[derive(Clone)]
pub struct ReturnStore(pub(super) Db);

impl ReturnStore {
    /// Claims up to `limit` due lookups for `lease`.
    pub async fn claim(&self, limit: i64, lease: Duration) -> Result<Vec<WatchRow>, StoreError> {
        self.0
            .with_client(|client| async move {
                let rows = queue::claim(&client, &CLAIM, limit, lease).await?;
                Ok(rows
                    .iter()
                    .map(|r| {
                        let claim = Claim::of(r);
                        let row = WatchRow {
                            transfer_id: r.get("transfer_id"),
                            attempt: claim.attempt,
                            claims: claim.budget_used,
                            lookups_left: r.get("lookups_left"),
                            succeeded_at: r.get("succeeded_at"),
                        };
                        assert!(
                            row.lookups_left >= 1,
                            "a watch with no lookup left has ended"
                        );
                        row
                    })
                    .collect())
            })
            .await
    }

    /// Records a batch of lookups in one transaction: watches that ended
    /// (a report, or the last lookup) are deleted and the reports of those
    /// still held applied by the status machine; the others are looked up
    /// again later or parked. Each row only while still held under its
    /// claim. A row appears at most once.
    pub async fn settle(
        &self,
        batch: &[(WatchRow, WatchOutcome)],
        follow: FollowUp,
    ) -> Result<Applied, StoreError> {
        assert!(!batch.is_empty(), "a settlement batch settles a row");
        let mut ended: Vec<(Uuid, i32)> = Vec::new();
        let mut later_ids = Vec::new();
        let mut later = Reschedule::default();
        for (row, outcome) in batch {
            match outcome {
                WatchOutcome::Report(_) | WatchOutcome::Done => {
                    ended.push((row.transfer_id, row.attempt))
                }
                WatchOutcome::Again {
                    delay,
                    lookups_left,
                    note,
                } => {
                    assert!(*lookups_left >= 1 && *lookups_left <= row.lookups_left);
                    later_ids.push(row.transfer_id);
                    later.push(row.attempt, Some(*delay), note.as_str(), *lookups_left);
                }
                WatchOutcome::Dead { note } => {
                    later_ids.push(row.transfer_id);
                    later.push(row.attempt, None, note.as_str(), row.lookups_left);
                }
            }
        }
        ended.sort_unstable();
        assert!(
            ended.windows(2).all(|w| w[0].0 < w[1].0),
            "a row appears at most once in a batch"
        );
        self.0
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                let (ids, attempts): (Vec<Uuid>, Vec<i32>) = ended.iter().copied().unzip();
                let held: HashSet<Uuid> = if ids.is_empty() {
                    HashSet::new()
                } else {
                    let stmt = tx.prepare_cached(&COMPLETE).await?;
                    tx.query(&stmt, &[&ids, &attempts])
                        .await?
                        .iter()
                        .map(|r| r.get(0))
                        .collect()
                };
                let reports: Vec<(Uuid, ProviderReport)> = batch
                    .iter()
                    .filter_map(|(row, o)| match o {
                        WatchOutcome::Report(r) if held.contains(&row.transfer_id) => {
                            Some((row.transfer_id, r.clone()))
                        }
                        _ => None,
                    })
                    .collect();
                let applied =
                    super::status::apply(&tx, reports, Source::ReturnLookup, follow).await?;
                let keys: [&(dyn ToSql + Sync); 1] = [&later_ids];
                later.run(&tx, &RESCHEDULE, &keys).await?;
                tx.commit().await?;
                Ok(applied)
            })
            .await
    }

    /// Gives back lookups claimed and never made (a drain, a missed start).
    pub async fn release(&self, claims: &[(Uuid, i32)]) -> Result<u64, StoreError> {
        queue::release_by_id(&self.0, &RELEASE, claims).await
    }

    /// Watched and parked watches, each counted up to
    /// [`super::FIGURE_ROWS_MAX`], and the oldest due lookup's age.
    pub async fn stats(&self) -> Result<WatchStats, StoreError> {
        static STATS: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT {}, {}, COALESCE((SELECT EXTRACT(EPOCH FROM now() - min(next_lookup_at))::float8 \
                 FROM return_watches WHERE dead_at IS NULL AND next_lookup_at <= now()), 0)",
                super::capped_count("FROM return_watches WHERE dead_at IS NULL", "$1"),
                super::capped_count("FROM return_watches WHERE dead_at IS NOT NULL", "$1"),
            )
        });
        self.0
            .with_client(|client| async move {
                let row = client
                    .query_one(STATS.as_str(), &[&super::FIGURE_ROWS_MAX])
                    .await?;
                Ok(WatchStats {
                    watched: row.get(0),
                    dead: row.get(1),
                    oldest_due_age_seconds: row.get(2),
                })
            })
            .await
    }
}
