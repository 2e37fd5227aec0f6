//! `--healthz`: the same HTTP client, workers and histogram against
//! `GET /healthz`, which touches neither the shards nor Postgres. What this
//! reaches is the ceiling of HTTP on this machine, the yardstick the
//! benchmark holds replays up to.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::task::JoinSet;
use tokio::time::Instant;
use url::Url;

use crate::args::Args;
use crate::record::{Recorder, Violations, ERROR, TIMEOUT};
use crate::report::{Invariants, Percentiles, Report};

/// Closed loop of `--concurrency` workers against `{target}/healthz` for
/// `--duration` or `--requests` requests; anything but `200` is a violation.
pub async fn run(http: reqwest::Client, target: &Url, args: &Args) -> Report {
    let url = target.join("healthz").unwrap_or_else(|_| target.clone());
    let recorder = Arc::new(Recorder::default());
    let violations = Arc::new(Violations::default());
    let started = Instant::now();
    let stop_at = started + args.duration;
    let sent = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..args.concurrency {
        let (http, url, recorder, violations, sent) = (
            http.clone(),
            url.clone(),
            recorder.clone(),
            violations.clone(),
            sent.clone(),
        );
        let (requests_max, timeout) = (args.requests, args.request_timeout);
        tasks.spawn(async move {
            while Instant::now() < stop_at && sent.fetch_add(1, Ordering::Relaxed) < requests_max {
                let at = Instant::now();
                match http.get(url.clone()).timeout(timeout).send().await {
                    Ok(res) => {
                        let status = res.status().as_u16();
                        let ok = status == 200 && res.bytes().await.is_ok();
                        recorder.attempt(&status.to_string(), Some(at.elapsed()));
                        if !ok {
                            violations.push(format!("GET /healthz answered {status}"));
                        }
                    }
                    Err(e) if e.is_timeout() => recorder.attempt(TIMEOUT, None),
                    Err(e) => {
                        recorder.attempt(ERROR, None);
                        violations.push(format!("GET /healthz failed: {e}"));
                    }
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let secs = started.elapsed().as_secs_f64().max(1e-9);

    let figures = recorder.figures();
    let (violations, violation_count) = violations.take();
    Report {
        requests: figures.attempts,
        throughput_rps: figures.attempts as f64 / secs,
        latency_ms: Percentiles::of(&figures.latency),
        status: figures.status,
        invariants: Invariants {
            ok: violation_count == 0 && figures.attempts > 0,
            violations,
            violation_count,
        },
        intents: 0,
        intents_per_s: 0.0,
        acknowledged: 0,
        unacknowledged: 0,
        committed_unanswered: 0,
        dropped: 0,
        scenarios: Default::default(),
        intent_latency_ms: Percentiles::of(&figures.intent_latency),
        elapsed_s: secs,
        mode: format!("closed loop, {} workers, GET /healthz", args.concurrency),
        mix: "healthz".into(),
        seed: 0,
        verification: Default::default(),
    }
}
