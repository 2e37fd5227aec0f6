//! What a run prints: latency percentiles, the verdict on the invariants and
//! the final report as text or JSON, assembled from what `record` collected
//! and what the auditor found.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::verify::VerifySummary;

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest recorded.
    pub max: f64,
    /// Values recorded.
    pub count: u64,
}

impl Percentiles {
    /// Percentiles of a histogram of microseconds (all zero when empty).
    pub fn of(h: &Histogram<u64>) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        if h.is_empty() {
            return Self {
                p50: 0.0,
                p90: 0.0,
                p99: 0.0,
                p999: 0.0,
                max: 0.0,
                count: 0,
            };
        }
        Self {
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
            count: h.len(),
        }
    }
}

/// The verdict: `ok` exactly when no violation was found.
#[derive(Debug, Clone, Serialize)]
pub struct Invariants {
    /// No invariant broke.
    pub ok: bool,
    /// What broke (at most the first 1000, see `violation_count`).
    pub violations: Vec<String>,
    /// Every violation found, including those not listed.
    pub violation_count: u64,
}

/// Everything a run prints. The first five fields are the stable `--json`
/// contract; the rest are extra.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Attempts sent.
    pub requests: u64,
    /// Attempts per second over the load window.
    pub throughput_rps: f64,
    /// Per-attempt latency; deliberately abandoned short-timeout attempts are
    /// not in it (they measure the client's patience, not the server).
    pub latency_ms: Percentiles,
    /// Attempts by HTTP status, plus `timeout` and `error`.
    pub status: BTreeMap<String, u64>,
    /// The verdict.
    pub invariants: Invariants,
    /// Intents started.
    pub intents: u64,
    /// Intents started per second.
    pub intents_per_s: f64,
    /// Intents with at least one `201` naming their transfer.
    pub acknowledged: u64,
    /// Intents that ran out of attempts (or time) without any `201`.
    pub unacknowledged: u64,
    /// Intents acknowledged only by replays after an unanswered attempt: the
    /// server committed an attempt the client had given up on, the case
    /// retries with the same key exist for.
    pub committed_unanswered: u64,
    /// Open loop: scheduled intents not started because --max-in-flight was reached.
    pub dropped: u64,
    /// Intents by scenario.
    pub scenarios: BTreeMap<String, u64>,
    /// Per-intent latency, from the (scheduled) start to the last answer.
    pub intent_latency_ms: Percentiles,
    /// Length of the load window, seconds (until the last intent finished).
    pub elapsed_s: f64,
    /// `closed(N)` or `open(R/s)`.
    pub mode: String,
    /// The scenario mix.
    pub mix: String,
    /// The RNG seed, to repeat the run.
    pub seed: u64,
    /// What the read-back found.
    pub verification: VerifySummary,
}

impl Report {
    /// The process exit status for this report.
    pub fn exit_code(&self) -> i32 {
        if self.invariants.ok {
            0
        } else {
            1
        }
    }

