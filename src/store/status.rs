//! Status changes from provider reports, in the caller's transaction. A
//! report moves a transfer only along the allowed changes
//! ([`TransferStatus::may_become`]), by an `UPDATE` conditional on the
//! statuses allowed before it (and the migration's trigger refuses any
//! other change), so a notification, a poll and the relay racing on one
//! transfer can never move it backwards or out of a final status. Each
//! change raises the transfer's `status_sequence`, writes its event, and
//! moves its work: a transfer now `processing` is polled, a final one
//! leaves the outbox and the polls.

use std::collections::HashMap;
use std::time::Duration;

use uuid::Uuid;

use super::StoreError;
use crate::domain::webhook::NewEvent;
use crate::domain::{Effect, ProviderReport, ProviderText, Transfer, TransferStatus};

/// Where a report came from, as anomalies record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The provider's answer to the payout, or the relay's lookup.
    Relay,
    /// A signed provider notification.
    Notification,
    /// A status lookup of a `processing` transfer.
    Poll,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Self::Relay => "relay",
            Self::Notification => "notification",
            Self::Poll => "poll",
        }
    }
}

/// What applying a batch of reports did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Every status change, in the order made (a `returned` that overtook
    /// its `succeeded` makes two).
    pub changed: Vec<Transfer>,
    /// Reports about transfers that do not exist.
    pub unknown: Vec<Uuid>,
    /// Reports kept as anomalies.
    pub anomalies: usize,
    /// Repeats and reports the transfer had moved past.
    pub late: usize,
    /// For each transfer that reached its outcome, the time since its
    /// creation.
    pub creation_to_final: Vec<Duration>,
    /// Webhook deliveries written for the changes' events.
    pub deliveries: i64,
}

/// One step of the status machine for a batch of transfers, each at most
/// once. The `UPDATE` waits for a row another transaction is changing and
/// then re-checks the condition on the row as that one left it. Answers
/// the changed transfers, and one row per report with the status read
/// before (none for an unknown transfer) and its place in the batch:
/// two lists rather than a join of the two CTEs, which a prepared
/// statement's generic plan (a CTE taken for one row) turns into a nested
/// loop quadratic in the batch.
const CHANGE: &str = "
WITH i AS (
    SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[])
        WITH ORDINALITY AS i(id, status, reference, reason, n)
), changed AS (
    UPDATE transfers t SET status = i.status,
        provider_reference = COALESCE(i.reference, t.provider_reference),
        failure_reason = CASE WHEN i.status = 'failed' THEN i.reason ELSE t.failure_reason END,
        return_reason = CASE WHEN i.status = 'returned' THEN i.reason ELSE t.return_reason END,
        returned_at = CASE WHEN i.status = 'returned' THEN now() ELSE t.returned_at END,
        status_sequence = t.status_sequence + 1,
        updated_at = now()
    FROM i
    WHERE t.id = i.id AND t.status = ANY (CASE i.status
        WHEN 'processing' THEN ARRAY['pending']
        WHEN 'succeeded' THEN ARRAY['pending', 'processing']
        WHEN 'failed' THEN ARRAY['pending', 'processing']
        WHEN 'returned' THEN ARRAY['succeeded'] END)
    RETURNING t.*
)
SELECT c.*, NULL::uuid AS reported_id, NULL::text AS status_then, NULL::int8 AS n FROM changed c
UNION ALL
SELECT (NULL::transfers).*, i.id, before.status, i.n
FROM i LEFT JOIN transfers before ON before.id = i.id";

/// Transfers now `processing` are looked up from `$2` seconds on.
const START_POLLS: &str = "
INSERT INTO provider_polls (transfer_id, next_poll_at)
SELECT id, now() + make_interval(secs => $2) FROM UNNEST($1::uuid[]) AS id
ON CONFLICT DO NOTHING";

/// Transfers with an outcome need neither a payout call nor a lookup. (The
/// relay deletes its own rows fenced before it applies; a holder of a row
/// deleted here finds its settlement fenced out.)
const END_WORK: &str = "
WITH o AS (DELETE FROM outbox WHERE transfer_id = ANY ($1::uuid[]))
DELETE FROM provider_polls WHERE transfer_id = ANY ($1::uuid[])";

