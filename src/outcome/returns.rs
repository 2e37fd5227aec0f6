//! Return lookups on the one leased queue: a transfer that succeeded is
//! asked about again (`GET /payouts/{id}`) `--return-lookups` times over
//! `--return-window`, so that a `returned` the provider announced while
//! every one of its notifications was lost (an outage longer than the
//! provider's retries) still reaches the transfer. What the provider says
//! other than `succeeded` goes through the status machine like any other
//! report: a return is applied, a contradiction kept as an anomaly.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use uuid::Uuid;

use crate::domain::ProviderText;
use crate::provider::{Provider, ProviderError, ProviderOutcome};
use crate::queue::worker::{BacklogGauges, Holding, QueueName, Work};
use crate::queue::RetryPolicy;
use crate::store::returns::{ReturnStore, WatchOutcome, WatchRow, RETURNS_CHANNEL};
use crate::store::status::FollowUp;
use crate::store::StoreError;

/// Claims of one watch before it is parked for operators, whatever its
/// lookups found: a provider that cannot answer about a payout for this
/// long (about 200 tries at up to --provider-poll-interval-max apart) is
/// an operator's question, and the watch must end.
pub const WATCH_CLAIMS_MAX: i32 = 200;

/// Bounds of the return lookups.
#[derive(Debug, Clone, Copy)]
pub struct ReturnLimits {
    /// Lookups in flight at once.
    pub concurrency_max: usize,
    /// How long a claimed lookup is held.
    pub lease: Duration,
    /// Time between two lookups of the schedule.
    pub every: Duration,
    /// Backoff after a lookup with no usable answer.
    pub retry: RetryPolicy,
    /// What follows the changes the lookups report.
    pub follow: FollowUp,
}

/// The label values of `payrail_return_lookups_total`.
const LOOKUP_OUTCOMES: [&str; 3] = ["succeeded", "changed", "unknown"];

struct ReturnMetrics {
    /// In the order of [`LOOKUP_OUTCOMES`].
    lookups: [metrics::Counter; 3],
    anomalies: metrics::Counter,
}

/// Return lookups on the return watches' queue.
pub struct ReturnWork {
    store: ReturnStore,
    provider: Arc<dyn Provider>,
    limits: ReturnLimits,
    metrics: Arc<ReturnMetrics>,
    backlog: BacklogGauges,
}

impl ReturnWork {
    /// Looks up the transfers claimed from the return watches at `provider`.
    pub fn new(store: ReturnStore, provider: Arc<dyn Provider>, limits: ReturnLimits) -> Self {
        assert!(
            !limits.every.is_zero(),
            "lookups are spread over the window"
        );
        Self {
            store,
            provider,
            limits,
            metrics: Arc::new(ReturnMetrics {
                lookups: LOOKUP_OUTCOMES
                    .map(|o| metrics::counter!("payrail_return_lookups_total", "outcome" => o)),
                anomalies: metrics::counter!("payrail_transfer_anomalies_total", "source" => "return-lookup"),
            }),
            backlog: BacklogGauges::new(
                "payrail_return_watches",
                "payrail_return_watches_dead",
                "payrail_return_watches_oldest_due_age_seconds",
            ),
        }
    }
}

/// What one return lookup's answer means for its watch.
pub fn watch_outcome(
    row: &WatchRow,
    found: Result<Option<ProviderOutcome>, ProviderError>,
    every: Duration,
    retry: RetryPolicy,
) -> WatchOutcome {
    match found {
        Ok(Some(ProviderOutcome::Succeeded { .. })) if row.lookups_left > 1 => {
            WatchOutcome::Again {
                delay: every,
                lookups_left: row.lookups_left - 1,
                note: ProviderText::clean("still succeeded"),
            }
        }
        Ok(Some(ProviderOutcome::Succeeded { .. })) => WatchOutcome::Done,
        Ok(Some(outcome)) => WatchOutcome::Report(outcome.report()),
        // A payout that succeeded is unknown to its provider now, or no
        // usable answer: the same lookup again later, never a conclusion.
        found => {
            let (note, retry_after) = match found {
                Ok(None) => ("the provider does not know this payout".to_owned(), None),
                Err(ProviderError::Transient {
                    reason,
                    retry_after,
                    ..
                }) => (reason, retry_after),
                Err(e) => (e.to_string(), None),
                Ok(Some(_)) => unreachable!("matched above"),
            };
            let note = ProviderText::clean(&note);
            if row.claims >= WATCH_CLAIMS_MAX {
                return WatchOutcome::Dead { note };
            }
            WatchOutcome::Again {
                delay: retry
                    .after_failure(row.claims, retry_after)
                    .expect("lookups have no budget to spend"),
                lookups_left: row.lookups_left,
                note,
            }
        }
    }
}

impl Work for ReturnWork {
    type Row = WatchRow;
    type Key = Uuid;
    type Outcome = WatchOutcome;
    type Group = ();

    const QUEUE: QueueName = QueueName::Returns;
    const CHANNEL: &'static str = RETURNS_CHANNEL;
    // Rows fall due by time: the fallback poll and the timers of rows
    // rescheduled here find them.
    const CLAIM_AFTER_SETTLING: bool = false;

