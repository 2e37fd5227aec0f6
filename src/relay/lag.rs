//! Bounded settlement lag. Creates must not outrun settlement without
//! limit: while outbox rows have waited for a relay longer than
//! `--outbox-lag-max`, `POST /transfers` of a key not answered from memory
//! gets `503` with `Retry-After` (`settlement-lagging`), so that under
//! sustained overload the time from creation to a final status stays
//! bounded and clients get an honest retryable answer instead of a queue
//! that grows for ever. The same holds while more than
//! `--outbox-backlog-max` rows wait: an age alone lets every row admitted
//! before the bound is reached wait too, which under an overload of k
//! times the settlement rate is about k times the bound; a bounded count
//! bounds that wait by count / settlement rate.
//!
//! What is measured is the rows that are due and that no relay holds (not
//! leased), and the age of the oldest: rows waiting for a relay beyond what
//! the relays have in hand. Rows in a retry's backoff are not due, so a provider
//! outage alone does not refuse creates; rows leased by a process that died
//! are not counted while their lease runs, and are taken over as soon as it
//! ends. One query on the outbox's due index per `--outbox-lag-poll`, by
//! every process that runs a relay; its answer holds for the whole process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::store::outbox::Waiting;
use crate::store::OutboxStore;

/// Whether this process refuses new creates because settlement lags.
/// Cloned into the shard router; written only by [`watch`].
#[derive(Debug, Clone, Default)]
pub struct LagGate(Arc<AtomicBool>);

impl LagGate {
    /// A gate that is open: creates are accepted (also what a process
    /// without a relay keeps).
    pub fn open() -> Self {
        Self::default()
    }

    /// True while creates are refused.
    pub fn is_lagging(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, lagging: bool) {
        self.0.store(lagging, Ordering::Relaxed);
    }
}

/// Bounds of the lag watch, from `RelayConfig`.
#[derive(Debug, Clone, Copy)]
pub struct LagLimits {
    /// Oldest a waiting row may be before creates are refused.
    pub max: Duration,
    /// Most rows that may wait before creates are refused.
    pub rows_max: i64,
    /// How often its age is measured.
    pub poll: Duration,
}

impl From<&crate::config::ServeConfig> for LagLimits {
    fn from(config: &crate::config::ServeConfig) -> Self {
        let r = &config.relay;
        Self {
            max: r.outbox_lag_max,
            rows_max: r.outbox_backlog_max,
            poll: r.outbox_lag_poll,
        }
    }
}

/// Whether creates are refused after a measurement. Refusing starts when
/// the oldest waiting row is older than `max` or more than `rows_max` rows
/// wait, and ends once both are below half of their bound: a backlog that
/// hovers around a bound does not flip the answer on every measurement,
/// and once refusing, the relays get room to catch up by half of it.
fn lagging_after(lagging: bool, now: Waiting, limits: &LagLimits) -> bool {
    if lagging {
        now.oldest > limits.max / 2 || now.rows > limits.rows_max / 2
    } else {
        now.oldest > limits.max || now.rows > limits.rows_max
    }
}

/// Measures the lag every `limits.poll` and opens or closes `gate`. Runs
/// until its thread stops. A failed measurement keeps the last answer:
/// Postgres failing is answered by the shards' own 503s.
pub async fn watch(store: OutboxStore, limits: LagLimits, gate: LagGate) {
    assert!(
        !limits.poll.is_zero() && limits.poll < limits.max,
        "validated in config"
    );
    assert!(limits.rows_max > 0, "validated in config");
    let age_gauge = metrics::gauge!("payrail_outbox_waiting_age_seconds");
    let rows_gauge = metrics::gauge!("payrail_outbox_waiting_rows");
    let lagging_gauge = metrics::gauge!("payrail_settlement_lagging");
    let mut tick = tokio::time::interval(limits.poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = match store.waiting(limits.rows_max).await {
            Ok(now) => now,
            Err(e) => {
                tracing::debug!(error = %e, "could not measure the outbox's lag");
                continue;
            }
        };
        age_gauge.set(now.oldest.as_secs_f64());
        rows_gauge.set(now.rows as f64);
        let was = gate.is_lagging();
        let lagging = lagging_after(was, now, &limits);
        if lagging != was {
            if lagging {
                tracing::warn!(oldest = ?now.oldest, rows = now.rows, "settlement lags: new transfers are refused with 503 until it catches up");
            } else {
                tracing::info!(oldest = ?now.oldest, rows = now.rows, "settlement caught up: new transfers are accepted again");
            }
            gate.set(lagging);
            lagging_gauge.set(if lagging { 1.0 } else { 0.0 });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusing_starts_above_either_bound_and_ends_below_half_of_both() {
        let limits = LagLimits {
            max: Duration::from_secs(10),
            rows_max: 100,
            poll: Duration::from_millis(500),
        };
        let w = |secs, rows| Waiting {
            rows,
            oldest: Duration::from_secs(secs),
        };
        assert!(!lagging_after(false, w(10, 100), &limits));
        assert!(lagging_after(false, w(11, 0), &limits));
        assert!(lagging_after(false, w(0, 101), &limits));
        assert!(lagging_after(true, w(6, 0), &limits));
        assert!(lagging_after(true, w(0, 51), &limits));
        assert!(lagging_after(true, w(10, 100), &limits));
        assert!(!lagging_after(true, w(5, 50), &limits));
        assert!(!lagging_after(false, w(0, 0), &limits));
    }

    #[test]
    fn a_new_gate_is_open_and_follows_its_setting() {
        let gate = LagGate::open();
        let seen_by_router = gate.clone();
        assert!(!seen_by_router.is_lagging());
        gate.set(true);
        assert!(seen_by_router.is_lagging());
    }
}