/// The work rows of a batch's transfers, locked in transfer order before
/// any transfer is: the relay deletes its outbox rows and then changes
/// their transfers, so a notification or a poll that changed a transfer
/// first and then ended its work would wait for the relay while holding
/// what the relay waits for (a deadlock, seen under load with settlements
/// 5-50 ms after acceptance).
const LOCK_OUTBOX: &str =
    "SELECT transfer_id FROM outbox WHERE transfer_id = ANY ($1::uuid[]) ORDER BY transfer_id FOR UPDATE";
const LOCK_POLLS: &str =
    "SELECT transfer_id FROM provider_polls WHERE transfer_id = ANY ($1::uuid[]) \
    ORDER BY transfer_id FOR UPDATE";

const INSERT_ANOMALIES: &str = "
INSERT INTO transfer_anomalies (transfer_id, status_then, reported, reference, reason, source)
SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])";

/// Applies `reports` in `tx`: every allowed change, its event and its
/// work; anomalies kept. A batch may hold several reports about one
/// transfer, in any order: they are applied in the order of a transfer's
/// life, one step of the status machine per statement.
pub(super) async fn apply(
    tx: &deadpool_postgres::Transaction<'_>,
    reports: Vec<(Uuid, ProviderReport)>,
    source: Source,
    poll_after: Duration,
) -> Result<Applied, StoreError> {
    let mut steps: Vec<(Uuid, ProviderReport)> = reports
        .into_iter()
        .flat_map(|(id, r)| r.steps().into_iter().map(move |s| (id, s)))
        .collect();
    // Stable: two reports of one step about one transfer keep their order,
    // and the first one that applies wins.
    steps.sort_by_key(|(id, r)| (*id, rank(r)));
    let mut rounds: Vec<Vec<(Uuid, ProviderReport)>> = Vec::new();
    let mut nth: HashMap<Uuid, usize> = HashMap::new();
    for (id, report) in steps {
        let n = nth.entry(id).or_default();
        if rounds.len() <= *n {
            rounds.push(Vec::new());
        }
        rounds[*n].push((id, report));
        *n += 1;
    }

    let mut applied = Applied::default();
    let mut anomalies = Anomalies::default();
    let mut unknown = std::collections::HashSet::new();
    if source != Source::Relay {
        // The relay has already locked (deleted) its own outbox rows.
        let mut ids: Vec<Uuid> = rounds.iter().flatten().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        ids.dedup();
        let (outbox, polls) = (
            tx.prepare_cached(LOCK_OUTBOX).await?,
            tx.prepare_cached(LOCK_POLLS).await?,
        );
        // One round trip: pipelined, and run by Postgres in the order sent
        // (outbox rows first, as the relay takes them).
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&ids];
        futures::try_join!(tx.query(&outbox, &params), tx.query(&polls, &params))?;
    }
    let stmt = tx.prepare_cached(CHANGE).await?;
    for round in &rounds {
        let ids: Vec<Uuid> = round.iter().map(|(id, _)| *id).collect();
        let status: Vec<&str> = round.iter().map(|(_, r)| r.status().as_str()).collect();
        let reference: Vec<Option<&str>> = round
            .iter()
            .map(|(_, r)| r.reference().map(ProviderText::as_str))
            .collect();
        let reason: Vec<Option<&str>> = round
            .iter()
            .map(|(_, r)| r.reason().map(ProviderText::as_str))
            .collect();
        let rows = tx
            .query(&stmt, &[&ids, &status, &reference, &reason])
            .await?;
        let mut now_changed = std::collections::HashMap::new();
        let mut reports = Vec::with_capacity(round.len());
        for row in &rows {
            match row.get::<_, Option<i64>>("n") {
                Some(n) => reports.push((n, row)),
                None => {
                    now_changed.insert(row.get::<_, Uuid>("id"), row);
                }
            }
        }
        reports.sort_unstable_by_key(|(n, _)| *n);
        assert_eq!(reports.len(), round.len(), "one answer per report");
        for ((_, row), (id, report)) in reports.into_iter().zip(round) {
            assert_eq!(row.get::<_, Uuid>("reported_id"), *id);
            let Some(then) = row.get::<_, Option<String>>("status_then") else {
                unknown.insert(*id);
                continue;
            };
            let then = TransferStatus::parse(&then)
                .ok_or_else(|| StoreError::Corrupt(format!("status {then}")))?;
            if let Some(row) = now_changed.remove(id) {
                let transfer = super::transfers::transfer_from_row(row)?;
                assert!(
                    then.may_become(transfer.status),
                    "a status change is an allowed one"
                );
                if matches!(
                    transfer.status,
                    TransferStatus::Succeeded | TransferStatus::Failed
                ) {
                    // A clock behind the creating engine's reads as 0.
                    applied.creation_to_final.push(
                        (transfer.updated_at - transfer.created_at)
                            .to_std()
                            .unwrap_or_default(),
                    );
                }
                applied.changed.push(transfer);
            } else {
                // Another transaction moved the row first: a `Change` by
                // the status read before is a report that lost the race.
                match report.effect(then) {
                    Effect::Anomaly => anomalies.push(*id, then, report, source),
                    Effect::Late | Effect::Change => applied.late += 1,
                }
            }
        }
        assert!(now_changed.is_empty(), "every change answers a report");
    }
    applied.unknown = unknown.into_iter().collect();
    applied.anomalies = anomalies.id.len();

    let processing: Vec<Uuid> = applied
        .changed
        .iter()
        .filter(|t| t.status == TransferStatus::Processing)
        .map(|t| t.id)
        .collect();
    let finished: Vec<Uuid> = applied
        .changed
        .iter()
        .filter(|t| t.status.is_final())
        .map(|t| t.id)
        .collect();
    if !processing.is_empty() {
        let stmt = tx.prepare_cached(START_POLLS).await?;
        tx.execute(&stmt, &[&processing, &poll_after.as_secs_f64()])
            .await?;
    }
    if !finished.is_empty() {
        let stmt = tx.prepare_cached(END_WORK).await?;
        tx.execute(&stmt, &[&finished]).await?;
    }
    if !anomalies.id.is_empty() {
        let stmt = tx.prepare_cached(INSERT_ANOMALIES).await?;
        tx.execute(
            &stmt,
            &[
                &anomalies.id,
                &anomalies.status_then,
                &anomalies.reported,
                &anomalies.reference,
                &anomalies.reason,
                &anomalies.source,
            ],
        )
        .await?;
    }
    let events: Vec<NewEvent> = applied.changed.iter().map(NewEvent::of_change).collect();
    applied.deliveries = super::webhooks::insert_events(tx, &events).await?;
    Ok(applied)
}

