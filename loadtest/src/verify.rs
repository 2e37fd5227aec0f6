//! The auditor: after the load, everything is read back through the API (and
//! provider-sim) and compared with what the intents sent and were told.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use tokio::time::Instant;
use uuid::Uuid;

use crate::client::{Api, PayoutRecord, Sim, SimStats, Transfer};
use crate::intent::Intent;
use crate::record::Violations;

/// Timeout of one read; reads are cheap, so this only bounds a stuck server.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts of one read before it counts as failed (a `503` is retried).
const READ_ATTEMPTS: u32 = 5;
/// With `--api-key`, listing stops at transfers this much older than the run's
/// start: older ones cannot be this run's, and the slack covers clock skew.
const LIST_SLACK: Duration = Duration::from_secs(60);
/// Pause between drain polls.
const DRAIN_POLL: Duration = Duration::from_millis(200);
/// Most violations of one kind found by a bulk comparison that are listed one
/// by one; the rest are summed up in one line, so a systematic fault does not
/// bury every other finding.
const REPORTED_ONE_BY_ONE: usize = 20;

/// What the read-back found (counts; the violations go to [`Violations`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifySummary {
    /// Distinct transfers carrying a key this run sent.
    pub transfers: u64,
    /// Of those, `succeeded` at the end.
    pub succeeded: u64,
    /// Of those, `failed` at the end.
    pub failed: u64,
    /// Of those, `returned` at the end.
    pub returned: u64,
    /// Of those, still `pending` or `processing` at the end.
    pub pending: u64,
    /// Transfers read one by one with `GET /transfers/{id}`.
    pub read_back: u64,
    /// With `--api-key`: listed transfers of other keys, not this run's business.
    pub foreign_ignored: u64,
    /// With `--provider-url`: the provider's side.
    pub provider: Option<ProviderSummary>,
    /// With `--webhook-sink`: the announcements.
    pub webhooks: Option<crate::webhooks::WebhookSummary>,
}

/// provider-sim before and after, and what was expected.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProviderSummary {
    /// `/stats` before the load.
    pub before: SimStats,
    /// `/stats` after the drain.
    pub after: SimStats,
    /// `executions` after minus before.
    pub executions_delta: u64,
    /// `distinct_ids` after minus before.
    pub distinct_ids_delta: u64,
    /// Transfers this run created: the expected value of both deltas.
    pub expected: u64,
    /// Transfers compared with the sim's `GET /payouts/{id}` record.
    pub payouts_checked: u64,
    /// Seconds until no transfer of this run was `pending` (or the drain timeout).
    pub drain_s: f64,
}

/// What the auditor needs.
pub struct Audit<'a> {
    /// payrail as this run's client.
    pub api: &'a Api,
    /// provider-sim and its `/stats` before the load.
    pub sim: Option<(&'a Sim, SimStats)>,
    /// The webhook sink the client's endpoint points at.
    pub sink: Option<&'a crate::webhooks::Sink>,
    /// Every intent started.
    pub intents: &'a [Arc<Intent>],
    /// The client was created for this run, so it has no transfer of its own.
    pub fresh_client: bool,
    /// Wall-clock start of the load, to stop listing older transfers.
    pub run_started: SystemTime,
    /// Bound on waiting for transfers to leave `pending`.
    pub drain_timeout: Duration,
    /// Bound on the reads.
    pub verify_timeout: Duration,
    /// Reads in flight at once.
    pub concurrency: usize,
    /// Where broken invariants go.
    pub violations: &'a Violations,
}

