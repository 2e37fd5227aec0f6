//! Outbox rows: claimed by the relay with a lease, then completed (deleted,
//! together with the transfer's final status), rescheduled, or dead-lettered.
//! The row's `attempts`, raised by every claim, fences a holder whose lease
//! ran out: its late writes match no row.

use std::collections::HashSet;
use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::queue::{self, Claim, QueueTable, Reschedule};
use super::status::{self, FollowUp, Source};
use super::{Db, StoreError};
use crate::domain::{ProviderReport, ProviderText};
use crate::provider::Payout;

/// The channel relays listen on; notified after flushes wrote rows no relay
/// claimed (`relay::RelayNudge`) and when a dead row is retried.
pub const OUTBOX_CHANNEL: &str = "payrail_outbox";

/// Wakes the relays listening on the channel given as `$1`.
const NOTIFY_OUTBOX: &str = "SELECT pg_notify($1, '')";

/// A row this process now holds until its lease runs out.
#[derive(Debug, Clone)]
pub struct ClaimedRow {
    /// What to send.
    pub payout: Payout,
    /// This claim's number (1 for the first claim ever). It is the fencing
    /// token: every claim raises it and nothing lowers it, so a holder whose
    /// lease ran out can never match the row again.
    pub attempt: i32,
    /// Claims counted against the current retry budget (`payrail outbox
    /// retry` starts a new budget); the row is dead-lettered when this
    /// reaches the attempt limit.
    pub budget_used: i32,
    /// Some earlier call's outcome is unknown: the payout may have executed.
    pub ambiguous: bool,
}

/// How a provider call ended, as the outbox records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// The provider answered the payout or its lookup with a status: the
    /// row is done, and the report is applied by the status machine, as a
    /// notification's is (`succeeded` or `declined`: final; `processing`:
    /// polled from then on; `returned`, found by a lookup).
    Report(ProviderReport),
    /// Try again after `delay`.
    Retry {
        /// Backoff before the row is due again.
        delay: Duration,
        /// What went wrong.
        error: ProviderText,
        /// The call may have executed the payout.
        ambiguous: bool,
    },
    /// Out of attempts: the transfer stays `pending` until an operator retries.
    Dead {
        /// What went wrong last.
        error: ProviderText,
        /// The call may have executed the payout.
        ambiguous: bool,
    },
}

/// What one settlement batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettleReport {
    /// Per row, in the batch's order: false when the claim was fenced out
    /// (another process took the row over after our lease ran out) and
    /// nothing was written for it.
    pub held: Vec<bool>,
    /// Transfers whose status this batch changed.
    pub changed: Vec<Uuid>,
    /// For each of those, the time from its creation to its final status
    /// (the settlement's `now()` less the transfer's `created_at`).
    pub creation_to_final: Vec<Duration>,
    /// Webhook deliveries written for their events.
    pub deliveries: i64,
    /// Answers that contradicted a transfer's final status, kept as
    /// anomalies (a `succeeded` after a declined notification, say).
    pub anomalies: usize,
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
    /// When it was dead-lettered (or parked).
    pub dead_at: Option<DateTime<Utc>>,
    /// Some call's outcome is unknown: the payout may have executed, so the
    /// relay asks the provider before it posts again or calls it failed.
    pub ambiguous: bool,
}

/// One client's outbox rows waiting for a relay (see
/// [`OutboxStore::waiting_by_client`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Waiting {
    /// How many, up to the count asked for plus one.
    pub rows: i64,
    /// How long the oldest has waited (zero when none does).
    pub oldest: Duration,
}

/// Figures for `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutboxStats {
    /// Rows not yet final and not dead.
    pub backlog: i64,
    /// Dead-lettered rows.
    pub dead: i64,
    /// Age of the oldest row that is due now, in seconds (0 when none is).
    pub oldest_due_age_seconds: f64,
}

