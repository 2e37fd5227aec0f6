//! Webhooks: every final transfer status is pushed to the client's
//! endpoints, signed (Standard Webhooks 1.0), retried on a schedule, and
//! visible in `GET /events`. Events are written by the relay's settlement
//! (`store::webhooks`); this module sends them, and holds `payrail
//! webhook-sink`, a receiver for tests and `payrail dev`.

pub mod delivery;
pub mod schedule;
pub mod sender;
pub mod sink;

use std::time::Duration;

/// Bounds of the delivery worker.
#[derive(Debug, Clone)]
pub struct WebhookLimits {
    /// Attempts in flight at once per process.
    pub concurrency_max: usize,
    /// How long a claimed delivery is held; longer than an attempt plus its settlement.
    pub lease: Duration,
    /// Fallback poll when no notification arrives.
    pub poll_interval: Duration,
    /// Multiplies the retry schedule (1 in production).
    pub retry_scale: f64,
}