/// Reads everything back and records every broken invariant.
pub async fn audit(a: Audit<'_>) -> VerifySummary {
    let mut summary = VerifySummary::default();
    let v = a.violations;
    let deadline = Instant::now() + a.verify_timeout;

    // 1. Every transfer of the client (or of this run's time window).
    let cutoff = (!a.fresh_client).then(|| a.run_started - LIST_SLACK);
    let max_pages = a.intents.len() / 100 + 1000;
    let listed = match tokio::time::timeout_at(deadline, list_all(a.api, cutoff, max_pages)).await {
        Ok(Ok(listed)) => listed,
        Ok(Err(e)) => {
            v.push(format!("verification: listing transfers failed: {e}"));
            return summary;
        }
        Err(_) => {
            v.push(
                "verification: listing transfers did not finish within --verify-timeout".to_owned(),
            );
            return summary;
        }
    };

    // 2. Exactly one transfer per key, and none of a key nobody sent.
    let by_key: HashMap<&str, &Intent> = a.intents.iter().map(|i| (i.key.as_str(), &**i)).collect();
    let mut ours: HashMap<&str, Vec<&Transfer>> = HashMap::new();
    let mut seen_ids = HashSet::new();
    let mut foreign = 0usize;
    for t in &listed {
        if !seen_ids.insert(t.id) {
            // Counted once below, so a pagination fault is not mistaken for a duplicate transfer.
            v.push(format!("GET /transfers lists transfer {} twice", t.id));
            continue;
        }
        match by_key.get(t.idempotency_key.as_str()) {
            Some(i) => ours.entry(i.key.as_str()).or_default().push(t),
            None if a.fresh_client => {
                foreign += 1;
                if foreign <= REPORTED_ONE_BY_ONE {
                    v.push(format!(
                        "transfer {} has key {:?}, which this run never sent",
                        t.id, t.idempotency_key
                    ));
                }
            }
            None => summary.foreign_ignored += 1,
        }
    }
    if foreign > REPORTED_ONE_BY_ONE {
        v.push(format!(
            "… {} more transfers of keys this run never sent",
            foreign - REPORTED_ONE_BY_ONE
        ));
    }
    // Ids that must be readable: every listed one and every acknowledged one.
    let mut to_read: Vec<(Uuid, &Intent)> = Vec::new();
    for intent in a.intents {
        let (acked, ids) = {
            let st = intent.state();
            (st.acknowledged, st.ids.clone())
        };
        let found = ours.get(intent.key.as_str()).map_or(&[][..], Vec::as_slice);
        let what = format!("key {} ({})", intent.key, intent.scenario);
        match found {
            [] if acked => v.push(format!(
                "{what}: acknowledged as transfer {ids:?}, but GET /transfers lists no transfer with this key"
            )),
            [] => {}
            [t] => {
                if !ids.is_empty() && !ids.contains(&t.id) {
                    v.push(format!(
                        "{what}: answers named {ids:?}, but the listed transfer is {}",
                        t.id
                    ));
                }
            }
            many => v.push(format!(
                "{what}: {} transfers with this key: {:?}",
                many.len(),
                many.iter().map(|t| t.id).collect::<Vec<_>>()
            )),
        }
        let mut wanted = ids;
        wanted.extend(found.iter().map(|t| t.id));
        to_read.extend(wanted.into_iter().map(|id| (id, &**intent)));
    }
    summary.transfers = ours.values().map(|ts| ts.len() as u64).sum();

    // 3. With the provider: wait until the provider has decided, returned
    // and told all it will (its asynchronous mode), then until payrail has
    // settled every transfer (by the relay, notifications or lookups).
    let mut drain_s = 0.0;
    if let Some((sim, _)) = a.sim {
        let drain_started = Instant::now();
        let quiet_by = drain_started + a.drain_timeout;
        while Instant::now() < quiet_by {
            match sim.stats(READ_TIMEOUT).await {
                Ok(s) if s.later_pending == 0 => break,
                _ => tokio::time::sleep(DRAIN_POLL).await,
            }
        }
        let pending: Vec<Uuid> = ours
            .values()
            .flatten()
            .filter(|t| !t.is_decided())
            .map(|t| t.id)
            .collect();
        let left = drain(a.api, pending, a.drain_timeout, a.concurrency).await;
        drain_s = drain_started.elapsed().as_secs_f64();
        if !left.is_empty() {
            v.push(format!(
                "{} transfers still pending after --drain-timeout {:?} (e.g. {:?}); their provider execution cannot be confirmed",
                left.len(),
                a.drain_timeout,
                left.iter().take(5).collect::<Vec<_>>()
            ));
        }
    }
    // The drain has its own bound; the reads get what was left of theirs.
    let deadline = deadline + Duration::from_secs_f64(drain_s);

    // 4. Each transfer read back one by one, as it is now.
    let read = tokio::time::timeout_at(deadline, read_back(a.api, &to_read, a.concurrency));
    let (finals, missing): ReadBack = match read.await {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => {
            v.push(format!("verification: reading transfers back failed: {e}"));
            return summary;
        }
        Err(_) => {
            v.push(
                "verification: reading transfers back did not finish within --verify-timeout"
                    .to_owned(),
            );
            return summary;
        }
    };
    summary.read_back = finals.len() as u64;
    for (t, intent) in &finals {
        check_transfer(t, intent, v);
        match t.status.as_str() {
            "succeeded" => summary.succeeded += 1,
            "failed" => summary.failed += 1,
            "returned" => summary.returned += 1,
            _ => summary.pending += 1,
        }
    }
    for (id, intent) in missing.iter().take(REPORTED_ONE_BY_ONE) {
        v.push(format!(
            "key {} ({}): transfer {id}, named by an answer or the list, answers 404 to GET /transfers/{{id}}",
            intent.key, intent.scenario
        ));
    }
    if missing.len() > REPORTED_ONE_BY_ONE {
        v.push(format!(
            "… {} more transfers answer 404",
            missing.len() - REPORTED_ONE_BY_ONE
        ));
    }

    // 5. One provider execution per transfer, and the sim agrees with payrail.
    if let Some((sim, before)) = a.sim {
        let mut p = ProviderSummary {
            before,
            drain_s,
            expected: summary.transfers,
            ..ProviderSummary::default()
        };
        match tokio::time::timeout_at(deadline, sim.stats(READ_TIMEOUT)).await {
            Ok(Ok(after)) => {
                p.after = after;
                p.executions_delta = after.executions.saturating_sub(before.executions);
                p.distinct_ids_delta = after.distinct_ids.saturating_sub(before.distinct_ids);
                if after.executions < before.executions {
                    v.push(
                        "provider-sim /stats went backwards: was it restarted during the run?"
                            .to_owned(),
                    );
                }
                if p.executions_delta != p.expected {
                    v.push(format!(
                        "provider executions grew by {}, but this run created {} transfers",
                        p.executions_delta, p.expected
                    ));
                }
                if p.distinct_ids_delta != p.expected {
                    v.push(format!(
                        "provider distinct ids grew by {}, but this run created {} transfers",
                        p.distinct_ids_delta, p.expected
                    ));
                }
                if after.executions != after.distinct_ids {
                    v.push(format!(
                        "provider executed {} payouts for {} distinct ids",
                        after.executions, after.distinct_ids
                    ));
                }
            }
            Ok(Err(e)) => v.push(format!("verification: {e}")),
            Err(_) => v.push("verification: provider-sim /stats did not answer in time".to_owned()),
        }
        let settled: Vec<&Transfer> = finals
            .iter()
            .map(|(t, _)| t)
            .filter(|t| t.is_decided())
            .collect();
        match tokio::time::timeout_at(deadline, compare_payouts(sim, &settled, a.concurrency, v)).await {
            Ok(n) => p.payouts_checked = n,
            Err(_) => v.push("verification: comparing provider-sim payouts did not finish within --verify-timeout".to_owned()),
        }
        summary.provider = Some(p);
    }

    // 6. One webhook event per final transfer, none for a pending one.
    if let Some(sink) = a.sink {
        let transfers: Vec<&Transfer> = finals.iter().map(|(t, _)| t).collect();
        summary.webhooks = Some(crate::webhooks::check(sink, &transfers, a.drain_timeout, v).await);
    }
    summary
}