/// The outbox as a leased queue (`store::queue`): one row per transfer not
/// yet final. A row taken over from a holder that recorded no outcome is
/// ambiguous from then on: that holder may have called the provider.
pub const OUTBOX: QueueTable = QueueTable {
    table: "outbox",
    key: &[("transfer_id", "uuid")],
    due: "available_at",
    open: "q.dead_at IS NULL",
    on_claim: ", ambiguous = q.ambiguous OR due.reclaimed",
    claim_returns: ", q.ambiguous",
    fair_by: &[],
    group_by: Some(("client_id", "uuid")),
    payload: "SELECT c.transfer_id, c.attempts, c.budget_used, c.reclaimed, c.leased, c.ambiguous,
       t.client_id, t.amount, t.currency, t.source_account, t.destination_account
FROM claimed c JOIN transfers t ON t.id = c.transfer_id",
    reschedule_extra: (
        "ambiguous",
        "bool",
        "ambiguous = q.ambiguous OR i.ambiguous",
    ),
};

static PICK: LazyLock<String> = LazyLock::new(|| OUTBOX.group_pick_sql());
static CLAIM: LazyLock<String> = LazyLock::new(|| OUTBOX.claim_sql());
static COMPLETE: LazyLock<String> = LazyLock::new(|| OUTBOX.complete_sql());
static RESCHEDULE: LazyLock<String> = LazyLock::new(|| OUTBOX.reschedule_sql());
static RELEASE: LazyLock<String> = LazyLock::new(|| OUTBOX.release_sql());

/// Puts dead rows back in line with a fresh attempt budget: one
/// transfer's, or every one whose last error contains `error` (all when
/// both are `None`), at most `rows_max`, oldest dead first; and wakes the
/// relays (on commit, in a transaction). The claim counter, the fencing
/// token, is not lowered: a new budget starts from where it stands.
/// Returns the transfers whose rows are due again.
///
/// The rows fall due `rows_per_second` at a time, the first at once: a bulk
/// retry of thousands of rows parked by an outage re-enters at a bounded
/// pace instead of as one burst that would hold its client's relay slots
/// and waiting count all at once.
pub(super) async fn requeue_dead(
    client: &impl GenericClient,
    transfer_id: Option<Uuid>,
    error: Option<&str>,
    rows_max: i64,
    rows_per_second: u32,
) -> Result<Vec<Uuid>, StoreError> {
    assert!(rows_per_second > 0, "validated in config");
    static REQUEUE: LazyLock<String> = LazyLock::new(|| {
        format!(
            "WITH picked AS (
    SELECT d.transfer_id, row_number() OVER (ORDER BY d.dead_at) AS nth FROM (
        SELECT transfer_id, dead_at FROM outbox
        WHERE dead_at IS NOT NULL
          AND ($1::uuid IS NULL OR transfer_id = $1)
          AND ($2::text IS NULL OR strpos(last_error, $2) > 0)
        ORDER BY dead_at LIMIT $3 FOR UPDATE) d
)
UPDATE outbox q SET {}, locked_until = NULL
FROM picked p WHERE q.transfer_id = p.transfer_id
RETURNING q.transfer_id",
            OUTBOX.requeue_set("now() + make_interval(secs => (p.nth - 1) / $4::float8)")
        )
    });
    let requeued: Vec<Uuid> = client
        .query(
            REQUEUE.as_str(),
            &[&transfer_id, &error, &rows_max, &f64::from(rows_per_second)],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        requeued.len() as i64 <= rows_max,
        "a requeue stays within its limit"
    );
    if !requeued.is_empty() {
        client.execute(NOTIFY_OUTBOX, &[&OUTBOX_CHANNEL]).await?;
    }
    Ok(requeued)
}

/// The lag gate's measure ([`OutboxStore::waiting_by_client`]): per client
/// with open rows, its due unleased rows counted up to `$1`, and the age in
/// seconds of the oldest. Public for the cost test, which explains it.
pub fn waiting_by_client_sql() -> &'static str {
    static WAITING: LazyLock<String> = LazyLock::new(|| {
        format!(
            "{groups}
SELECT grp.g, w.n, COALESCE(EXTRACT(EPOCH FROM now() - w.oldest)::float8, 0)
FROM grp CROSS JOIN LATERAL (
    SELECT count(*) AS n, min(available_at) AS oldest FROM (
        SELECT q.available_at FROM outbox q
        WHERE q.client_id = grp.g AND q.dead_at IS NULL AND q.available_at <= now()
          AND q.locked_until IS NULL
        ORDER BY q.available_at LIMIT $1) s
) w
WHERE grp.g IS NOT NULL AND w.n > 0",
            groups = OUTBOX.groups_sql()
        )
    });
    WAITING.as_str()
}

