//! Asynchronous payouts: the outcomes a provider reports after it accepted
//! a payout (`processing`). Two ways in, one status machine
//! (`store::status`): the provider's signed notifications, applied in
//! batches ([`notifications`]), and status lookups of transfers still
//! `processing` after `--provider-poll-after`, on the one leased queue
//! ([`poller`]), for the notifications that never came; and lookups of
//! transfers that succeeded, for a while, for the returns whose
//! notifications never came ([`returns`]).

pub mod notifications;
pub mod poller;
pub mod returns;

use std::sync::Arc;

use actix::{Actor, Arbiter};

use crate::config::{OutcomeConfig, ServeConfig};
use crate::provider::http::HttpProvider;
use crate::queue::window::call_window;
use crate::queue::worker::{Worker, WorkerLimits};
use crate::queue::RetryPolicy;
use crate::started::{DrainOrder, Started};
use crate::store::status::FollowUp;
use crate::store::Store;

/// What [`start`] started.
pub struct Outcomes {
    /// Verified notifications go here; `None` without a secret.
    pub intake: Option<notifications::Intake>,
    /// Their thread, the poller and the return lookups (drained first on
    /// shutdown; neither without a provider).
    pub parts: Vec<Started>,
}

/// How long a claimed lookup is held: a lookup and its settlement's tries
/// fit in it many times over.
const POLL_LEASE_MIN: std::time::Duration = std::time::Duration::from_secs(30);

/// What follows a status change, from the flags: a `processing` transfer
/// is looked up after `--provider-poll-after`; a `succeeded` one is
/// watched for a return `--return-lookups` times over `--return-window`
/// (never with a window of 0).
pub fn follow_up(o: &OutcomeConfig) -> FollowUp {
    if o.return_window.is_zero() {
        return FollowUp::polls_only(o.provider_poll_after);
    }
    assert!(o.return_lookups >= 1, "validated in config");
    FollowUp {
        poll_after: o.provider_poll_after,
        return_lookup_every: o.return_window / o.return_lookups as u32,
        return_lookups: o.return_lookups,
    }
}

/// Starts the notification intake (with `--provider-notification-secret`)
/// on a thread of its own, and with `--provider-url` the poller there too
/// and the return lookups on another.
pub fn start(config: &ServeConfig, store: &Store) -> anyhow::Result<Outcomes> {
    let o = &config.outcomes;
    let follow = follow_up(o);
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
                follow,
            },
        )
    });
    let Some(url) = &config.provider_url else {
        return Ok(Outcomes {
            intake,
            parts: vec![Started::thread("provider notifications", arbiter)],
        });
    };
    let timeout = config.relay.provider_timeout;
    let provider = Arc::new(HttpProvider::with_pool(
        url,
        timeout,
        o.provider_poll_concurrency,
    )?);
    let settle = crate::queue::window::settle_bound(config.database.db_timeout);
    let lease = POLL_LEASE_MIN.max((timeout + settle) * 2);
    let retry = RetryPolicy::exponential(
        o.provider_poll_after,
        o.provider_poll_interval_max,
        i32::MAX,
    );
    let worker_limits = WorkerLimits {
        concurrency_max: o.provider_poll_concurrency,
        poll_interval: o.provider_poll_scan_interval,
        call_window: call_window(lease, timeout, config.database.db_timeout)
            .expect("the lease is at least twice a lookup and its settlement"),
        settle_batch_max: o.provider_poll_settle_batch_max,
    };
    let limits = poller::PollLimits {
        concurrency_max: o.provider_poll_concurrency,
        lease,
        retry,
        processing_max: o.provider_processing_max,
        follow,
    };
    let poller = {
        let (store, provider) = (store.clone(), provider.clone());
        Worker::start_in_arbiter(&arbiter.handle(), move |_| {
            let work = poller::PollWork::new(store.polls(), provider, limits);
            Worker::new(work, store.listener(), worker_limits, None)
        })
    };
    let mut parts = vec![Started::draining(
        "status lookups",
        arbiter,
        DrainOrder::First,
        poller.recipient(),
    )];
    if follow.return_lookups > 0 {
        let limits = returns::ReturnLimits {
            concurrency_max: o.provider_poll_concurrency,
            lease,
            every: follow.return_lookup_every,
            retry,
            follow,
        };
        let arbiter = Arbiter::new();
        let store = store.clone();
        let watcher = Worker::start_in_arbiter(&arbiter.handle(), move |_| {
            let work = returns::ReturnWork::new(store.returns(), provider, limits);
            Worker::new(work, store.listener(), worker_limits, None)
        });
        parts.push(Started::draining(
            "return lookups",
            arbiter,
            DrainOrder::First,
            watcher.recipient(),
        ));
    }
    Ok(Outcomes { intake, parts })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    fn outcomes(flags: &[&str]) -> crate::config::OutcomeConfig {
        let mut args = vec!["--database-url", "postgres://x@127.0.0.1/db"];
        args.extend_from_slice(flags);
        crate::cli::serve_config(args)
            .expect("valid flags")
            .outcomes
    }

    #[test]
    fn a_return_window_spreads_its_lookups_and_none_is_off() {
        let follow = super::follow_up(&outcomes(&[
            "--return-window",
            "3s",
            "--return-lookups",
            "3",
        ]));
        assert_eq!(
            (follow.return_lookup_every, follow.return_lookups),
            (Duration::from_secs(1), 3)
        );
        let off = super::follow_up(&outcomes(&["--return-window", "0s"]));
        assert_eq!(off.return_lookups, 0);
        assert_eq!(off.poll_after, Duration::from_secs(60));
    }
}
