//! With `--webhook-sink`: after the drain, every status change of every
//! transfer of this run was announced to the sink by exactly one event (one
//! distinct `webhook-id`), validly signed: a transfer's events, ordered by
//! `data.sequence`, number 1, 2, 3, … and spell an allowed path of the
//! status machine (`processing` perhaps, then `succeeded` or `failed`,
//! then perhaps `returned`) ending in its status now; none announced a
//! pending one.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use payrail::webhook::sink::{SinkEvent, SinkStats};
use reqwest::Url;
use serde::Serialize;
use tokio::time::Instant;
use uuid::Uuid;

use crate::client::{error_chain, Transfer};
use crate::record::Violations;

/// Pause between polls of the sink.
const POLL: Duration = Duration::from_millis(250);
/// Timeout of one read of the sink.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Most violations of one kind listed one by one.
const REPORTED_ONE_BY_ONE: usize = 20;

/// What the sink saw of this run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WebhookSummary {
    /// Final transfers of this run (each must be announced once).
    pub expected: u64,
    /// Of those, announced.
    pub announced: u64,
    /// Seconds from the end of the drain until every one was announced
    /// (or the timeout).
    pub wait_s: f64,
    /// The sink's `/stats` at the end.
    pub sink: SinkStats,
}

/// `payrail webhook-sink`, read over HTTP.
pub struct Sink {
    http: reqwest::Client,
    base: Url,
}

impl Sink {
    /// `base` must already have passed the loopback check.
    pub fn new(http: reqwest::Client, base: Url) -> Self {
        Self { http, base }
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, String> {
        let url = self.base.join(path).map_err(|e| e.to_string())?;
        let res = self
            .http
            .get(url)
            .timeout(READ_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("webhook sink GET /{path}: {}", error_chain(&e)))?;
        if !res.status().is_success() {
            return Err(format!(
                "webhook sink GET /{path} answered {}",
                res.status()
            ));
        }
        res.json()
            .await
            .map_err(|e| format!("webhook sink GET /{path}: {}", error_chain(&e)))
    }
}

/// Waits up to `timeout` for every final transfer in `transfers` to be
/// announced, then records every broken webhook invariant.
pub async fn check(
    sink: &Sink,
    transfers: &[&Transfer],
    timeout: Duration,
    v: &Violations,
) -> WebhookSummary {
    let ours: HashMap<Uuid, &Transfer> = transfers.iter().map(|t| (t.id, *t)).collect();
    let finals: HashSet<Uuid> = transfers
        .iter()
        .filter(|t| t.status != "pending")
        .map(|t| t.id)
        .collect();
    let complete = |id: &Uuid, events: &HashMap<Uuid, Vec<&SinkEvent>>| {
        events
            .get(id)
            .is_some_and(|mine| announced(&ours[id].status, mine))
    };
    let mut summary = WebhookSummary {
        expected: finals.len() as u64,
        ..WebhookSummary::default()
    };
    let started = Instant::now();
    let events = loop {
        let events: Vec<SinkEvent> = match sink.get("deliveries").await {
            Ok(events) => events,
            Err(e) => {
                v.push(format!("verification: {e}"));
                return summary;
            }
        };
        let ours_events = by_transfer(&events, |id| finals.contains(id));
        let announced: HashSet<Uuid> = finals
            .iter()
            .filter(|id| complete(id, &ours_events))
            .copied()
            .collect();
        summary.announced = announced.len() as u64;
        if announced.len() == finals.len() || started.elapsed() >= timeout {
            break events;
        }
        tokio::time::sleep(POLL).await;
    };
    summary.wait_s = started.elapsed().as_secs_f64();

    let by_transfer = by_transfer(&events, |id| ours.contains_key(id));
    let mut findings = Vec::new();
    for id in &finals {
        let t = ours[id];
        let mut events: Vec<&SinkEvent> = by_transfer.get(id).cloned().unwrap_or_default();
        if events.is_empty() {
            findings.push(format!(
                "transfer {id} is {} but no webhook announced it within {timeout:?}",
                t.status
            ));
            continue;
        }
        events.sort_by_key(|e| sequence(e));
        let sequences: Vec<i64> = events.iter().map(|e| sequence(e)).collect();
        let statuses: Vec<&str> = events.iter().map(|e| e.status.as_str()).collect();
        if sequences != (1..=events.len() as i64).collect::<Vec<_>>() {
            findings.push(format!(
                "transfer {id}: its events carry sequences {sequences:?} (each of 1..n exactly once expected): {:?}",
                events.iter().map(|e| e.id.as_str()).collect::<Vec<_>>()
            ));
        } else if let Some(e) = events
            .iter()
            .find(|e| e.kind != format!("transfer.{}", e.status))
        {
            findings.push(format!(
                "transfer {id}: webhook {} says {} of a transfer {}",
                e.id, e.kind, e.status
            ));
        } else if !is_path(&statuses, &t.status) {
            findings.push(format!(
                "transfer {id} is {}, but its events in sequence order say {statuses:?}",
                t.status
            ));
        }
    }
    for (id, events) in &by_transfer {
        if !finals.contains(id) {
            findings.push(format!(
                "transfer {id} is pending, but webhook {} announced it",
                events[0].id
            ));
        }
    }
    let n = findings.len();
    for f in findings.into_iter().take(REPORTED_ONE_BY_ONE) {
        v.push(f);
    }
    if n > REPORTED_ONE_BY_ONE {
        v.push(format!(
            "… {} more webhook findings",
            n - REPORTED_ONE_BY_ONE
        ));
    }
    match sink.get::<SinkStats>("stats").await {
        Ok(stats) => {
            if stats.bad_signatures > 0 {
                v.push(format!(
                    "the webhook sink refused {} deliveries for a bad signature or timestamp",
                    stats.bad_signatures
                ));
            }
            if stats.overlapping > 0 {
                v.push(format!(
                    "the webhook sink saw {} deliveries of one event arrive while another of the same was being answered",
                    stats.overlapping
                ));
            }
            summary.sink = stats;
        }
        Err(e) => v.push(format!("verification: {e}")),
    }
    summary
}

/// Whether `statuses`, in sequence order, is an allowed path of the status
/// machine from `pending` that ends in `now`.
pub fn is_path(statuses: &[&str], now: &str) -> bool {
    let mut at = "pending";
    for s in statuses {
        let allowed = matches!(
            (at, *s),
            ("pending", "processing" | "succeeded" | "failed")
                | ("processing", "succeeded" | "failed")
                | ("succeeded", "returned")
        );
        if !allowed {
            return false;
        }
        at = s;
    }
    at == now
}

/// The events of the transfers `keep` takes, by transfer.
fn by_transfer(
    events: &[SinkEvent],
    keep: impl Fn(&Uuid) -> bool,
) -> HashMap<Uuid, Vec<&SinkEvent>> {
    let mut grouped: HashMap<Uuid, Vec<&SinkEvent>> = HashMap::new();
    for e in events {
        if let Ok(id) = e.transfer_id.parse::<Uuid>() {
            if keep(&id) {
                grouped.entry(id).or_default().push(e);
            }
        }
    }
    grouped
}

/// An event's place among its transfer's changes; events of engines before
/// sequences count as 1.
fn sequence(e: &SinkEvent) -> i64 {
    e.sequence.unwrap_or(1)
}

/// Whether a transfer now in `status` is announced by `events` (its own):
/// every change up to that status, each by its own event. Deliveries are
/// retried in the background, so an earlier change's event may arrive
/// after a later one's (receivers order them by sequence): the event of
/// the status now is not enough.
fn announced(status: &str, events: &[&SinkEvent]) -> bool {
    let Some(last) = events
        .iter()
        .filter(|e| e.status == status)
        .map(|e| sequence(e))
        .max()
    else {
        return false;
    };
    let seen: HashSet<i64> = events.iter().map(|e| sequence(e)).collect();
    (1..=last).all(|n| seen.contains(&n))
}

#[cfg(test)]
mod tests {
    use super::{announced, is_path, SinkEvent};