/// Records the calls of a batch and how they ended, for the console's
/// timeline; a fenced-out holder's call happened too and is kept. A first
/// claim's call that answered the final outcome (most calls) is not
/// written: the status change it made, with its event, tells the same, and
/// a row per transfer would be a fourth write on the settlement's hot path.
const RECORD_ATTEMPTS: &str = "
INSERT INTO provider_attempts (transfer_id, attempt, outcome, detail)
SELECT * FROM UNNEST($1::uuid[], $2::int4[], $3::text[], $4::text[])
ON CONFLICT DO NOTHING";

/// The outbox as its workers and operators see it: claim, settle, give
/// back, list, retry, and the backlog figures.
#[derive(Clone)]
pub struct OutboxStore(pub(super) Db);

impl OutboxStore {
    /// Opens every connection of the pool and prepares the relay's claim
    /// and the statements of a settlement of final outcomes on each (see
    /// `Store::warm_pool`); returns how many are open. Run it on the
    /// relay's thread, with the relay's own pool: a connection is driven by
    /// the thread that opened it.
    pub async fn warm(&self) -> Result<usize, StoreError> {
        let mut statements = vec![
            PICK.as_str(),
            CLAIM.as_str(),
            COMPLETE.as_str(),
            RESCHEDULE.as_str(),
            RECORD_ATTEMPTS,
        ];
        statements.extend(status::statements());
        self.0.warm(usize::MAX, &statements).await
    }

    /// Claims up to `limit` due rows for `lease`, fairly by client: each
    /// client's oldest rows in turn, each client at most `share` rows less
    /// what `held` says the claiming relay holds of it.
    pub async fn claim(
        &self,
        limit: i64,
        lease: Duration,
        share: i64,
        held: &[(Uuid, usize)],
    ) -> Result<Vec<ClaimedRow>, StoreError> {
        self.0
            .with_client(|client| async move {
                let rows = queue::claim_by_group(&client, &PICK, &CLAIM, limit, lease, share, held)
                    .await?;
                Ok(rows
                    .iter()
                    .map(|r| {
                        let claim = Claim::of(r);
                        let ambiguous: bool = r.get("ambiguous");
                        assert!(
                            ambiguous || !claim.reclaimed,
                            "a row taken over without a recorded outcome is ambiguous"
                        );
                        ClaimedRow {
                            payout: Payout {
                                transfer_id: r.get("transfer_id"),
                                account_owner: r.get("client_id"),
                                amount: r.get("amount"),
                                currency: r.get("currency"),
                                source_account: r.get("source_account"),
                                destination_account: r.get("destination_account"),
                            },
                            attempt: claim.attempt,
                            budget_used: claim.budget_used,
                            ambiguous,
                        }
                    })
                    .collect())
            })
            .await
    }

