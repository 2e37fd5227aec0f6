//! Asynchronous payouts: the outcomes a provider reports after it accepted
//! a payout (`processing`). Two ways in, one status machine
//! (`store::status`): the provider's signed notifications, applied in
//! batches ([`notifications`]), and status lookups of transfers still
//! `processing` after `--provider-poll-after`, on the one leased queue
//! ([`poller`]), for the notifications that never came.

pub mod notifications;
pub mod poller;

use std::sync::Arc;

use actix::{Actor, Arbiter};

use crate::config::ServeConfig;
use crate::provider::http::HttpProvider;
use crate::queue::window::call_window;
use crate::queue::worker::{Worker, WorkerLimits};
use crate::queue::RetryPolicy;
use crate::started::{DrainOrder, Started};
use crate::store::Store;

/// What [`start`] started.
pub struct Outcomes {
    /// Verified notifications go here; `None` without a secret.
    pub intake: Option<notifications::Intake>,
    /// Their thread, and the poller (drained first on shutdown; none
    /// without a provider).
    pub part: Started,
}

/// How long a claimed lookup is held: a lookup and its settlement's tries
/// fit in it many times over.
const POLL_LEASE_MIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Starts the notification intake (with `--provider-notification-secret`)
/// and the poller (with `--provider-url`) on a thread of their own.
pub fn start(config: &ServeConfig, store: &Store) -> anyhow::Result<Outcomes> {
    let o = &config.outcomes;
    let arbiter = Arbiter::new();
    let intake = (!o.provider_notification_secret.is_empty()).then(|| {
        notifications::start(
            &arbiter,
            store.notifications(),
            notifications::Verifier::new(
                o.provider_notification_secret.clone(),
                o.provider_notification_tolerance,
            ),
            notifications::IntakeLimits {
                queue_max: o.provider_notification_queue_max,
                batch_max: o.provider_notification_batch_max,
                body_max: o.provider_notification_body_bytes_max,
                poll_after: o.provider_poll_after,
            },
        )
    });
    let poller = match &config.provider_url {
        None => None,
        Some(url) => {
            let timeout = config.relay.provider_timeout;
            let provider = Arc::new(HttpProvider::with_pool(
                url,
                timeout,
                o.provider_poll_concurrency,
            )?);
            let settle = crate::queue::window::settle_bound(config.database.db_timeout);
            let lease = POLL_LEASE_MIN.max((timeout + settle) * 2);
            let limits = poller::PollLimits {
                concurrency_max: o.provider_poll_concurrency,
                lease,
                retry: RetryPolicy::exponential(
                    o.provider_poll_after,
                    o.provider_poll_interval_max,
                    i32::MAX,
                ),
                processing_max: o.provider_processing_max,
            };
            let worker_limits = WorkerLimits {
                concurrency_max: limits.concurrency_max,
                poll_interval: o.provider_poll_scan_interval,
                call_window: call_window(lease, timeout, config.database.db_timeout)
                    .expect("the lease is at least twice a lookup and its settlement"),
                settle_batch_max: o.provider_poll_settle_batch_max,
            };
            let store = store.clone();
            Some(Worker::start_in_arbiter(&arbiter.handle(), move |_| {
                let work = poller::PollWork::new(store.polls(), provider, limits);
                Worker::new(work, store.listener(), worker_limits, None)
            }))
        }
    };
    let part = match poller {
        Some(poller) => Started::draining(
            "status lookups",
            arbiter,
            DrainOrder::First,
            poller.recipient(),
        ),
        None => Started::thread("provider notifications", arbiter),
    };
    Ok(Outcomes { intake, part })
}
