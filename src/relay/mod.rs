//! The outbox relay: takes due outbox rows and has the provider execute
//! each transfer under its id, until the transfer is final. Outcomes are
//! settled in batches (one transaction for many rows).

mod handoff;
pub mod lag;
mod nudge;
mod work;

pub use handoff::{Handoff, HandoffCount, RelayOutlet};
pub use lag::LagGate;
pub use nudge::RelayNudge;
pub use work::OutboxWork;

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr, Arbiter};

use crate::config::ServeConfig;
use crate::provider::http::HttpProvider;
use crate::provider::Provider;
use crate::queue::window::{call_window, settle_bound};
use crate::queue::worker::{Worker, WorkerLimits};
use crate::queue::RetryPolicy;
use crate::started::{DrainOrder, Started};
use crate::store::Store;

/// The relay: the one queue's worker skeleton running [`OutboxWork`].
pub type Relay = Worker<OutboxWork>;

/// Connections of the relay's own Postgres pool: what it runs at once is
/// a claim, a settlement and the two backlog readings (the lag gate's and
/// the worker's report). Its own, like each shard's, so that they are
/// opened, and so driven, on the relay's thread.
const DB_CONNECTIONS: usize = 4;

/// A running relay: its address, its thread, and the hand-off the shards
/// use to give it the rows they claim.
pub struct RelayHandle {
    /// Its thread and worker, drained first on shutdown.
    pub part: Started,
    /// For the shards.
    pub handoff: Handoff,
    /// Closed while settlement lags (`--outbox-lag-max`); for the shards.
    pub lag: LagGate,
}

/// Starts the relay of `--provider-url` on a thread of its own, with
/// `--relay-warm-connections` provider connections open; `None` without a
/// provider (transfers then stay `pending`).
pub async fn start(config: &ServeConfig, store: &Store) -> anyhow::Result<Option<RelayHandle>> {
    let Some(url) = &config.provider_url else {
        tracing::warn!("no --provider-url: the relay is off and transfers stay pending");
        return Ok(None);
    };
    let r = &config.relay;
    let store = &store.with_own_pool(DB_CONNECTIONS)?;
    // One idle connection per call the relay may have in flight: with
    // fewer, every burst of calls closes the surplus and the next opens
    // them again.
    let provider = HttpProvider::with_pool(url, r.provider_timeout, r.relay_concurrency)?;
    let arbiter = Arbiter::new();
    warm(
        &arbiter,
        &provider,
        store,
        r.relay_warm_connections.min(r.relay_concurrency),
    )
    .await;
    let provider = Arc::new(provider);
    let count = Arc::new(HandoffCount::default());
    let addr = start_worker(
        &arbiter,
        store.clone(),
        provider,
        RelayLimits::from(config),
        count.clone(),
    );
    let handoff = Handoff::new(addr.clone(), count, r.relay_queue, r.relay_lease);
    let lag = LagGate::open();
    // On the relay's thread: it stops with the relay.
    arbiter.spawn(lag::watch(
        store.outbox(),
        lag::LagLimits::from(config),
        lag.clone(),
    ));
    Ok(Some(RelayHandle {
        part: Started::draining("relay", arbiter, DrainOrder::First, addr.recipient()),
        handoff,
        lag,
    }))
}

/// Opens `--relay-warm-connections` provider connections, and the relay's
/// Postgres connections with its statements prepared, on the relay's
/// thread (each provider call bounded by `--provider-timeout`).
async fn warm(arbiter: &Arbiter, provider: &HttpProvider, store: &Store, connections: usize) {
    let thread = arbiter.handle();
    let outbox = store.outbox();
    let provider = provider.clone();
    futures::join!(
        crate::warm::on(
            thread.clone(),
            "the relay's Postgres connections",
            async move { outbox.warm().await }
        ),
        crate::warm::on(thread.clone(), "the provider connections", async move {
            if connections == 0 {
                return Ok(0);
            }
            let answered = provider.warm(connections).await;
            assert!(answered <= connections, "one answer per call at most");
            if answered < connections {
                return Err(format!(
                    "the provider answered {answered} of {connections} lookups"
                ));
            }
            Ok(answered)
        }),
    );
}