    /// Records how the calls of a batch of claimed rows ended, in one
    /// transaction: first the queue's part (the rows with a report deleted,
    /// the others rescheduled or dead, each only while still held under its
    /// claim, and the calls recorded: one round trip), then the reports of
    /// the rows still held, applied by the status machine (a transfer now
    /// `processing` is looked up, one now `succeeded` watched for a
    /// return, as `follow` says). A row appears at
    /// most once.
    pub async fn settle(
        &self,
        batch: &[(ClaimedRow, Settlement)],
        follow: FollowUp,
    ) -> Result<SettleReport, StoreError> {
        assert!(
            !batch.is_empty(),
            "a settlement batch settles at least one row"
        );
        // In transfer order: every writer that locks outbox rows and then
        // their transfers (this settlement, and the notifications and polls
        // of `status::apply`) takes them in the same order, so two
        // settlements of overlapping rows wait for each other instead of
        // deadlocking.
        let mut ordered: Vec<&(ClaimedRow, Settlement)> = batch.iter().collect();
        ordered.sort_unstable_by_key(|(r, _)| r.payout.transfer_id);
        assert!(
            ordered
                .windows(2)
                .all(|w| w[0].0.payout.transfer_id < w[1].0.payout.transfer_id),
            "a row appears at most once in a batch"
        );
        self.0
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                let held = settle_queue(&tx, &ordered).await?;
                let gone = gone_rows(&tx, &ordered, &held).await?;
                let reports: Vec<(Uuid, ProviderReport)> = ordered
                    .iter()
                    .filter_map(|(r, s)| match s {
                        Settlement::Report(report)
                            if held.done.contains(&r.payout.transfer_id)
                                || gone.contains(&r.payout.transfer_id) =>
                        {
                            Some((r.payout.transfer_id, report.clone()))
                        }
                        _ => None,
                    })
                    .collect();
                assert_eq!(
                    reports.len(),
                    held.done.len() + gone.len(),
                    "only a reported row is done"
                );
                let applied = status::apply(&tx, reports, Source::Relay, follow).await?;
                assert!(
                    applied
                        .changed
                        .iter()
                        .all(|t| held.done.contains(&t.id) || gone.contains(&t.id)),
                    "only a row still held, or whose work another report ended, changes its transfer"
                );
                assert!(
                    applied.unknown.is_empty(),
                    "an outbox row's transfer exists"
                );
                tx.commit().await?;
                Ok(SettleReport {
                    held: batch
                        .iter()
                        .map(|(r, _)| held.contains(&r.payout.transfer_id))
                        .collect(),
                    changed: applied.changed.iter().map(|t| t.id).collect(),
                    creation_to_final: applied.creation_to_final,
                    deliveries: applied.deliveries,
                    anomalies: applied.anomalies,
                })
            })
            .await
    }

    /// Outbox rows, oldest first; only dead ones with `dead_only`.
    pub async fn entries(
        &self,
        dead_only: bool,
        limit: i64,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        self.0.with_client(|client| async move {
            let rows = client
                .query(
                    "SELECT transfer_id, attempts, available_at, locked_until, last_error, dead_at, ambiguous FROM outbox \
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
                    ambiguous: r.get(6),
                })
                .collect())
        })
        .await
    }

    /// Wakes the relays of every process listening on the outbox channel.
    pub async fn wake_relays(&self) -> Result<(), StoreError> {
        self.0
            .with_client(|client| async move {
                client.execute(NOTIFY_OUTBOX, &[&OUTBOX_CHANNEL]).await?;
                Ok(())
            })
            .await
    }

    /// Puts a dead row back in line with a fresh attempt budget; false when
    /// no dead row has this id. The claim counter (the fencing token) is not
    /// lowered: a new budget starts from where it stands. Audited in the
    /// same transaction as done by `actor`, a command line (`cli:` and who
    /// ran it).
    pub async fn retry(&self, transfer_id: Uuid, actor: &str) -> Result<bool, StoreError> {
        let actor = actor.to_owned();
        self.0
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                let retried =
                    requeue_dead(&tx, Some(transfer_id), None, 1, 1).await? == [transfer_id];
                if retried {
                    let target = transfer_id.to_string();
                    super::console::audit_as(&tx, None, &actor, "outbox.retry", &target, 1).await?;
                }
                tx.commit().await?;
                Ok(retried)
            })
            .await
    }

    /// Gives back rows this process claimed and never called (a shutdown's
    /// drain): due at once and without a lease, so the next claim does not
    /// take them for ambiguous, and the claim does not count against the
    /// retry budget. Each only while still held under its claim.
    pub async fn release(&self, claims: &[(Uuid, i32)]) -> Result<u64, StoreError> {
        queue::release_by_id(&self.0, &RELEASE, claims).await
    }

    /// Gives their client to up to `rows_max` outbox rows written without
    /// one (by an engine of the release before, during a rolling deploy),
    /// so that the fair claim, which walks the rows client by client, sees
    /// them; answers how many. One index probe when there are none.
    pub async fn attribute(&self, rows_max: i64) -> Result<u64, StoreError> {
        assert!(rows_max > 0);
        self.0
            .with_client(|client| async move {
                let stmt = client
                    .prepare_cached(
                        "UPDATE outbox o SET client_id = t.client_id FROM transfers t
                         WHERE t.id = o.transfer_id AND o.transfer_id IN (
                             SELECT transfer_id FROM outbox WHERE client_id IS NULL LIMIT $1)",
                    )
                    .await?;
                let n = client.execute(&stmt, &[&rows_max]).await?;
                assert!(n as i64 <= rows_max, "an attribution keeps to its limit");
                Ok(n)
            })
            .await
    }

    /// Per client with any, the rows that are due and held by no relay (not
    /// leased), counted up to `count_max + 1`, and how long the oldest of
    /// them has waited: the settlement lag of `relay::lag`. Walks the
    /// per-client index: one descent per client with open rows, then from
    /// its oldest entry past the rows relays hold (at most their queues),
    /// stopping after `count_max + 1` waiting rows, so it stays cheap at
    /// any backlog.
    pub async fn waiting_by_client(
        &self,
        count_max: i64,
    ) -> Result<Vec<(Uuid, Waiting)>, StoreError> {
        self.0
            .with_client(|client| async move {
                let rows = client
                    .query(waiting_by_client_sql(), &[&(count_max + 1)])
                    .await?;
                Ok(rows
                    .iter()
                    .map(|row| {
                        let secs: f64 = row.get(2);
                        let waiting = Waiting {
                            rows: row.get(1),
                            oldest: Duration::from_secs_f64(secs.max(0.0)),
                        };
                        assert!(waiting.rows > 0 && waiting.rows <= count_max + 1);
                        (row.get(0), waiting)
                    })
                    .collect())
            })
            .await
    }

    /// Backlog and dead rows, each counted up to [`super::FIGURE_ROWS_MAX`],
    /// and the age of the oldest due row (one index entry per client).
    pub async fn stats(&self) -> Result<OutboxStats, StoreError> {
        static STATS: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT {}, {}, {}",
                super::capped_count("FROM outbox WHERE dead_at IS NULL", "$1"),
                super::capped_count("FROM outbox WHERE dead_at IS NOT NULL", "$1"),
                OUTBOX.oldest_due_age_sql(),
            )
        });
        self.0
            .with_client(|client| async move {
                let row = client
                    .query_one(STATS.as_str(), &[&super::FIGURE_ROWS_MAX])
                    .await?;
                Ok(OutboxStats {
                    backlog: row.get(0),
                    dead: row.get(1),
                    oldest_due_age_seconds: row.get(2),
                })
            })
            .await
    }
}

