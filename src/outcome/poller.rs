//! The poller's work on the one queue: for each transfer `processing` past
//! `--provider-poll-after`, ask the provider (`GET /payouts/{id}`) and
//! apply what it says; ask again later, with capped backoff, while it is
//! still `processing` or cannot tell. It is the fallback for notifications
//! that never came.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use uuid::Uuid;

use crate::domain::ProviderText;
use crate::provider::{Provider, ProviderOutcome};
use crate::queue::worker::{BacklogGauges, Holding, QueueName, Work};
use crate::queue::RetryPolicy;
use crate::store::polls::{PollOutcome, PollRow, PollStore, POLLS_CHANNEL};
use crate::store::StoreError;

/// Bounds of the poller.
#[derive(Debug, Clone, Copy)]
pub struct PollLimits {
    /// Lookups in flight at once.
    pub concurrency_max: usize,
    /// How long a claimed lookup is held.
    pub lease: Duration,
    /// Backoff between lookups of one transfer.
    pub retry: RetryPolicy,
    /// Past this, a `processing` transfer is stuck.
    pub processing_max: Duration,
    /// What follows the changes the lookups report (a `succeeded` is
    /// watched for a return).
    pub follow: crate::store::status::FollowUp,
}

/// The label values of `payrail_provider_polls_total`.
const POLL_OUTCOMES: [&str; 4] = ["outcome", "processing", "not_found", "unknown"];

struct PollMetrics {
    /// In the order of [`POLL_OUTCOMES`].
    polls: [metrics::Counter; 4],
    anomalies: metrics::Counter,
    creation_to_final: metrics::Histogram,
}

/// Status lookups on the poll queue.
pub struct PollWork {
    store: PollStore,
    provider: Arc<dyn Provider>,
    limits: PollLimits,
    metrics: Arc<PollMetrics>,
    backlog: BacklogGauges,
}

impl PollWork {
    /// Looks up the transfers claimed from the poll queue at `provider`.
    pub fn new(store: PollStore, provider: Arc<dyn Provider>, limits: PollLimits) -> Self {
        Self {
            store,
            provider,
            limits,
            metrics: Arc::new(PollMetrics {
                polls: POLL_OUTCOMES
                    .map(|o| metrics::counter!("payrail_provider_polls_total", "outcome" => o)),
                anomalies: metrics::counter!("payrail_transfer_anomalies_total", "source" => "poll"),
                creation_to_final: metrics::histogram!(
                    "payrail_transfer_creation_to_final_seconds"
                ),
            }),
            backlog: BacklogGauges::new(
                "payrail_transfers_processing",
                "payrail_transfers_stuck",
                "payrail_transfers_processing_oldest_age_seconds",
            ),
        }
    }
}

/// What one lookup's answer means for its row.
pub fn poll_outcome(
    row: &PollRow,
    found: Result<Option<ProviderOutcome>, crate::provider::ProviderError>,
    retry: RetryPolicy,
) -> PollOutcome {
    let again =
        |status: &'static str, note: String, retry_after: Option<Duration>| PollOutcome::Again {
            delay: retry
                .after_failure(row.polls, retry_after)
                .expect("lookups have no budget to spend"),
            status,
            note: ProviderText::clean(&note),
        };
    match found {
        Ok(Some(ProviderOutcome::Processing { .. })) => {
            again("processing", "still processing".into(), None)
        }
        Ok(Some(outcome)) => PollOutcome::Report(outcome.report()),
        // The provider accepted it and now does not know it: keep asking
        // (the transfer is flagged once it is stuck), never conclude.
        Ok(None) => again(
            "not_found",
            "the provider does not know this payout".into(),
            None,
        ),
        Err(e) => {
            let retry_after = match &e {
                crate::provider::ProviderError::Transient { retry_after, .. } => *retry_after,
                _ => None,
            };
            again("unknown", e.to_string(), retry_after)
        }
    }
}

impl Work for PollWork {
    type Row = PollRow;
    type Key = Uuid;
    type Outcome = PollOutcome;
    type Group = ();

    const QUEUE: QueueName = QueueName::Polls;
    const CHANNEL: &'static str = POLLS_CHANNEL;
    // Rows fall due by time: the fallback poll and the timers of rows
    // rescheduled here find them.
    const CLAIM_AFTER_SETTLING: bool = false;

