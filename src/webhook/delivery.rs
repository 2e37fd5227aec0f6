//! The delivery worker: claims due deliveries (SKIP LOCKED plus a lease, so
//! several processes never send one at once), keeps up to
//! `concurrency_max` attempts in flight, and settles the attempts that
//! finished together in one transaction. One slow receiver holds one slot
//! until its timeout, never the others.

use std::time::{Duration, Instant};

use actix::{Actor, Addr, Arbiter};
use futures::future::BoxFuture;
use futures::FutureExt;
use uuid::Uuid;

use super::sender::{Attempt, Sender};
use super::WebhookLimits;
use crate::domain::webhook::event_id_text;
use crate::queue::window::call_window;
use crate::queue::worker::{BacklogGauges, Holding, QueueName, Work, Worker, WorkerLimits};
use crate::queue::RetryPolicy;
use crate::store::webhooks::{bounded_error, ClaimedDelivery, DeliverySettlement, WEBHOOK_CHANNEL};
use crate::store::{DeliveryStore, Listener, StoreError};

/// What is recorded for an attempt.
pub fn settlement_of(
    claim: &ClaimedDelivery,
    attempt: &Attempt,
    retry: RetryPolicy,
) -> DeliverySettlement {
    let (status, retry_after, error) = match attempt {
        Attempt::Answered { status, .. } if (200..300).contains(status) => {
            return DeliverySettlement::Delivered { status: *status }
        }
        Attempt::Answered { status: 410, .. } => return DeliverySettlement::Gone,
        Attempt::Answered {
            status,
            retry_after,
            excerpt,
        } => (
            Some(*status),
            *retry_after,
            bounded_error(&format!("HTTP {status}: {excerpt}")),
        ),
        Attempt::NoAnswer(reason) => (None, None, bounded_error(reason)),
    };
    match retry.after_failure(claim.schedule_attempt, retry_after) {
        Some(delay) => DeliverySettlement::Retry {
            delay,
            status,
            error,
        },
        None => DeliverySettlement::Dead { status, error },
    }
}

/// The label values of `payrail_webhook_deliveries_total`.
const OUTCOMES: [&str; 4] = ["delivered", "retry", "dead", "gone"];

/// The index of a settlement's label in [`OUTCOMES`].
fn outcome_index(s: &DeliverySettlement) -> usize {
    match s {
        DeliverySettlement::Delivered { .. } => 0,
        DeliverySettlement::Retry { .. } => 1,
        DeliverySettlement::Dead { .. } => 2,
        DeliverySettlement::Gone => 3,
    }
}

/// The delivery worker's metrics, registered once, one handle per label.
struct DeliveryMetrics {
    seconds: metrics::Histogram,
    /// In the order of [`OUTCOMES`].
    outcomes: [metrics::Counter; 4],
}

impl DeliveryMetrics {
    fn new() -> Self {
        Self {
            seconds: metrics::histogram!("payrail_webhook_delivery_seconds"),
            outcomes: OUTCOMES
                .map(|o| metrics::counter!("payrail_webhook_deliveries_total", "outcome" => o)),
        }
    }
}

/// One attempt, timed and counted.
async fn attempt(
    sender: &Sender,
    claim: &ClaimedDelivery,
    retry: RetryPolicy,
    m: &DeliveryMetrics,
) -> DeliverySettlement {
    let Some(url) = &claim.url else {
        // Deleted or disabled since the delivery was written.
        return DeliverySettlement::Dead {
            status: None,
            error: "endpoint deleted or disabled".into(),
        };
    };
    let started = Instant::now();
    let answer = sender
        .send(
            url,
            &event_id_text(claim.event_id),
            &claim.body,
            &claim.secrets,
        )
        .await;
    let settlement = settlement_of(claim, &answer, retry);
    m.seconds.record(started.elapsed().as_secs_f64());
    m.outcomes[outcome_index(&settlement)].increment(1);
    settlement
}

/// Webhook deliveries on the one queue: each claimed delivery is one
/// signed attempt; what it answered is recorded.
pub struct DeliveryWork {
    /// The deliveries' statements only.
    store: DeliveryStore,
    metrics: std::sync::Arc<DeliveryMetrics>,
    sender: Sender,
    limits: WebhookLimits,
    backlog: BacklogGauges,
}

impl Work for DeliveryWork {
    type Row = ClaimedDelivery;
    type Key = (Uuid, Uuid);
    type Outcome = DeliverySettlement;
    type Group = ();

    const QUEUE: QueueName = QueueName::Webhooks;
    const CHANNEL: &'static str = WEBHOOK_CHANNEL;
    // A fair claim comes back short while one endpoint's deliveries wait
    // for their share: free slots are claimed for as soon as any settle.
    const CLAIM_AFTER_SETTLING: bool = true;

    fn claim_of(row: &ClaimedDelivery) -> ((Uuid, Uuid), i32) {
        ((row.event_id, row.endpoint_id), row.attempt)
    }

    fn group_of(_row: &ClaimedDelivery) {}

