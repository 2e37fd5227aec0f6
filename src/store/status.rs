//! The status machine: the only writer of `transfers.status` after a
//! creation, and the only maker of status events. Every report, whatever
//! brought it (the relay's call or lookup, a signed notification, a poll),
//! is applied here, in the caller's transaction. A report moves a transfer
//! only along the allowed changes ([`TransferStatus::may_become`]), by an
//! `UPDATE` conditional on the statuses allowed before it, generated from
//! that one function (and the migration's trigger refuses any other
//! change; a test checks the two agree), so a notification, a poll and the
//! relay racing on one transfer can never move it backwards or out of a
//! final status. Each change raises the transfer's `status_sequence`,
//! writes its event, and moves its work: a transfer now `processing` is
//! polled, a final one leaves the outbox and the polls, a `succeeded` one
//! is watched for a return, a `returned` one no longer is.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;
use std::time::Duration;

use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::webhooks::WEBHOOK_CHANNEL;
use super::StoreError;
use crate::domain::webhook::NewEvent;
use crate::domain::{Effect, ProviderReport, ProviderText, Transfer, TransferStatus};

/// The caller's transaction.
type Tx<'a> = deadpool_postgres::Transaction<'a>;

/// Where a report came from, as anomalies record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The provider's answer to the payout, or the relay's lookup.
    Relay,
    /// A signed provider notification.
    Notification,
    /// A status lookup of a `processing` transfer.
    Poll,
    /// A lookup of a `succeeded` transfer, watched for a return.
    ReturnLookup,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Self::Relay => "relay",
            Self::Notification => "notification",
            Self::Poll => "poll",
            Self::ReturnLookup => "return-lookup",
        }
    }
}

/// The work that follows a status change, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowUp {
    /// A transfer now `processing` is first looked up this long after.
    pub poll_after: Duration,
    /// A transfer now `succeeded` is looked up again this often, while it
    /// may still be returned...
    pub return_lookup_every: Duration,
    /// ...this many times (0: never, and returns are learned only from
    /// notifications).
    pub return_lookups: i32,
}

impl FollowUp {
    /// `processing` transfers looked up after `poll_after`, and no
    /// return watch (for tests and tools).
    pub fn polls_only(poll_after: Duration) -> Self {
        Self {
            poll_after,
            return_lookup_every: Duration::ZERO,
            return_lookups: 0,
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

impl Applied {
    /// Counts a change made.
    fn push_change(&mut self, transfer: Transfer) {
        if matches!(
            transfer.status,
            TransferStatus::Succeeded | TransferStatus::Failed
        ) {
            // A clock behind the creating engine's reads as 0.
            self.creation_to_final.push(
                (transfer.updated_at - transfer.created_at)
                    .to_std()
                    .unwrap_or_default(),
            );
        }
        self.changed.push(transfer);
    }
}

/// One step of the status machine for a batch of transfers, each at most
/// once. The `UPDATE` waits for a row another transaction is changing and
/// then re-checks the condition on the row as that one left it. Answers
/// the changed transfers, and one row per report with the status read
/// before (none for an unknown transfer) and its place in the batch:
/// two lists rather than a join of the two CTEs, which a prepared
/// statement's generic plan (a CTE taken for one row) turns into a nested
/// loop quadratic in the batch. `{allowed_before}` is filled in by
/// [`allowed_before_case`].
const CHANGE_TEMPLATE: &str = "
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
    WHERE t.id = i.id AND t.status = ANY ({allowed_before})
    RETURNING t.*
)
SELECT c.*, NULL::uuid AS reported_id, NULL::text AS status_then, NULL::int8 AS n FROM changed c
UNION ALL
SELECT (NULL::transfers).*, i.id, before.status, i.n
FROM i LEFT JOIN transfers before ON before.id = i.id";

/// [`CHANGE_TEMPLATE`] with the allowed changes spelled out.
static CHANGE: LazyLock<String> =
    LazyLock::new(|| CHANGE_TEMPLATE.replace("{allowed_before}", &allowed_before_case()));

/// For the reported status `i.status`, the statuses a transfer may have
/// before it, as SQL: [`TransferStatus::allowed_before`] for each status
/// a change may lead to (`NULL`, which matches nothing, for any other).
fn allowed_before_case() -> String {
    let mut sql = String::from("CASE i.status");
    for next in TransferStatus::ALL {
        let before: Vec<String> = next
            .allowed_before()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        if !before.is_empty() {
            sql += &format!(
                " WHEN '{}' THEN ARRAY[{}]",
                next.as_str(),
                before.join(", ")
            );
        }
    }
    sql + " END"
}

/// Writes one event per status change, and one delivery per live endpoint
/// of its client; wakes the delivery workers (on commit) when it wrote any,
/// in the same statement. Answers the number of deliveries written.
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
), n AS (SELECT count(*) AS n FROM d)
SELECT n.n FROM n LEFT JOIN LATERAL (SELECT pg_notify($7, '') WHERE n.n > 0) wake ON true";

/// The statements every settlement of the relay runs, for a warm-up to
/// prepare.
pub(super) fn statements() -> [&'static str; 6] {
    [
        CHANGE.as_str(),
        START_POLLS,
        WATCH_RETURNS,
        END_WORK,
        INSERT_ANOMALIES,
        INSERT_EVENTS,
    ]
}

/// Transfers that became `returned` (`$1`) are no longer watched; those
/// that are now `succeeded` (`$2`) are, `$4` times, every `$3` seconds.
/// One statement for both, since most batches have neither returns nor
/// anything but successes.
const WATCH_RETURNS: &str = "
WITH gone AS (DELETE FROM return_watches WHERE transfer_id = ANY ($1::uuid[]))
INSERT INTO return_watches (transfer_id, next_lookup_at, lookups_left)
SELECT id, now() + make_interval(secs => $3), $4 FROM UNNEST($2::uuid[]) AS id
ON CONFLICT DO NOTHING";

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
const LOCK_WATCHES: &str =
    "SELECT transfer_id FROM return_watches WHERE transfer_id = ANY ($1::uuid[]) \
    ORDER BY transfer_id FOR UPDATE";

const INSERT_ANOMALIES: &str = "
INSERT INTO transfer_anomalies (transfer_id, status_then, reported, reference, reason, source)
SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])";

