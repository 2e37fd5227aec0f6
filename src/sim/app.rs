//! What every worker of the sim shares.

use std::time::Duration;

use super::faults::Faults;
use super::notifier::Notifier;
use super::state::SimState;

/// Shared by every worker: the store, the fault source and the configured delay.
pub struct App {
    /// Records and counters.
    pub state: SimState,
    /// Seeded fault decisions.
    pub faults: Faults,
    /// `--latency-ms`, spent after the payout is decided and before answering.
    pub latency: Duration,
    /// The asynchronous mode: later outcomes and their notifications.
    pub later: Later,
}

/// The asynchronous mode's settings.
pub struct Later {
    /// Probability of answering `processing`.
    pub async_rate: f64,
    /// Delay before a decision, and before a return, in milliseconds.
    pub settle_after_ms: (u64, u64),
    /// Probability that a succeeded payout is returned later.
    pub return_rate: f64,
    /// Where notifications go, if anywhere.
    pub notifier: Option<Notifier>,
}