    fn claim(
        &self,
        limit: usize,
        _holding: Holding<()>,
    ) -> BoxFuture<'static, Result<Vec<ClaimedDelivery>, StoreError>> {
        let store = self.store.clone();
        let l = self.limits.clone();
        async move {
            store
                .claim(
                    limit as i64,
                    l.lease,
                    l.endpoint_in_flight_max,
                    l.client_in_flight_max,
                )
                .await
        }
        .boxed()
    }

    fn work(&self, row: ClaimedDelivery) -> BoxFuture<'static, DeliverySettlement> {
        let sender = self.sender.clone();
        let retry = self.limits.retry;
        let m = self.metrics.clone();
        async move { attempt(&sender, &row, retry, &m).await }.boxed()
    }

    fn settle(
        &self,
        batch: std::sync::Arc<[(ClaimedDelivery, DeliverySettlement)]>,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let store = self.store.clone();
        async move { store.settle(&batch).await }.boxed()
    }

    fn settle_failed(&self, row: &ClaimedDelivery, error: &StoreError) -> DeliverySettlement {
        let error = bounded_error(&format!("settlement failed: {error}"));
        match self.limits.retry.after_failure(row.schedule_attempt, None) {
            Some(delay) => DeliverySettlement::Retry {
                delay,
                status: None,
                error,
            },
            None => DeliverySettlement::Dead {
                status: None,
                error,
            },
        }
    }

    fn release(&self, rows: Vec<ClaimedDelivery>) -> BoxFuture<'static, Result<(), StoreError>> {
        let store = self.store.clone();
        let claims: Vec<(Uuid, Uuid, i32)> = rows
            .iter()
            .map(|r| (r.event_id, r.endpoint_id, r.attempt))
            .collect();
        async move { store.release(&claims).await.map(|_| ()) }.boxed()
    }

    fn due_again(outcome: &DeliverySettlement) -> Option<Duration> {
        match outcome {
            DeliverySettlement::Retry { delay, .. } => Some(*delay),
            _ => None,
        }
    }

    fn report(&self) -> BoxFuture<'static, ()> {
        let store = self.store.clone();
        let gauges = self.backlog.clone();
        async move {
            if let Ok(s) = store.stats().await {
                gauges.set(s.backlog, s.dead, s.oldest_due_age_seconds);
            }
        }
        .boxed()
    }
}

/// Starts the delivery worker on `arbiter`, with the deliveries' handle and
/// a listener for their channel; `settle_timeout` is `--db-timeout`.
pub fn start(
    arbiter: &Arbiter,
    (deliveries, listener): (DeliveryStore, Listener),
    sender: Sender,
    limits: WebhookLimits,
    settle_timeout: Duration,
) -> Addr<Worker<DeliveryWork>> {
    let call_window = call_window(limits.lease, limits.attempt_timeout, settle_timeout)
        .expect("the configuration was validated");
    let worker_limits = WorkerLimits {
        concurrency_max: limits.concurrency_max,
        poll_interval: limits.poll_interval,
        call_window,
        settle_batch_max: limits.concurrency_max,
    };
    Worker::start_in_arbiter(&arbiter.handle(), move |_| {
        let work = DeliveryWork {
            store: deliveries,
            metrics: std::sync::Arc::new(DeliveryMetrics::new()),
            sender,
            limits,
            backlog: BacklogGauges::new(
                "payrail_webhook_backlog",
                "payrail_webhook_dead",
                "payrail_webhook_oldest_due_age_seconds",
            ),
        };
        Worker::new(work, listener, worker_limits, None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn claim(schedule_attempt: i32) -> ClaimedDelivery {
        ClaimedDelivery {
            event_id: Uuid::now_v7(),
            endpoint_id: Uuid::now_v7(),
            attempt: schedule_attempt,
            schedule_attempt,
            body: "{}".into(),
            url: None,
            secrets: Vec::new(),
        }
    }

    fn answered(status: u16) -> Attempt {
        Attempt::Answered {
            status,
            retry_after: None,
            excerpt: "nope".into(),
        }
    }

    #[test]
    fn answers_map_to_settlements() {
        let s = RetryPolicy::schedule(1.0);
        assert_eq!(
            settlement_of(&claim(1), &answered(204), s),
            DeliverySettlement::Delivered { status: 204 }
        );
        assert_eq!(
            settlement_of(&claim(1), &answered(410), s),
            DeliverySettlement::Gone
        );
        assert!(matches!(
            settlement_of(&claim(1), &answered(500), s),
            DeliverySettlement::Retry { status: Some(500), ref error, .. } if error == "HTTP 500: nope"
        ));
        assert!(matches!(
            settlement_of(&claim(1), &Attempt::NoAnswer("timeout".into()), s),
            DeliverySettlement::Retry { status: None, .. }
        ));
        // A redirect is not a delivery.
        assert!(matches!(
            settlement_of(&claim(1), &answered(301), s),
            DeliverySettlement::Retry { .. }
        ));
        assert!(matches!(
            settlement_of(&claim(8), &answered(500), s),
            DeliverySettlement::Dead {
                status: Some(500),
                ..
            }
        ));
    }
}