/// Applies `reports` in `tx`: every allowed change, its event and its
/// work; anomalies kept. A batch may hold several reports about one
/// transfer, in any order: they are applied in the order of a transfer's
/// life, one step of the status machine per statement. The relay passes
/// only reports whose outbox rows it still held (and has deleted, under
/// their fencing tokens, in `tx`). No report: nothing is sent.
pub(super) async fn apply(
    tx: &Tx<'_>,
    reports: Vec<(Uuid, ProviderReport)>,
    source: Source,
    follow: FollowUp,
) -> Result<Applied, StoreError> {
    if reports.is_empty() {
        return Ok(Applied::default());
    }
    let rounds = rounds_of(reports);
    if source != Source::Relay {
        lock_work(tx, &rounds).await?;
    }
    let mut applied = Applied::default();
    let mut anomalies = Anomalies::default();
    let mut unknown = HashSet::new();
    // Reported transfers that need no more work: changed to a final status,
    // or found final already (a late report about one still polled).
    let mut finished = Vec::new();
    for round in &rounds {
        change(
            tx,
            round,
            source,
            &mut applied,
            &mut anomalies,
            &mut unknown,
            &mut finished,
        )
        .await?;
    }
    applied.unknown = unknown.into_iter().collect();
    applied.anomalies = anomalies.id.len();
    let steps: usize = rounds.iter().map(Vec::len).sum();
    assert!(
        applied.changed.len() + applied.late + applied.anomalies <= steps,
        "a report is counted once"
    );
    finished.sort_unstable();
    finished.dedup();
    effects(tx, &mut applied, &anomalies, &finished, follow).await?;
    Ok(applied)
}

/// Splits reports into rounds, each with at most one step per transfer:
/// the `n`th round holds each transfer's `n`th step in the order of its
/// life (a `returned` that overtook its `succeeded` is two steps).
fn rounds_of(reports: Vec<(Uuid, ProviderReport)>) -> Vec<Vec<(Uuid, ProviderReport)>> {
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
    for round in &rounds {
        let ids: HashSet<Uuid> = round.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids.len(), round.len(), "a round changes a transfer once");
    }
    rounds
}