    fn claim_of(row: &WatchRow) -> (Uuid, i32) {
        (row.transfer_id, row.attempt)
    }

    fn group_of(_row: &WatchRow) {}

    fn claim(
        &self,
        limit: usize,
        _holding: Holding<()>,
    ) -> BoxFuture<'static, Result<Vec<WatchRow>, StoreError>> {
        let store = self.store.clone();
        let lease = self.limits.lease;
        async move { store.claim(limit as i64, lease).await }.boxed()
    }

    fn work(&self, row: WatchRow) -> BoxFuture<'static, WatchOutcome> {
        let provider = self.provider.clone();
        let (every, retry) = (self.limits.every, self.limits.retry);
        let m = self.metrics.clone();
        async move {
            let found = provider.lookup(row.transfer_id).await;
            let outcome = watch_outcome(&row, found, every, retry);
            let i = match &outcome {
                WatchOutcome::Done => 0,
                WatchOutcome::Again { lookups_left, .. } if *lookups_left < row.lookups_left => 0,
                WatchOutcome::Report(_) => 1,
                WatchOutcome::Again { .. } | WatchOutcome::Dead { .. } => 2,
            };
            m.lookups[i].increment(1);
            if let WatchOutcome::Report(report) = &outcome {
                tracing::info!(transfer_id = %row.transfer_id, reported = report.reported(), "a succeeded transfer's lookup found a change");
            }
            outcome
        }
        .boxed()
    }

    fn settle(
        &self,
        batch: Arc<[(WatchRow, WatchOutcome)]>,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let store = self.store.clone();
        let m = self.metrics.clone();
        let follow = self.limits.follow;
        async move {
            let applied = store.settle(&batch, follow).await?;
            m.anomalies.increment(applied.anomalies as u64);
            Ok(())
        }
        .boxed()
    }

    fn settle_failed(&self, row: &WatchRow, error: &StoreError) -> WatchOutcome {
        watch_outcome(
            row,
            Err(ProviderError::Transient {
                reason: format!("settlement failed: {error}"),
                retry_after: None,
                ambiguous: false,
            }),
            self.limits.every,
            self.limits.retry,
        )
    }

    fn release(&self, rows: Vec<WatchRow>) -> BoxFuture<'static, Result<(), StoreError>> {
        let store = self.store.clone();
        let claims: Vec<(Uuid, i32)> = rows.iter().map(|r| (r.transfer_id, r.attempt)).collect();
        async move { store.release(&claims).await.map(|_| ()) }.boxed()
    }

    fn due_again(outcome: &WatchOutcome) -> Option<Duration> {
        match outcome {
            WatchOutcome::Again { delay, .. } => Some(*delay),
            _ => None,
        }
    }

    fn report(&self) -> BoxFuture<'static, ()> {
        let store = self.store.clone();
        let gauges = self.backlog.clone();
        async move {
            if let Ok(s) = store.stats().await {
                gauges.set(s.watched, s.dead, s.oldest_due_age_seconds);
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(lookups_left: i32, claims: i32) -> WatchRow {
        WatchRow {
            transfer_id: Uuid::nil(),
            attempt: claims,
            claims,
            lookups_left,
            succeeded_at: chrono::Utc::now(),
        }
    }

    fn retry() -> RetryPolicy {
        RetryPolicy::exponential(Duration::from_secs(60), Duration::from_secs(3600), i32::MAX)
    }

    #[test]
    fn a_watch_looks_up_its_lookups_then_ends_and_a_return_is_reported() {
        let every = Duration::from_secs(86_400);
        let succeeded = || {
            Ok(Some(ProviderOutcome::Succeeded {
                reference: "r".into(),
            }))
        };
        match watch_outcome(&row(3, 1), succeeded(), every, retry()) {
            WatchOutcome::Again {
                delay,
                lookups_left,
                ..
            } => assert_eq!((delay, lookups_left), (every, 2)),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            watch_outcome(&row(1, 3), succeeded(), every, retry()),
            WatchOutcome::Done
        );
        let returned = Ok(Some(ProviderOutcome::Returned {
            reference: Some("r".into()),
            reason: "account_closed".into(),
        }));
        assert!(matches!(
            watch_outcome(&row(2, 2), returned, every, retry()),
            WatchOutcome::Report(r) if r.reported() == "returned"
        ));
    }

    #[test]
    fn no_usable_answer_keeps_the_lookup_and_is_bounded() {
        let every = Duration::from_secs(86_400);
        let unknown = || {
            Err(ProviderError::Transient {
                reason: "503".into(),
                retry_after: None,
                ambiguous: false,
            })
        };
        match watch_outcome(&row(2, 5), unknown(), every, retry()) {
            WatchOutcome::Again {
                lookups_left,
                delay,
                ..
            } => {
                assert_eq!(
                    lookups_left, 2,
                    "a failed lookup is not one of the schedule"
                );
                assert!(delay <= Duration::from_secs(3600));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            watch_outcome(&row(2, WATCH_CLAIMS_MAX), unknown(), every, retry()),
            WatchOutcome::Dead { .. }
        ));
        assert!(matches!(
            watch_outcome(&row(2, 5), Ok(None), every, retry()),
            WatchOutcome::Again {
                lookups_left: 2,
                ..
            }
        ));
    }
}
