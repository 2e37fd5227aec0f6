//! The outbox relay: takes due outbox rows and has the provider execute
//! each transfer under its id, until the transfer is final. Outcomes are
//! settled in batches (one transaction for many rows).

mod actor;
mod handoff;
mod nudge;

pub use actor::{Deliver, Drain, Relay, Wake};
pub use handoff::{Handoff, HandoffCount};
pub use nudge::RelayNudge;

use std::time::Duration;

use crate::config::ServeConfig;
use crate::queue::RetryPolicy;

/// A whole settlement batch is tried this often when Postgres fails as a
/// whole (right after a restart the pool may hand out a dead connection)
/// before the rows are left to their leases.
pub const SETTLE_TRIES_MAX: u32 = 3;
/// Pause between those tries.
pub const SETTLE_RETRY_DELAY: Duration = Duration::from_millis(200);

/// Bounds of the relay, from `RelayConfig`.
#[derive(Debug, Clone, Copy)]
pub struct RelayLimits {
    /// Provider calls in flight at once.
    pub concurrency_max: usize,
    /// Fallback poll interval.
    pub poll_interval: Duration,
    /// How long a claim holds a row.
    pub lease: Duration,
    /// Backoff and retry budget (`--retry-base`, `--retry-cap`,
    /// `--max-attempts`).
    pub retry: RetryPolicy,
    /// Bound on one provider call.
    pub provider_timeout: Duration,
    /// Bound on one settlement transaction.
    pub settle_timeout: Duration,
    /// Most outcomes settled in one transaction.
    pub settle_batch_max: usize,
}

impl From<&ServeConfig> for RelayLimits {
    fn from(config: &ServeConfig) -> Self {
        let r = &config.relay;
        Self {
            concurrency_max: r.relay_concurrency,
            poll_interval: r.relay_poll,
            lease: r.relay_lease,
            retry: RetryPolicy::exponential(r.retry_base, r.retry_cap, r.max_attempts),
            provider_timeout: r.provider_timeout,
            settle_timeout: config.database.db_timeout,
            settle_batch_max: r.relay_settle_batch,
        }
    }
}

impl RelayLimits {
    /// The longest a claimed row can keep this process busy once its call
    /// starts: a lookup and a `POST`, each bounded by the provider timeout,
    /// then every try of the settlement with the pauses between them.
    pub fn call_bound(&self) -> Duration {
        self.provider_timeout * 2
            + self.settle_timeout * SETTLE_TRIES_MAX
            + SETTLE_RETRY_DELAY * (SETTLE_TRIES_MAX - 1)
    }

    /// How long after a claim a call may still start: all of
    /// [`Self::call_bound`] must end before the lease does, so that no other
    /// process takes the row over while it is in flight; `None` when the
    /// lease is too short for that.
    pub fn call_window(&self) -> Option<Duration> {
        Some(self.lease.saturating_sub(self.call_bound())).filter(|w| !w.is_zero())
    }
}