/// A report's place in a transfer's life, for ordering one batch.
fn rank(report: &ProviderReport) -> u8 {
    match report {
        ProviderReport::Processing { .. } => 0,
        ProviderReport::Succeeded { .. } | ProviderReport::Declined { .. } => 1,
        ProviderReport::Returned { .. } => 2,
    }
}

/// Anomalies of a batch, one array per column.
#[derive(Default)]
struct Anomalies {
    id: Vec<Uuid>,
    status_then: Vec<&'static str>,
    reported: Vec<&'static str>,
    reference: Vec<Option<String>>,
    reason: Vec<Option<String>>,
    source: Vec<&'static str>,
}

impl Anomalies {
    fn push(&mut self, id: Uuid, then: TransferStatus, report: &ProviderReport, source: Source) {
        tracing::warn!(transfer_id = %id, status = then.as_str(), reported = report.reported(), source = source.as_str(),
            "a provider report contradicts the transfer's final status; kept as an anomaly");
        self.id.push(id);
        self.status_then.push(then.as_str());
        self.reported.push(report.reported());
        self.reference
            .push(report.reference().map(|r| r.as_str().to_owned()));
        self.reason
            .push(report.reason().map(|r| r.as_str().to_owned()));
        self.source.push(source.as_str());
    }
}