/// Starts the relay's worker on `arbiter`, with the count of rows the
/// shards hand it.
pub fn start_worker(
    arbiter: &Arbiter,
    store: Store,
    provider: Arc<dyn Provider>,
    limits: RelayLimits,
    handed_over: Arc<HandoffCount>,
) -> Addr<Relay> {
    let window = limits
        .call_window()
        .expect("the configuration was validated");
    let worker_limits = WorkerLimits {
        concurrency_max: limits.concurrency_max,
        poll_interval: limits.poll_interval,
        call_window: window,
        settle_batch_max: limits.settle_batch_max,
    };
    Relay::start_in_arbiter(&arbiter.handle(), move |_| {
        let work = OutboxWork::new(store.outbox(), provider, limits);
        Worker::new(work, store.listener(), worker_limits, Some(handed_over))
    })
}

/// Bounds of the relay, from `RelayConfig`.
#[derive(Debug, Clone, Copy)]
pub struct RelayLimits {
    /// Provider calls in flight at once.
    pub concurrency_max: usize,
    /// Fallback poll interval.
    pub poll_interval: Duration,
    /// How long a claim holds a row.
    pub lease: Duration,
    /// Backoff and retry budget (`--relay-retry-base`, `--relay-retry-cap`,
    /// `--relay-attempts-max`).
    pub retry: RetryPolicy,
    /// Bound on one provider call.
    pub provider_timeout: Duration,
    /// Bound on one settlement transaction.
    pub settle_timeout: Duration,
    /// Most outcomes settled in one transaction.
    pub settle_batch_max: usize,
    /// What follows the changes the provider's answers make: when a
    /// `processing` transfer is looked up, how a `succeeded` one is
    /// watched for a return.
    pub follow: crate::store::status::FollowUp,
}

impl From<&ServeConfig> for RelayLimits {
    fn from(config: &ServeConfig) -> Self {
        let r = &config.relay;
        Self {
            concurrency_max: r.relay_concurrency,
            poll_interval: r.relay_poll,
            lease: r.relay_lease,
            retry: RetryPolicy::exponential(
                r.relay_retry_base,
                r.relay_retry_cap,
                r.relay_attempts_max,
            ),
            provider_timeout: r.provider_timeout,
            settle_timeout: config.database.db_timeout,
            settle_batch_max: r.relay_settle_batch_max,
            follow: crate::outcome::follow_up(&config.outcomes),
        }
    }
}

/// Refuses flags under which a relay's call could outlive its lease (the
/// part of the configuration's validation that needs the relay's own
/// arithmetic); checked at start-up, before anything starts.
pub fn check(config: &ServeConfig) -> Result<(), String> {
    let limits = RelayLimits::from(config);
    match limits.call_window() {
        Some(_) => Ok(()),
        None => Err(format!(
            "--relay-lease must be longer than 2 × --provider-timeout plus 3 × --db-timeout \
             and the pauses between those tries ({:?} here)",
            limits.call_bound()
        )),
    }
}

impl RelayLimits {
    /// The longest a claimed row can keep this process busy once its call
    /// starts: a lookup and a `POST`, each bounded by the provider timeout,
    /// then every try of the settlement with the pauses between them.
    pub fn call_bound(&self) -> Duration {
        self.provider_timeout * 2 + settle_bound(self.settle_timeout)
    }

    /// How long after a claim a call may still start: all of
    /// [`Self::call_bound`] must end before the lease does, so that no other
    /// process takes the row over while it is in flight; `None` when the
    /// lease is too short for that.
    pub fn call_window(&self) -> Option<Duration> {
        call_window(self.lease, self.provider_timeout * 2, self.settle_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(flags: &[&str]) -> ServeConfig {
        let mut args = vec!["--database-url", "postgres://x@127.0.0.1/db"];
        args.extend_from_slice(flags);
        crate::cli::serve_config(args).expect("valid flags")
    }

    #[test]
    fn a_lease_too_short_for_a_lookup_a_call_and_the_settlement_is_refused() {
        let err = check(&config(&["--relay-lease", "20s"])).unwrap_err();
        assert!(err.contains("--relay-lease"), "{err}");
        assert!(check(&config(&[])).is_ok(), "the defaults fit");
    }
}