/// Every page of `GET /transfers`, newest first, until the end, `cutoff`, or
/// `max_pages`.
async fn list_all(
    api: &Api,
    cutoff: Option<SystemTime>,
    max_pages: usize,
) -> Result<Vec<Transfer>, String> {
    let mut all = Vec::new();
    let mut after = None;
    for _ in 0..max_pages {
        let page = retry(|| api.list_page(after, READ_TIMEOUT)).await?;
        let older_than_run = match (cutoff, page.data.last()) {
            (Some(cutoff), Some(last)) => {
                humantime::parse_rfc3339(&last.created_at).is_ok_and(|at| at < cutoff)
            }
            _ => false,
        };
        after = page.data.last().map(|t| t.id);
        all.extend(page.data);
        if !page.has_more || older_than_run || after.is_none() {
            return Ok(all);
        }
    }
    Err(format!(
        "more than {max_pages} pages of transfers; listing stopped"
    ))
}

/// Polls the pending transfers until none is pending or `timeout` passes;
/// returns those still pending.
async fn drain(
    api: &Api,
    mut pending: Vec<Uuid>,
    timeout: Duration,
    concurrency: usize,
) -> Vec<Uuid> {
    let deadline = Instant::now() + timeout;
    while !pending.is_empty() && Instant::now() < deadline {
        tokio::time::sleep_until((Instant::now() + DRAIN_POLL).min(deadline)).await;
        let round = futures::stream::iter(pending.clone())
            .map(|id| async move {
                match api.get_transfer(id, READ_TIMEOUT).await {
                    Ok(Some(t)) if t.is_decided() => None,
                    // Still pending, or unreadable for now: ask again next round.
                    _ => Some(id),
                }
            })
            .buffer_unordered(concurrency)
            .filter_map(|x| async move { x })
            .collect::<Vec<_>>();
        match tokio::time::timeout_at(deadline, round).await {
            Ok(left) => pending = left,
            Err(_) => break,
        }
    }
    pending
}

