//! With `--webhook-sink`: after the drain, every transfer of this run that
//! became final was announced to the sink by exactly one event (one
//! distinct `webhook-id`), of the right type, validly signed; none that is
//! still pending was.

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
        let announced: HashSet<Uuid> = events
            .iter()
            .filter_map(|e| e.transfer_id.parse().ok())
            .filter(|id| finals.contains(id))
            .collect();
        summary.announced = announced.len() as u64;
        if announced.len() == finals.len() || started.elapsed() >= timeout {
            break events;
        }
        tokio::time::sleep(POLL).await;
    };
    summary.wait_s = started.elapsed().as_secs_f64();

    let mut by_transfer: HashMap<Uuid, Vec<&SinkEvent>> = HashMap::new();
    for e in &events {
        if let Ok(id) = e.transfer_id.parse::<Uuid>() {
            if ours.contains_key(&id) {
                by_transfer.entry(id).or_default().push(e);
            }
        }
    }
    let mut findings = Vec::new();
    for id in &finals {
        let t = ours[id];
        match by_transfer.get(id).map(Vec::as_slice).unwrap_or_default() {
            [] => findings.push(format!(
                "transfer {id} is {} but no webhook announced it within {timeout:?}",
                t.status
            )),
            [e] => {
                let want = format!("transfer.{}", t.status);
                if e.kind != want || e.status != t.status {
                    findings.push(format!(
                        "transfer {id} is {}, but its webhook {} says {} ({})",
                        t.status, e.id, e.kind, e.status
                    ));
                }
            }
            many => findings.push(format!(
                "transfer {id} was announced by {} distinct events: {:?}",
                many.len(),
                many.iter().map(|e| e.id.as_str()).collect::<Vec<_>>()
            )),
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
