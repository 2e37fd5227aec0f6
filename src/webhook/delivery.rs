//! The delivery worker: claims due deliveries (SKIP LOCKED plus a lease, so
//! several processes never send one at once), keeps up to
//! `concurrency_max` attempts in flight, and settles the attempts that
//! finished together in one transaction. One slow receiver holds one slot
//! until its timeout, never the others.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::task::JoinSet;

use super::sender::{Attempt, Sender};
use super::WebhookLimits;
use crate::domain::webhook::event_id_text;
use crate::queue::RetryPolicy;
use crate::store::webhooks::{bounded_error, ClaimedDelivery, DeliverySettlement, WEBHOOK_CHANNEL};
use crate::store::Store;

/// How often backlog figures are read for `/metrics`.
const STATS_INTERVAL: Duration = Duration::from_secs(5);

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

fn outcome_label(s: &DeliverySettlement) -> &'static str {
    match s {
        DeliverySettlement::Delivered { .. } => "delivered",
        DeliverySettlement::Retry { .. } => "retry",
        DeliverySettlement::Dead { .. } => "dead",
        DeliverySettlement::Gone => "gone",
    }
}

/// Runs the worker for as long as the future is polled.
pub async fn run(store: Store, sender: Sender, limits: WebhookLimits) {
    assert!(limits.concurrency_max > 0, "at least one attempt at a time");
    let retry = limits.retry;
    let wake = Arc::new(Notify::new());
    let heard = wake.clone();
    let listener = tokio::spawn(
        store
            .clone()
            .listen_forever(WEBHOOK_CHANNEL, None, move |_| heard.notify_one()),
    );
    let _stop_listener = AbortOnDrop(listener);

    let mut in_flight: JoinSet<(ClaimedDelivery, DeliverySettlement)> = JoinSet::new();
    let mut poll = tokio::time::interval(limits.poll_interval);
    let mut stats = tokio::time::interval(STATS_INTERVAL);
    let mut more_due = true;
    loop {
        let room = limits.concurrency_max - in_flight.len();
        if more_due && room > 0 {
            more_due = false;
            match store
                .claim_deliveries(
                    room as i64,
                    limits.lease,
                    limits.endpoint_in_flight_max,
                    limits.client_in_flight_max,
                )
                .await
            {
                Ok(claimed) => {
                    // A full claim means more are probably due.
                    more_due = claimed.len() == room;
                    for claim in claimed {
                        let sender = sender.clone();
                        in_flight.spawn(async move {
                            let settlement = attempt(&sender, &claim, retry).await;
                            (claim, settlement)
                        });
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "webhook claim failed; retrying on the next wake")
                }
            }
        }
        tokio::select! {
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                let mut batch = Vec::new();
                batch.extend(done.ok());
                while let Some(done) = in_flight.try_join_next() {
                    batch.extend(done.ok());
                }
                if !batch.is_empty() {
                    settle(&store, &batch).await;
                }
                more_due = true;
            }
            _ = wake.notified() => more_due = true,
            _ = poll.tick() => more_due = true,
            _ = stats.tick() => report_stats(&store).await,
        }
    }
}

/// One attempt, timed and counted.
async fn attempt(
    sender: &Sender,
    claim: &ClaimedDelivery,
    retry: RetryPolicy,
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
    metrics::histogram!("payrail_webhook_delivery_seconds").record(started.elapsed().as_secs_f64());
    metrics::counter!("payrail_webhook_deliveries_total", "outcome" => outcome_label(&settlement))
        .increment(1);
    settlement
}

/// Records a batch; on failure the leases run out and the deliveries are
/// sent again (receivers deduplicate on `webhook-id`).
async fn settle(store: &Store, batch: &[(ClaimedDelivery, DeliverySettlement)]) {
    metrics::histogram!("payrail_webhook_settle_batch_size").record(batch.len() as f64);
    if let Err(e) = store.settle_deliveries(batch).await {
        tracing::warn!(batch = batch.len(), error = %e, "settling webhook deliveries failed; the leases will expire");
    }
}

async fn report_stats(store: &Store) {
    if let Ok(s) = store.webhook_stats().await {
        metrics::gauge!("payrail_webhook_backlog").set(s.backlog as f64);
        metrics::gauge!("payrail_webhook_dead").set(s.dead as f64);
        metrics::gauge!("payrail_webhook_oldest_due_age_seconds").set(s.oldest_due_age_secs);
    }
}

/// Stops the listener task with the worker.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