/// Found and missing transfers, each with its intent.
type ReadBack<'i> = (Vec<(Transfer, &'i Intent)>, Vec<(Uuid, &'i Intent)>);

/// `GET /transfers/{id}` for each id: the transfers found, and the ids that
/// answered 404.
async fn read_back<'i>(
    api: &Api,
    ids: &[(Uuid, &'i Intent)],
    concurrency: usize,
) -> Result<ReadBack<'i>, String> {
    let answers: Vec<(Uuid, &Intent, Option<Transfer>)> =
        futures::stream::iter(ids.iter().copied())
            .map(|(id, intent)| async move {
                let t = retry(|| api.get_transfer(id, READ_TIMEOUT)).await?;
                Ok::<_, String>((id, intent, t))
            })
            .buffer_unordered(concurrency)
            .try_collect()
            .await?;
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for (id, intent, t) in answers {
        match t {
            Some(t) => found.push((t, intent)),
            None => missing.push((id, intent)),
        }
    }
    Ok((found, missing))
}

/// The read-back transfer is the intent's, as sent, in a consistent state.
fn check_transfer(t: &Transfer, intent: &Intent, v: &Violations) {
    let what = format!("key {} ({}) transfer {}", intent.key, intent.scenario, t.id);
    if t.idempotency_key != intent.key {
        v.push(format!(
            "{what}: GET shows idempotency_key {:?}",
            t.idempotency_key
        ));
    }
    let mismatches = intent.body.mismatches(t);
    if !mismatches.is_empty() {
        v.push(format!(
            "{what}: GET differs from the first request: {}",
            mismatches.join("; ")
        ));
    }
    match t.status.as_str() {
        "pending" | "processing" => {}
        "returned" if t.return_reason.is_none() => {
            v.push(format!("{what}: returned without return_reason"))
        }
        "succeeded" | "returned" if t.provider_reference.is_none() => {
            v.push(format!("{what}: succeeded without provider_reference"))
        }
        "failed" if t.failure_reason.is_none() => {
            v.push(format!("{what}: failed without failure_reason"))
        }
        "succeeded" | "failed" | "returned" => {}
        other => v.push(format!("{what}: unknown status {other:?}")),
    }
}

/// Each settled transfer against the sim's record of its payout; returns how
/// many were compared.
async fn compare_payouts(
    sim: &Sim,
    settled: &[&Transfer],
    concurrency: usize,
    v: &Violations,
) -> u64 {
    let results: Vec<(Uuid, Result<Option<PayoutRecord>, String>)> =
        futures::stream::iter(settled.iter().map(|t| t.id))
            .map(|id| async move { (id, retry(|| sim.payout(id, READ_TIMEOUT)).await) })
            .buffer_unordered(concurrency)
            .collect()
            .await;
    let by_id: HashMap<Uuid, &Transfer> = settled.iter().map(|t| (t.id, *t)).collect();
    let mut checked = 0;
    let mut found = 0usize;
    let mut report = |message: String| {
        found += 1;
        if found <= REPORTED_ONE_BY_ONE {
            v.push(message);
        }
    };
    for (id, result) in results {
        let t = by_id[&id];
        match result {
            Err(e) => report(format!("verification: {e}")),
            Ok(None) => report(format!(
                "transfer {id} is {} but provider-sim never executed it",
                t.status
            )),
            Ok(Some(p)) => {
                checked += 1;
                let mut diffs = Vec::new();
                if p.transfer_id != t.id {
                    diffs.push(format!("transfer_id {}", p.transfer_id));
                }
                if (p.amount, &p.currency) != (t.amount, &t.currency) {
                    diffs.push(format!("amount {} {}", p.amount, p.currency));
                }
                if (&p.source_account, &p.destination_account)
                    != (&t.source_account, &t.destination_account)
                {
                    diffs.push(format!(
                        "accounts {} -> {}",
                        p.source_account, p.destination_account
                    ));
                }
                match (t.status.as_str(), p.status.as_str()) {
                    ("succeeded", "succeeded") | ("returned", "returned") => {
                        if t.provider_reference != p.reference {
                            diffs.push(format!(
                                "reference {:?} vs payrail's {:?}",
                                p.reference, t.provider_reference
                            ));
                        }
                    }
                    ("failed", "declined") => {}
                    (ours, theirs) => {
                        diffs.push(format!("payrail says {ours}, provider says {theirs}"))
                    }
                }
                if !diffs.is_empty() {
                    report(format!(
                        "transfer {id}: provider-sim's payout differs: {}",
                        diffs.join("; ")
                    ));
                }
            }
        }
    }
    if found > REPORTED_ONE_BY_ONE {
        v.push(format!(
            "… {} more transfers disagree with provider-sim",
            found - REPORTED_ONE_BY_ONE
        ));
    }
    checked
}

/// A read, retried on errors (a `503`, a reset connection) a few times.
async fn retry<T, F, Fut>(mut op: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let mut last = String::new();
    for attempt in 0..READ_ATTEMPTS {
        match op().await {
            Ok(x) => return Ok(x),
            Err(e) => last = e,
        }
        if attempt + 1 < READ_ATTEMPTS {
            tokio::time::sleep(Duration::from_millis(100) * 2u32.pow(attempt)).await;
        }
    }
    Err(last)
}