/// Locks the work rows of the batch's transfers before any transfer, in
/// the order the relay takes them (see [`LOCK_OUTBOX`]). The relay has
/// already locked (deleted) its own outbox rows, and the transfers' polls
/// after them, never before: no one holds a poll waiting for a row it has.
async fn lock_work(tx: &Tx<'_>, rounds: &[Vec<(Uuid, ProviderReport)>]) -> Result<(), StoreError> {
    let mut ids: Vec<Uuid> = rounds.iter().flatten().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    ids.dedup();
    let (outbox, polls, watches) = (
        tx.prepare_cached(LOCK_OUTBOX).await?,
        tx.prepare_cached(LOCK_POLLS).await?,
        tx.prepare_cached(LOCK_WATCHES).await?,
    );
    // One round trip: pipelined, and run by Postgres in the order sent
    // (outbox rows first, as the relay takes them; a return lookup
    // deletes its watch first, then changes the transfer).
    let params: [&(dyn ToSql + Sync); 1] = [&ids];
    futures::try_join!(
        tx.query(&outbox, &params),
        tx.query(&polls, &params),
        tx.query(&watches, &params)
    )?;
    Ok(())
}

/// One round: one `CHANGE` statement, each report then sorted into a
/// change, a late report, an anomaly or an unknown transfer.
async fn change(
    tx: &Tx<'_>,
    round: &[(Uuid, ProviderReport)],
    source: Source,
    applied: &mut Applied,
    anomalies: &mut Anomalies,
    unknown: &mut HashSet<Uuid>,
    finished: &mut Vec<Uuid>,
) -> Result<(), StoreError> {
    let stmt = tx.prepare_cached(&CHANGE).await?;
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
    let (mut now_changed, reports) = answers(&rows);
    assert_eq!(reports.len(), round.len(), "one answer per report");
    for (row, (id, report)) in reports.into_iter().zip(round) {
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
            assert_eq!(
                transfer.status,
                report.status(),
                "a change is to the reported status"
            );
            if transfer.status.is_final() {
                finished.push(transfer.id);
            }
            applied.push_change(transfer);
        } else {
            // Another transaction moved the row first: a `Change` by the
            // status read before is a report that lost the race.
            if then.is_final() {
                finished.push(*id);
            }
            match report.effect(then) {
                Effect::Anomaly => anomalies.push(*id, then, report, source),
                Effect::Late | Effect::Change => applied.late += 1,
            }
        }
    }
    assert!(now_changed.is_empty(), "every change answers a report");
    Ok(())
}

/// A `CHANGE` statement's answer: the changed transfers' rows by id, and
/// the rows of the reports in the order of the round.
fn answers(
    rows: &[tokio_postgres::Row],
) -> (
    HashMap<Uuid, &tokio_postgres::Row>,
    Vec<&tokio_postgres::Row>,
) {
    let mut changed = HashMap::new();
    let mut reports = Vec::with_capacity(rows.len());
    for row in rows {
        match row.get::<_, Option<i64>>("n") {
            Some(n) => reports.push((n, row)),
            None => {
                changed.insert(row.get::<_, Uuid>("id"), row);
            }
        }
    }
    reports.sort_unstable_by_key(|(n, _)| *n);
    (changed, reports.into_iter().map(|(_, row)| row).collect())
}