    fn claim_of(row: &PollRow) -> (Uuid, i32) {
        (row.transfer_id, row.attempt)
    }

    fn group_of(_row: &PollRow) {}

    fn claim(
        &self,
        limit: usize,
        _holding: Holding<()>,
    ) -> BoxFuture<'static, Result<Vec<PollRow>, StoreError>> {
        let store = self.store.clone();
        let lease = self.limits.lease;
        async move { store.claim(limit as i64, lease).await }.boxed()
    }

    fn work(&self, row: PollRow) -> BoxFuture<'static, PollOutcome> {
        let provider = self.provider.clone();
        let retry = self.limits.retry;
        let m = self.metrics.clone();
        async move {
            let found = provider.lookup(row.transfer_id).await;
            let outcome = poll_outcome(&row, found, retry);
            let i = match &outcome {
                PollOutcome::Report(_) => 0,
                PollOutcome::Again { status, .. } => {
                    POLL_OUTCOMES.iter().position(|o| o == status).unwrap_or(3)
                }
            };
            m.polls[i].increment(1);
            tracing::debug!(transfer_id = %row.transfer_id, polls = row.polls, ?outcome, "looked up a processing payout");
            outcome
        }
        .boxed()
    }

    fn settle(
        &self,
        batch: Arc<[(PollRow, PollOutcome)]>,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let store = self.store.clone();
        let m = self.metrics.clone();
        let follow = self.limits.follow;
        async move {
            let applied = store.settle(&batch, follow).await?;
            m.anomalies.increment(applied.anomalies as u64);
            for age in &applied.creation_to_final {
                m.creation_to_final.record(age.as_secs_f64());
            }
            Ok(())
        }
        .boxed()
    }

    fn settle_failed(&self, row: &PollRow, error: &StoreError) -> PollOutcome {
        poll_outcome(
            row,
            Err(crate::provider::ProviderError::Transient {
                reason: format!("settlement failed: {error}"),
                retry_after: None,
                ambiguous: false,
            }),
            self.limits.retry,
        )
    }

    fn release(&self, rows: Vec<PollRow>) -> BoxFuture<'static, Result<(), StoreError>> {
        let store = self.store.clone();
        let claims: Vec<(Uuid, i32)> = rows.iter().map(|r| (r.transfer_id, r.attempt)).collect();
        async move { store.release(&claims).await.map(|_| ()) }.boxed()
    }

    fn due_again(outcome: &PollOutcome) -> Option<Duration> {
        match outcome {
            PollOutcome::Again { delay, .. } => Some(*delay),
            PollOutcome::Report(_) => None,
        }
    }

    fn report(&self) -> BoxFuture<'static, ()> {
        let store = self.store.clone();
        let max = self.limits.processing_max;
        let gauges = self.backlog.clone();
        async move {
            if let Ok(s) = store.stats(max).await {
                gauges.set(s.processing, s.stuck, s.oldest_age_seconds);
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ProviderError;

    fn row(polls: i32) -> PollRow {
        PollRow {
            transfer_id: Uuid::nil(),
            attempt: polls,
            polls,
            processing_since: chrono::Utc::now(),
        }
    }

    #[test]
    fn only_an_outcome_ends_the_lookups() {
        let retry =
            RetryPolicy::exponential(Duration::from_secs(60), Duration::from_secs(3600), i32::MAX);
        let outcome = poll_outcome(
            &row(1),
            Ok(Some(ProviderOutcome::Succeeded {
                reference: "r".into(),
            })),
            retry,
        );
        assert!(matches!(outcome, PollOutcome::Report(ref r) if r.reported() == "succeeded"));
        for (found, status) in [
            (
                Ok(Some(ProviderOutcome::Processing { reference: None })),
                "processing",
            ),
            (Ok(None), "not_found"),
            (
                Err(ProviderError::Transient {
                    reason: "503".into(),
                    retry_after: None,
                    ambiguous: true,
                }),
                "unknown",
            ),
        ] {
            match poll_outcome(&row(40), found, retry) {
                PollOutcome::Again {
                    delay, status: s, ..
                } => {
                    assert_eq!(s, status);
                    assert!(delay <= Duration::from_secs(3600), "capped: {delay:?}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