    fn event(status: &str, sequence: i64) -> SinkEvent {
        SinkEvent {
            id: format!("evt_{sequence}"),
            kind: format!("transfer.{status}"),
            transfer_id: "01a24db9-ffc3-7270-b7ef-6fdb8b5e1868".into(),
            status: status.into(),
            sequence: Some(sequence),
            count: 1,
        }
    }

    #[test]
    fn a_transfer_is_announced_once_every_change_up_to_its_status_arrived() {
        let (processing, succeeded) = (event("processing", 1), event("succeeded", 2));
        assert!(announced("succeeded", &[&processing, &succeeded]));
        assert!(
            announced("succeeded", &[&succeeded, &processing]),
            "in any order of arrival"
        );
        assert!(
            !announced("succeeded", &[&succeeded]),
            "the first change's event is still being retried"
        );
        assert!(!announced("succeeded", &[&processing]));
        assert!(!announced("succeeded", &[]));
        assert!(announced("succeeded", &[&event("succeeded", 1)]));
    }

    #[test]
    fn paths_follow_the_status_machine() {
        assert!(is_path(&["succeeded"], "succeeded"));
        assert!(is_path(&["processing", "failed"], "failed"));
        assert!(is_path(
            &["processing", "succeeded", "returned"],
            "returned"
        ));
        assert!(is_path(&["succeeded", "returned"], "returned"));
        assert!(
            !is_path(&["succeeded"], "returned"),
            "a return never announced"
        );
        assert!(!is_path(&["failed", "succeeded"], "succeeded"));
        assert!(!is_path(&["processing", "processing"], "processing"));
        assert!(!is_path(&[], "succeeded"));
    }
}