/// The rows of a batch still held under their claims after the queue's
/// part of a settlement.
struct Held {
    /// Reported rows, deleted: their reports are applied.
    done: HashSet<Uuid>,
    /// Rows due again later, or dead.
    rescheduled: HashSet<Uuid>,
}

impl Held {
    fn contains(&self, id: &Uuid) -> bool {
        self.done.contains(id) || self.rescheduled.contains(id)
    }
}

/// The queue's part of a settlement, in `tx` and one round trip (Postgres
/// runs pipelined statements in the order sent): deletes the reported rows
/// and reschedules the others, each only while held under its claim (the
/// fencing token), and records the calls. Answers which rows were held.
/// Of a batch's reported rows this holder no longer held, those whose
/// outbox row is gone: another report (a notification, a poll, another
/// holder's answer) ended the transfer's work first. Their reports are
/// still the provider's word about the payout, so they go through the
/// status machine too, which compares them with the status now: the same
/// is a late report, a contradiction an anomaly, never dropped silently.
/// (A row another holder took over still exists: its holder reports.)
async fn gone_rows(
    tx: &deadpool_postgres::Transaction<'_>,
    batch: &[&(ClaimedRow, Settlement)],
    held: &Held,
) -> Result<HashSet<Uuid>, StoreError> {
    let unheld: Vec<Uuid> = batch
        .iter()
        .filter(|(r, s)| {
            matches!(s, Settlement::Report(_)) && !held.done.contains(&r.payout.transfer_id)
        })
        .map(|(r, _)| r.payout.transfer_id)
        .collect();
    if unheld.is_empty() {
        return Ok(HashSet::new());
    }
    let stmt = tx
        .prepare_cached("SELECT transfer_id FROM outbox WHERE transfer_id = ANY ($1::uuid[])")
        .await?;
    let remaining: HashSet<Uuid> = tx
        .query(&stmt, &[&unheld])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok(unheld
        .into_iter()
        .filter(|id| !remaining.contains(id))
        .collect())
}

