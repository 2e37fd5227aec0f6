//! What is collected while the load runs: the shared recorder of attempt and
//! intent counts and latencies, and the list of broken invariants. The
//! intents, the auditor and the webhook check write here; the report reads it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;
use payrail::sync::lock;

/// Longest latency the histograms hold exactly; longer ones saturate. One
/// hour is far beyond any bounded attempt.
const LATENCY_MAX_US: u64 = 3_600_000_000;
/// Violations kept verbatim; the rest are only counted so memory stays bounded
/// however badly a run goes.
const VIOLATIONS_KEPT: usize = 1000;

/// Status counter key for an attempt whose client timeout ran out.
pub const TIMEOUT: &str = "timeout";
/// Status counter key for an attempt that failed without an HTTP answer.
pub const ERROR: &str = "error";

/// An empty histogram of latencies in µs, exact up to `LATENCY_MAX_US`.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_MAX_US, 3).expect("static histogram bounds are valid")
}

/// Counts and latencies of attempts and intents, shared by every task. The
/// lock is held for a counter bump and a histogram record, never across an await.
pub struct Recorder {
    inner: Mutex<Figures>,
}

/// A copy of what the [`Recorder`] holds.
#[derive(Clone)]
pub struct Figures {
    /// Attempts sent (`POST /transfers`).
    pub attempts: u64,
    /// Per-attempt latency in µs.
    pub latency: Histogram<u64>,
    /// Per-intent latency in µs: from the (scheduled) start to its last answer.
    pub intent_latency: Histogram<u64>,
    /// Attempts by HTTP status, or `timeout`/`error`.
    pub status: BTreeMap<String, u64>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Figures {
                attempts: 0,
                latency: histogram(),
                intent_latency: histogram(),
                status: BTreeMap::new(),
            }),
        }
    }
}

impl Recorder {
    fn lock(&self) -> std::sync::MutexGuard<'_, Figures> {
        // Nothing panics while holding it; a poisoned lock still has sound counts.
        lock(&self.inner)
    }

    /// Counts one attempt under `status` and, when given, its latency.
    pub fn attempt(&self, status: &str, latency: Option<Duration>) {
        let mut f = self.lock();
        f.attempts += 1;
        *f.status.entry(status.to_owned()).or_default() += 1;
        if let Some(l) = latency {
            f.latency.saturating_record(micros(l));
        }
    }

    /// Records how long one intent took from its (scheduled) start.
    pub fn intent(&self, latency: Duration) {
        self.lock()
            .intent_latency
            .saturating_record(micros(latency));
    }

    /// A copy of the figures so far.
    pub fn figures(&self) -> Figures {
        self.lock().clone()
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// Broken invariants, in the order they were found.
#[derive(Default)]
pub struct Violations {
    inner: Mutex<(Vec<String>, u64)>,
}

impl Violations {
    /// Records one broken invariant.
    pub fn push(&self, message: impl Into<String>) {
        let mut inner = lock(&self.inner);
        inner.1 += 1;
        if inner.0.len() < VIOLATIONS_KEPT {
            inner.0.push(message.into());
        }
    }

    /// The kept messages and the total count.
    pub fn take(&self) -> (Vec<String>, u64) {
        std::mem::take(&mut *lock(&self.inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_are_counted_beyond_the_kept_ones() {
        let v = Violations::default();
        for i in 0..(VIOLATIONS_KEPT + 5) {
            v.push(format!("v{i}"));
        }
        let (kept, total) = v.take();
        assert_eq!(
            (kept.len(), total),
            (VIOLATIONS_KEPT, VIOLATIONS_KEPT as u64 + 5)
        );
    }
}
