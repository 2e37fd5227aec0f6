//! The outbox relay: takes due outbox rows and has the provider execute
//! each transfer under its id, until the transfer is final.

mod actor;
mod backoff;

pub use actor::{Relay, Wake};
pub use backoff::retry_delay;

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
    /// Claims before a row is dead-lettered.
    pub attempts_max: i32,
    /// First backoff.
    pub retry_base: Duration,
    /// Longest backoff.
    pub retry_cap: Duration,
}