async fn settle_queue(
    tx: &deadpool_postgres::Transaction<'_>,
    batch: &[&(ClaimedRow, Settlement)],
) -> Result<Held, StoreError> {
    let (done_ids, done_attempts): (Vec<Uuid>, Vec<i32>) = batch
        .iter()
        .filter(|(_, s)| matches!(s, Settlement::Report(_)))
        .map(|(r, _)| (r.payout.transfer_id, r.attempt))
        .unzip();
    let (later_ids, later) = rescheduled(batch);
    assert_eq!(
        done_ids.len() + later.len(),
        batch.len(),
        "each row is done or due again"
    );
    let attempts = AttemptColumns::of(batch);
    let complete_stmt = tx.prepare_cached(&COMPLETE).await?;
    let record_stmt = tx.prepare_cached(RECORD_ATTEMPTS).await?;
    let complete = async {
        if done_ids.is_empty() {
            return Ok(Vec::new());
        }
        tx.query(&complete_stmt, &[&done_ids, &done_attempts]).await
    };
    let later_keys: [&(dyn ToSql + Sync); 1] = [&later_ids];
    let reschedule = later.run(tx, &RESCHEDULE, &later_keys);
    let record_params: [&(dyn ToSql + Sync); 4] = [
        &attempts.id,
        &attempts.attempt,
        &attempts.outcome,
        &attempts.detail,
    ];
    let record = async {
        if attempts.id.is_empty() {
            return Ok(0);
        }
        tx.execute(&record_stmt, &record_params).await
    };
    let (completed, rescheduled, recorded) = futures::join!(complete, reschedule, record);
    let (completed, rescheduled) = (completed?, rescheduled?);
    recorded?;
    let done: HashSet<Uuid> = completed.iter().map(|r| r.get(0)).collect();
    assert!(
        done.len() <= done_ids.len(),
        "a done row is one of the batch's"
    );
    let mut held_later = HashSet::with_capacity(rescheduled.len());
    for r in &rescheduled {
        let (id, attempts): (Uuid, i32) = (r.get(0), r.get(1));
        let claimed = batch.iter().find(|(c, _)| c.payout.transfer_id == id);
        assert_eq!(
            claimed.map(|(c, _)| c.attempt),
            Some(attempts),
            "a settled row carries its claim's fencing token"
        );
        held_later.insert(id);
    }
    Ok(Held {
        done,
        rescheduled: held_later,
    })
}

/// Every call of a batch as `provider_attempts` keeps it.
#[derive(Default)]
struct AttemptColumns<'a> {
    id: Vec<Uuid>,
    attempt: Vec<i32>,
    outcome: Vec<&'static str>,
    detail: Vec<Option<&'a str>>,
}

impl<'a> AttemptColumns<'a> {
    fn of(batch: &[&'a (ClaimedRow, Settlement)]) -> Self {
        let mut c = Self::default();
        for &(row, settlement) in batch {
            let (outcome, detail) = match settlement {
                // A first claim's final answer: its status change tells it.
                Settlement::Report(
                    ProviderReport::Succeeded { .. } | ProviderReport::Declined { .. },
                ) if row.attempt == 1 => continue,
                Settlement::Report(report @ ProviderReport::Declined { reason }) => {
                    (report.reported(), Some(reason))
                }
                Settlement::Report(report) => (report.reported(), report.reference()),
                Settlement::Retry {
                    error,
                    ambiguous: false,
                    ..
                } => ("error, retried", Some(error)),
                Settlement::Retry { error, .. } => ("outcome unknown, retried", Some(error)),
                Settlement::Dead { error, .. } => ("dead-lettered", Some(error)),
            };
            c.id.push(row.payout.transfer_id);
            c.attempt.push(row.attempt);
            c.outcome.push(outcome);
            c.detail.push(detail.map(ProviderText::as_str));
        }
        c
    }
}

/// The retries and dead letters of a batch: their ids, and the rest of the
/// queue's reschedule columns.
fn rescheduled<'a>(batch: &[&'a (ClaimedRow, Settlement)]) -> (Vec<Uuid>, Reschedule<'a, bool>) {
    let mut ids = Vec::new();
    let mut r = Reschedule::default();
    for &(row, settlement) in batch {
        let (delay, error, ambiguous) = match settlement {
            Settlement::Report(_) => continue,
            Settlement::Retry {
                delay,
                error,
                ambiguous,
            } => (Some(*delay), error, *ambiguous),
            Settlement::Dead { error, ambiguous } => (None, error, *ambiguous),
        };
        ids.push(row.payout.transfer_id);
        r.push(row.attempt, delay, error.as_str(), ambiguous);
    }
    (ids, r)
}
