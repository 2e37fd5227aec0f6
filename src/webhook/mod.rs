//! Webhooks: every final transfer status is pushed to the client's
//! endpoints, signed (Standard Webhooks 1.0), retried on a schedule, and
//! visible in `GET /events`. Events are written by the status machine
//! (`store::status`) with the change they announce; this module sends them, and holds `payrail
//! webhook-sink`, a receiver for tests and `payrail dev`.

pub mod delivery;
pub mod sender;
pub mod sink;

use std::time::Duration;

use actix::Arbiter;

use crate::config::ServeConfig;
use crate::domain::webhook::AddressPolicy;
use crate::queue::RetryPolicy;
use crate::started::{DrainOrder, Started};
use crate::store::{DeliveryStore, Listener};

/// Where webhook URLs may point, from `--webhook-allow-private`.
pub fn address_policy(config: &ServeConfig) -> AddressPolicy {
    if config.webhooks.webhook_allow_private {
        AddressPolicy::AllowPrivate
    } else {
        AddressPolicy::PublicOnly
    }
}

/// Starts the webhook delivery worker on a thread of its own: `limits`,
/// the deliveries' handle and a listener, URLs checked against `policy`,
/// at most `response_bytes_max` of an answer read, each settlement try
/// bounded by `settle_timeout` (`--db-timeout`).
pub fn start(
    limits: WebhookLimits,
    policy: AddressPolicy,
    response_bytes_max: usize,
    settle_timeout: Duration,
    handles: (DeliveryStore, Listener),
) -> anyhow::Result<Started> {
    let sender = sender::Sender::new(limits.attempt_timeout, policy, response_bytes_max)?;
    let arbiter = Arbiter::new();
    let addr = delivery::start(&arbiter, handles, sender, limits, settle_timeout);
    Ok(Started::draining(
        "webhook deliveries",
        arbiter,
        DrainOrder::After,
        addr.recipient(),
    ))
}

/// Bounds of the delivery worker.
#[derive(Debug, Clone)]
pub struct WebhookLimits {
    /// Attempts in flight at once per process.
    pub concurrency_max: usize,
    /// How long a claimed delivery is held; longer than an attempt plus its settlement.
    pub lease: Duration,
    /// Bound on one attempt (`--webhook-timeout`).
    pub attempt_timeout: Duration,
    /// Fallback poll when no notification arrives.
    pub poll_interval: Duration,
    /// The schedule (scaled by `--webhook-retry-scale`; 1 in production).
    pub retry: RetryPolicy,
    /// Attempts in flight to one endpoint at once, over every process.
    pub endpoint_in_flight_max: i64,
    /// Attempts in flight to one client's endpoints at once, over every process.
    pub client_in_flight_max: i64,
}

impl From<&ServeConfig> for WebhookLimits {
    fn from(config: &ServeConfig) -> Self {
        let w = &config.webhooks;
        Self {
            concurrency_max: w.webhook_concurrency,
            lease: w.webhook_lease,
            attempt_timeout: w.webhook_timeout,
            poll_interval: w.webhook_poll,
            retry: RetryPolicy::schedule(w.webhook_retry_scale),
            endpoint_in_flight_max: w.webhook_endpoint_in_flight_max,
            client_in_flight_max: w.webhook_client_in_flight_max,
        }
    }
}