    /// The human-readable report.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let l = &self.latency_ms;
        let il = &self.intent_latency_ms;
        let _ = writeln!(
            s,
            "payrail-loadtest: {}; mix {}; seed {}",
            self.mode, self.mix, self.seed
        );
        let _ = writeln!(
            s,
            "load:        {:.1} s, {} requests ({:.1}/s), {} intents ({:.1}/s), {} dropped",
            self.elapsed_s,
            self.requests,
            self.throughput_rps,
            self.intents,
            self.intents_per_s,
            self.dropped
        );
        let scenarios: Vec<String> = self
            .scenarios
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(
            s,
            "intents:     {}; acknowledged {}, never acknowledged {}, committed while unanswered {}",
            scenarios.join(", "),
            self.acknowledged,
            self.unacknowledged,
            self.committed_unanswered
        );
        let _ = writeln!(
            s,
            "latency ms:  p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  (per attempt, {} answered)",
            l.p50, l.p90, l.p99, l.p999, l.max, l.count
        );
        let _ = writeln!(
            s,
            "intent ms:   p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  (start to last answer)",
            il.p50, il.p90, il.p99, il.p999, il.max
        );
        let status: Vec<String> = self
            .status
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let _ = writeln!(s, "status:      {}", status.join("  "));
        let v = &self.verification;
        let _ = writeln!(
            s,
            "read back:   {} transfers of this run ({} succeeded, {} failed, {} returned, {} pending or processing), {} read one by one, {} of other keys ignored",
            v.transfers, v.succeeded, v.failed, v.returned, v.pending, v.read_back, v.foreign_ignored
        );
        if let Some(p) = &v.provider {
            let _ = writeln!(
                s,
                "provider:    executions +{}, distinct ids +{} (expected +{}), {} payouts compared, drained in {:.1} s",
                p.executions_delta, p.distinct_ids_delta, p.expected, p.payouts_checked, p.drain_s
            );
        }
        if let Some(w) = &v.webhooks {
            let _ = writeln!(
                s,
                "webhooks:    {} of {} final transfers announced (sink: {} accepted, {} distinct, {} bad signatures, {} failed on purpose), {:.1} s after the drain",
                w.announced, w.expected, w.sink.received, w.sink.distinct_ids, w.sink.bad_signatures, w.sink.failed_on_purpose, w.wait_s
            );
        }
        if self.invariants.ok {
            let _ = writeln!(s, "invariants:  OK");
        } else {
            let _ = writeln!(
                s,
                "invariants:  BROKEN ({} violations)",
                self.invariants.violation_count
            );
            for m in &self.invariants.violations {
                let _ = writeln!(s, "  - {m}");
            }
            let shown = self.invariants.violations.len() as u64;
            if self.invariants.violation_count > shown {
                let _ = writeln!(
                    s,
                    "  … and {} more",
                    self.invariants.violation_count - shown
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::record::{histogram, Recorder, TIMEOUT};

    fn report(violations: Vec<String>) -> Report {
        let rec = Recorder::default();
        for ms in 1..=1000u64 {
            rec.attempt("201", Some(Duration::from_millis(ms)));
        }
        rec.attempt(TIMEOUT, None);
        let f = rec.figures();
        let count = violations.len() as u64;
        Report {
            requests: f.attempts,
            throughput_rps: 100.5,
            latency_ms: Percentiles::of(&f.latency),
            status: f.status,
            invariants: Invariants {
                ok: violations.is_empty(),
                violations,
                violation_count: count,
            },
            intents: 1000,
            intents_per_s: 100.0,
            acknowledged: 1000,
            unacknowledged: 0,
            committed_unanswered: 0,
            dropped: 0,
            scenarios: BTreeMap::from([("unique".into(), 1000)]),
            intent_latency_ms: Percentiles::of(&f.intent_latency),
            elapsed_s: 10.0,
            mode: "closed(32)".into(),
            mix: "unique=100".into(),
            seed: 7,
            verification: VerifySummary::default(),
        }
    }

    #[test]
    fn percentiles_are_in_milliseconds() {
        let r = report(vec![]);
        let l = &r.latency_ms;
        assert_eq!(l.count, 1000, "timeouts carry no latency");
        // hdrhistogram keeps 3 significant digits.
        assert!((l.p50 - 500.0).abs() <= 0.5, "{l:?}");
        assert!((l.p90 - 900.0).abs() <= 1.0, "{l:?}");
        assert!((l.p99 - 990.0).abs() <= 1.0, "{l:?}");
        assert!((l.p999 - 999.0).abs() <= 1.0, "{l:?}");
        assert!((l.max - 1000.0).abs() <= 1.0, "{l:?}");
        assert!(l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.p999 && l.p999 <= l.max);
    }

    #[test]
    fn empty_histogram_gives_zeros() {
        let p = Percentiles::of(&histogram());
        assert_eq!((p.p50, p.max, p.count), (0.0, 0.0, 0));
    }

    #[test]
    fn json_has_the_documented_shape() {
        let v = serde_json::to_value(report(vec![])).unwrap();
        assert_eq!(v["requests"], 1001);
        assert!(v["throughput_rps"].is_f64());
        for p in ["p50", "p90", "p99", "p999", "max"] {
            assert!(v["latency_ms"][p].is_number(), "latency_ms.{p}");
        }
        assert_eq!(v["status"]["201"], 1000);
        assert_eq!(v["status"]["timeout"], 1);
        assert_eq!(v["invariants"]["ok"], true);
        assert_eq!(v["invariants"]["violations"], serde_json::json!([]));
    }

    #[test]
    fn a_violation_fails_the_run_and_is_listed() {
        let r = report(vec!["key k: two transfers".into()]);
        assert_eq!(r.exit_code(), 1);
        assert_eq!(report(vec![]).exit_code(), 0);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["invariants"]["ok"], false);
        assert_eq!(v["invariants"]["violations"][0], "key k: two transfers");
        let text = r.to_text();
        assert!(text.contains("BROKEN (1 violations)"), "{text}");
        assert!(text.contains("key k: two transfers"), "{text}");
        assert!(report(vec![]).to_text().contains("invariants:  OK"));
    }
}
