//! Bounded settlement lag, per client. Creates must not outrun settlement
//! without limit: while a client's outbox rows have waited for a relay
//! longer than `--outbox-lag-max`, that client's `POST /transfers` of a key
//! not answered from memory gets `503` with `Retry-After`
//! (`settlement-lagging`), so that under
//! sustained overload the time from creation to a final status stays
//! bounded and clients get an honest retryable answer instead of a queue
//! that grows for ever. The same holds while more than
//! `--outbox-backlog-max` rows wait: an age alone lets every row admitted
//! before the bound is reached wait too, which under an overload of k
//! times the settlement rate is about k times the bound; a bounded count
//! bounds that wait by count / settlement rate.
//!
//! Per client, because a client is refused only for its own backlog: one
//! tenant sending faster than a slow provider settles fills its own queue,
//! and the relay's fair claims keep serving the others' rows meanwhile, so
//! their creates go on being accepted (the tests in
//! tests/isolation.rs measure it).
//!
//! What is measured is the rows that are due and that no relay holds (not
//! leased), and the age of the oldest: rows waiting for a relay beyond what
//! the relays have in hand. Rows in a retry's backoff are not due, so a provider
//! outage alone does not refuse creates; rows leased by a process that died
//! are not counted while their lease runs, and are taken over as soon as it
//! ends. One query per `--outbox-lag-poll`, by every process that runs a
//! relay, on the outbox's per-client index (one descent per client with
//! open rows, then at most `--outbox-backlog-max` rows of each); its answer
//! holds for the whole process.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use uuid::Uuid;

use crate::domain::ClientId;
use crate::store::outbox::Waiting;
use crate::store::OutboxStore;

/// Which clients this process refuses new creates of because their
/// settlement lags. Cloned into the shard router; written only by
/// [`watch`].
#[derive(Debug, Clone, Default)]
pub struct LagGate(Arc<Lagging>);

#[derive(Debug, Default)]
struct Lagging {
    /// Some client lags: the one read on the create path while none does.
    any: AtomicBool,
    clients: Mutex<HashSet<Uuid>>,
}

impl LagGate {
    /// A gate that is open: creates are accepted (also what a process
    /// without a relay keeps).
    pub fn open() -> Self {
        Self::default()
    }

    /// True while `client`'s creates are refused.
    pub fn is_lagging(&self, client: ClientId) -> bool {
        self.0.any.load(Ordering::Acquire) && crate::sync::lock(&self.0.clients).contains(&client.0)
    }

    /// The clients refused now.
    fn lagging(&self) -> HashSet<Uuid> {
        crate::sync::lock(&self.0.clients).clone()
    }

    fn set(&self, lagging: HashSet<Uuid>) {
        let any = !lagging.is_empty();
        *crate::sync::lock(&self.0.clients) = lagging;
        self.0.any.store(any, Ordering::Release);
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

/// Measures every client's lag every `limits.poll` and opens or closes
/// `gate` for each. Runs until its thread stops. A failed measurement keeps
/// the last answer: Postgres failing is answered by the shards' own 503s.
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
        // Rows an engine of the release before wrote without their client
        // (a rolling deploy) get it here, before they are measured and
        // claimed.
        match store.attribute(limits.rows_max).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                rows = n,
                "outbox rows written without their client attributed"
            ),
            Err(e) => tracing::debug!(error = %e, "could not attribute outbox rows"),
        }
        let by_client = match store.waiting_by_client(limits.rows_max).await {
            Ok(now) => now,
            Err(e) => {
                tracing::debug!(error = %e, "could not measure the outbox's lag");
                continue;
            }
        };
        let oldest = by_client.iter().map(|(_, w)| w.oldest).max();
        age_gauge.set(oldest.unwrap_or_default().as_secs_f64());
        rows_gauge.set(by_client.iter().map(|(_, w)| w.rows).sum::<i64>() as f64);
        let was = gate.lagging();
        // A client with no waiting row is not measured: it does not lag.
        let lagging: HashSet<Uuid> = by_client
            .iter()
            .filter(|(client, now)| lagging_after(was.contains(client), *now, &limits))
            .map(|(client, _)| *client)
            .collect();
        if lagging == was {
            continue;
        }
        // A client no longer measured has no waiting row: zero.
        let now = |client: &Uuid| {
            by_client
                .iter()
                .find(|(c, _)| c == client)
                .map_or((0, Duration::ZERO), |(_, w)| (w.rows, w.oldest))
        };
        for client in lagging.difference(&was) {
            let (rows, oldest) = now(client);
            tracing::warn!(%client, ?oldest, rows, "settlement lags for this client: its new transfers are refused with 503 until it catches up");
        }
        for client in was.difference(&lagging) {
            let (rows, oldest) = now(client);
            tracing::info!(%client, ?oldest, rows, "settlement caught up for this client: its new transfers are accepted again");
        }
        lagging_gauge.set(lagging.len() as f64);
        gate.set(lagging);
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
    fn a_new_gate_is_open_and_follows_its_setting_per_client() {
        let gate = LagGate::open();
        let seen_by_router = gate.clone();
        let (a, b) = (ClientId(Uuid::now_v7()), ClientId(Uuid::now_v7()));
        assert!(!seen_by_router.is_lagging(a));
        gate.set(HashSet::from([a.0]));
        assert!(seen_by_router.is_lagging(a));
        assert!(!seen_by_router.is_lagging(b), "only the client that lags");
        gate.set(HashSet::new());
        assert!(!seen_by_router.is_lagging(a));
    }
}