/// What the changes of a batch bring about, in one round trip: polls for
/// transfers now `processing` (and not finished later in the batch), no
/// more work for finished ones, the anomalies, and one event per change.
/// Every statement is prepared first, so that Postgres runs them in the
/// order sent (a statement still to be prepared would be sent after the
/// others), and a poll started in the batch is ended after it. `finished`
/// is sorted, each transfer once.
async fn effects(
    tx: &Tx<'_>,
    applied: &mut Applied,
    anomalies: &Anomalies,
    finished: &[Uuid],
    follow: FollowUp,
) -> Result<(), StoreError> {
    assert!(
        finished.windows(2).all(|w| w[0] < w[1]),
        "finished transfers are sorted and distinct"
    );
    let processing: Vec<Uuid> = applied
        .changed
        .iter()
        .filter(|t| {
            t.status == TransferStatus::Processing && finished.binary_search(&t.id).is_err()
        })
        .map(|t| t.id)
        .collect();
    let (returned, watched) = return_watch_changes(&applied.changed, follow);
    let poll_after = follow.poll_after.as_secs_f64();
    let return_every = follow.return_lookup_every.as_secs_f64();
    let events: Vec<NewEvent> = applied.changed.iter().map(NewEvent::of_change).collect();
    let (start_polls, watch_returns, end_work, keep_anomalies, insert_events) = (
        tx.prepare_cached(START_POLLS).await?,
        tx.prepare_cached(WATCH_RETURNS).await?,
        tx.prepare_cached(END_WORK).await?,
        tx.prepare_cached(INSERT_ANOMALIES).await?,
        tx.prepare_cached(INSERT_EVENTS).await?,
    );
    let watch_returns = async {
        if returned.is_empty() && watched.is_empty() {
            return Ok(0);
        }
        tx.execute(
            &watch_returns,
            &[&returned, &watched, &return_every, &follow.return_lookups],
        )
        .await
    };
    let start_polls = async {
        if processing.is_empty() {
            return Ok(0);
        }
        tx.execute(&start_polls, &[&processing, &poll_after]).await
    };
    let end_work = async {
        if finished.is_empty() {
            return Ok(0);
        }
        tx.execute(&end_work, &[&finished]).await
    };
    let keep_anomalies = async {
        if anomalies.id.is_empty() {
            return Ok(0);
        }
        tx.execute(
            &keep_anomalies,
            &[
                &anomalies.id,
                &anomalies.status_then,
                &anomalies.reported,
                &anomalies.reference,
                &anomalies.reason,
                &anomalies.source,
            ],
        )
        .await
    };
    let (started, watching, _, kept, deliveries) = futures::try_join!(
        start_polls,
        watch_returns,
        end_work,
        keep_anomalies,
        write_events(tx, &insert_events, &events)
    )?;
    assert!(
        started <= processing.len() as u64,
        "at most one poll per transfer"
    );
    assert!(
        watching <= watched.len() as u64,
        "at most one return watch per transfer"
    );
    assert_eq!(kept, anomalies.id.len() as u64, "every anomaly is kept");
    applied.deliveries = deliveries;
    Ok(())
}

/// Of a batch's changes: the transfers that became `returned` (their watch
/// ends) and, when returns are watched, those whose last change made them
/// `succeeded` (a watch starts).
fn return_watch_changes(changed: &[Transfer], follow: FollowUp) -> (Vec<Uuid>, Vec<Uuid>) {
    let mut last: HashMap<Uuid, TransferStatus> = HashMap::new();
    for t in changed {
        last.insert(t.id, t.status);
    }
    let mut returned = Vec::new();
    let mut watched = Vec::new();
    for (id, status) in last {
        match status {
            TransferStatus::Returned => returned.push(id),
            TransferStatus::Succeeded if follow.return_lookups > 0 => watched.push(id),
            _ => {}
        }
    }
    returned.sort_unstable();
    watched.sort_unstable();
    (returned, watched)
}

/// Writes the events of a batch's status changes, in `tx`; answers the
/// number of deliveries written.
async fn write_events(
    tx: &Tx<'_>,
    stmt: &tokio_postgres::Statement,
    events: &[NewEvent],
) -> Result<i64, tokio_postgres::Error> {
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
    let row = tx
        .query_one(
            stmt,
            &[
                &client_id,
                &id,
                &transfer_id,
                &kind,
                &body,
                &created_at,
                &WEBHOOK_CHANNEL,
            ],
        )
        .await?;
    Ok(row.get(0))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowed_changes_are_spelled_from_may_become() {
        assert_eq!(
            allowed_before_case(),
            "CASE i.status WHEN 'processing' THEN ARRAY['pending'] \
             WHEN 'succeeded' THEN ARRAY['pending', 'processing'] \
             WHEN 'failed' THEN ARRAY['pending', 'processing'] \
             WHEN 'returned' THEN ARRAY['succeeded'] END"
        );
        assert!(!CHANGE.contains("{allowed_before}"));
    }

    #[test]
    fn reports_about_one_transfer_are_applied_in_the_order_of_its_life() {
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let returned = ProviderReport::Returned {
            reference: None,
            reason: ProviderText::clean("closed"),
        };
        let processing = ProviderReport::Processing { reference: None };
        let rounds = rounds_of(vec![
            (a, returned),
            (b, processing.clone()),
            (a, processing),
        ]);
        let statuses: Vec<Vec<(Uuid, TransferStatus)>> = rounds
            .iter()
            .map(|r| r.iter().map(|(id, r)| (*id, r.status())).collect())
            .collect();
        // `returned` is two steps (succeeded, then returned), after `processing`.
        assert_eq!(
            statuses,
            vec![
                vec![
                    (a, TransferStatus::Processing),
                    (b, TransferStatus::Processing)
                ],
                vec![(a, TransferStatus::Succeeded)],
                vec![(a, TransferStatus::Returned)],
            ]
        );
    }
}
