//! The outbox relay: takes due outbox rows and has the provider execute
//! each transfer under its id, until the transfer is final. Outcomes are
//! settled in batches (one transaction for many rows).

mod actor;
mod backoff;
mod handoff;
mod nudge;

pub use actor::{Deliver, Relay, Wake};
pub use backoff::retry_delay;
pub use handoff::{Handoff, HandoffCount};
pub use nudge::RelayNudge;

use std::time::Duration;

/// Bounds of the relay, from `RelayConfig`.
#[derive(Debug, Clone, Copy)]
pub struct RelayLimits {
    /// Provider calls in flight at once.
    pub concurrency_max: usize,
    /// Fallback poll interval.
    pub poll_interval: Duration,
    /// How long a claim holds a row.
    pub lease: Duration,
    /// Claims per retry budget before a row is dead-lettered.
    pub max_attempts: i32,
    /// First backoff.
    pub retry_base: Duration,
    /// Longest backoff.
    pub retry_cap: Duration,
    /// Bound on one provider call.
    pub provider_timeout: Duration,
    /// Bound on one settlement transaction.
    pub settle_timeout: Duration,
    /// Most outcomes settled in one transaction.
    pub settle_batch_max: usize,
}

impl RelayLimits {
    /// How long after a claim a call may still start: the call and its
    /// settlement must end before the lease does, so that no other process
    /// takes the row over while it is in flight.
    pub fn call_window(&self) -> Duration {
        let window = self
            .lease
            .saturating_sub(self.provider_timeout + self.settle_timeout);
        assert!(
            !window.is_zero(),
            "the lease outlasts a call and its settlement"
        );
        window
    }
}
