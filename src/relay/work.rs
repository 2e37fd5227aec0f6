//! The relay's work on the one queue: for each claimed outbox row, have the
//! provider execute the transfer under its id (looking an ambiguous one up
//! first), and record what became of it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use uuid::Uuid;

use super::RelayLimits;
use crate::domain::{ProviderReport, ProviderText};
use crate::provider::{Provider, ProviderError, ProviderOutcome};
use crate::queue::worker::{BacklogGauges, Holding, QueueName, Work};
use crate::queue::RetryPolicy;
use crate::store::outbox::{ClaimedRow, Settlement, OUTBOX_CHANNEL};
use crate::store::{OutboxStore, StoreError};

/// The relay's provider metrics, registered once, one handle per label.
struct ProviderMetrics {
    call_seconds: metrics::Histogram,
    /// From a transfer's creation to its final status.
    creation_to_final: metrics::Histogram,
    /// In the order of [`CALL_OUTCOMES`].
    calls: [metrics::Counter; 7],
    /// In the order of [`LOOKUP_OUTCOMES`].
    lookups: [metrics::Counter; 3],
    /// The provider's answers that contradicted a final status.
    anomalies: metrics::Counter,
}

/// The label values of `payrail_provider_calls_total`.
const CALL_OUTCOMES: [&str; 7] = [
    "processing",
    "returned",
    "succeeded",
    "declined",
    "transient",
    "permanent",
    "misconfigured",
];
/// The label values of `payrail_provider_lookups_total`.
const LOOKUP_OUTCOMES: [&str; 3] = ["found", "not_found", "unknown"];

impl ProviderMetrics {
    fn new() -> Self {
        Self {
            call_seconds: metrics::histogram!("payrail_provider_call_seconds"),
            creation_to_final: metrics::histogram!("payrail_transfer_creation_to_final_seconds"),
            calls: CALL_OUTCOMES
                .map(|o| metrics::counter!("payrail_provider_calls_total", "outcome" => o)),
            lookups: LOOKUP_OUTCOMES
                .map(|o| metrics::counter!("payrail_provider_lookups_total", "outcome" => o)),
            anomalies: metrics::counter!("payrail_transfer_anomalies_total", "source" => "relay"),
        }
    }

    fn call(&self, result: &Result<ProviderOutcome, ProviderError>) -> &metrics::Counter {
        let label = outcome_label(result);
        let i = CALL_OUTCOMES.iter().position(|o| *o == label);
        &self.calls[i.expect("every outcome has its label")]
    }
}

/// Provider calls on the outbox queue.
pub struct OutboxWork {
    /// The outbox's statements only.
    store: OutboxStore,
    provider: Arc<dyn Provider>,
    limits: RelayLimits,
    metrics: Arc<ProviderMetrics>,
    backlog: BacklogGauges,
}

impl OutboxWork {
    /// Calls `provider` for the rows claimed from the outbox.
    pub fn new(store: OutboxStore, provider: Arc<dyn Provider>, limits: RelayLimits) -> Self {
        Self {
            store,
            provider,
            limits,
            metrics: Arc::new(ProviderMetrics::new()),
            backlog: BacklogGauges::new(
                "payrail_outbox_backlog",
                "payrail_outbox_dead",
                "payrail_outbox_oldest_due_age_seconds",
            ),
        }
    }
}

impl Work for OutboxWork {
    type Row = ClaimedRow;
    type Key = Uuid;
    type Outcome = Settlement;
    type Group = Uuid;

    const QUEUE: QueueName = QueueName::Outbox;
    const CHANNEL: &'static str = OUTBOX_CHANNEL;
    // Rows come handed over from flushes or announced by NOTIFY; a claim
    // after every settlement would scan the rows held in flight.
    const CLAIM_AFTER_SETTLING: bool = false;

    fn claim_of(row: &ClaimedRow) -> (Uuid, i32) {
        (row.payout.transfer_id, row.attempt)
    }

    /// Rows are served fairly by client: one client's burst takes its
    /// turns, not everyone's.
    fn group_of(row: &ClaimedRow) -> Uuid {
        row.payout.account_owner
    }

    fn claim(
        &self,
        limit: usize,
        holding: Holding<Uuid>,
    ) -> BoxFuture<'static, Result<Vec<ClaimedRow>, StoreError>> {
        let store = self.store.clone();
        let lease = self.limits.lease;
        async move {
            store
                .claim(limit as i64, lease, holding.share as i64, &holding.held)
                .await
        }
        .boxed()
    }

    fn work(&self, row: ClaimedRow) -> BoxFuture<'static, Settlement> {
        let provider = self.provider.clone();
        let retry = self.limits.retry;
        let m = self.metrics.clone();
        async move {
            let result = match look_up_first(provider.as_ref(), &row, &m.lookups).await {
                Some(known) => known,
                None => {
                    let started = Instant::now();
                    let result = provider.execute(row.payout.clone()).await;
                    m.call_seconds.record(started.elapsed().as_secs_f64());
                    m.call(&result).increment(1);
                    tracing::debug!(transfer_id = %row.payout.transfer_id, attempt = row.attempt, ?result, "provider answered");
                    result
                }
            };
            let settlement = settlement(&row, result, retry);
            if let Settlement::Dead { error, .. } = &settlement {
                tracing::error!(transfer_id = %row.payout.transfer_id, attempts = row.budget_used, %error, "dead-lettered (parked)");
            }
            settlement
        }
        .boxed()
    }

    fn settle(
        &self,
        batch: Arc<[(ClaimedRow, Settlement)]>,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let store = self.store.clone();
        let m = self.metrics.clone();
        let follow = self.limits.follow;
        async move {
            let report = store.settle(&batch, follow).await?;
            m.anomalies.increment(report.anomalies as u64);
            for age in &report.creation_to_final {
                m.creation_to_final.record(age.as_secs_f64());
            }
            for ((row, _), held) in batch.iter().zip(&report.held) {
                if !held {
                    tracing::info!(transfer_id = %row.payout.transfer_id, "claim was taken over; left to the new holder");
                }
            }
            Ok(())
        }
        .boxed()
    }

    fn settle_failed(&self, row: &ClaimedRow, error: &StoreError) -> Settlement {
        settlement_failed(row, error, self.limits.retry)
    }

    fn release(&self, rows: Vec<ClaimedRow>) -> BoxFuture<'static, Result<(), StoreError>> {
        let store = self.store.clone();
        let claims: Vec<(Uuid, i32)> = rows
            .iter()
            .map(|r| (r.payout.transfer_id, r.attempt))
            .collect();
        async move { store.release(&claims).await.map(|_| ()) }.boxed()
    }

    fn due_again(outcome: &Settlement) -> Option<Duration> {
        match outcome {
            Settlement::Retry { delay, .. } => Some(*delay),
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

/// What is recorded for a row whose outcome Postgres refused to store. The
/// payout may have executed, so the row counts as ambiguous.
fn settlement_failed(row: &ClaimedRow, error: &StoreError, retry: RetryPolicy) -> Settlement {
    let error = ProviderText::clean(&format!("settlement failed: {error}"));
    match retry.after_failure(row.budget_used, None) {
        Some(delay) => Settlement::Retry {
            delay,
            error,
            ambiguous: true,
        },
        None => Settlement::Dead {
            error,
            ambiguous: true,
        },
    }
}

/// A row whose payout may have executed (an earlier call's outcome is
/// unknown, or its last holder vanished without recording one) is never
/// posted again blindly: a provider that forgets idempotency keys after a
/// while would pay twice, and one that refuses repeats would answer a
/// `4xx` that proves nothing. The provider's record decides: `Some` with
/// the outcome, or with why it cannot be asked now; `None` when the row is
/// not ambiguous or the provider says it never executed the payout, and a
/// `POST` is safe.
async fn look_up_first(
    provider: &dyn Provider,
    row: &ClaimedRow,
    counted: &[metrics::Counter; 3],
) -> Option<Result<ProviderOutcome, ProviderError>> {
    if !row.ambiguous {
        return None;
    }
    let found = provider.lookup(row.payout.transfer_id).await;
    // In the order of LOOKUP_OUTCOMES.
    let i = match &found {
        Ok(Some(_)) => 0,
        Ok(None) => 1,
        Err(_) => 2,
    };
    counted[i].increment(1);
    tracing::info!(transfer_id = %row.payout.transfer_id, ?found, "looked up an ambiguous payout before posting");
    match found {
        Ok(Some(outcome)) => Some(Ok(outcome)),
        Ok(None) => None,
        Err(e) => Some(Err(e)),
    }
}

/// What the outbox records for one call's result.
fn settlement(
    row: &ClaimedRow,
    result: Result<ProviderOutcome, ProviderError>,
    retry: RetryPolicy,
) -> Settlement {
    match result {
        // The provider's own word, whatever it is: applied by the status
        // machine, as a notification's is. A decline is final only because
        // an ambiguous row was looked up first: it is about the first
        // `POST` the provider acted on.
        Ok(outcome) => Settlement::Report(outcome.report()),
        Err(ProviderError::Permanent { reason }) => Settlement::Report(ProviderReport::Declined {
            reason: ProviderText::clean(&reason),
        }),
        // Not the provider speaking: parked for an operator, never final.
        // Taken for ambiguous, so that a retry asks the provider first.
        Err(ProviderError::Misconfigured { reason }) => Settlement::Dead {
            error: ProviderText::clean(&format!("parked: {reason}")),
            ambiguous: true,
        },
        Err(ProviderError::Transient {
            reason,
            retry_after,
            ambiguous,
        }) => {
            let error = ProviderText::clean(&reason);
            match retry.after_failure(row.budget_used, retry_after) {
                Some(delay) => Settlement::Retry {
                    delay,
                    error,
                    ambiguous,
                },
                None => Settlement::Dead { error, ambiguous },
            }
        }
    }
}

fn outcome_label(result: &Result<ProviderOutcome, ProviderError>) -> &'static str {
    match result {
        Ok(ProviderOutcome::Processing { .. }) => "processing",
        Ok(ProviderOutcome::Returned { .. }) => "returned",
        Ok(ProviderOutcome::Succeeded { .. }) => "succeeded",
        Ok(ProviderOutcome::Declined { .. }) => "declined",
        Err(ProviderError::Transient { .. }) => "transient",
        Err(ProviderError::Permanent { .. }) => "permanent",
        Err(ProviderError::Misconfigured { .. }) => "misconfigured",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Payout;

    fn row(budget_used: i32, ambiguous: bool) -> ClaimedRow {
        ClaimedRow {
            payout: Payout {
                transfer_id: uuid::Uuid::nil(),
                account_owner: uuid::Uuid::nil(),
                amount: 1,
                currency: "USD".into(),
                source_account: "a".into(),
                destination_account: "b".into(),
            },
            attempt: budget_used + 5,
            budget_used,
            ambiguous,
        }
    }

    fn limits() -> RelayLimits {
        RelayLimits {
            concurrency_max: 1,
            poll_interval: Duration::from_secs(1),
            lease: Duration::from_secs(30),
            retry: crate::queue::RetryPolicy::exponential(
                Duration::from_millis(100),
                Duration::from_secs(10),
                3,
            ),
            provider_timeout: Duration::from_secs(5),
            settle_timeout: Duration::from_secs(5),
            settle_batch_max: 64,
            follow: crate::store::status::FollowUp::polls_only(Duration::from_secs(60)),
        }
    }

    fn lookups() -> [metrics::Counter; 3] {
        [
            metrics::Counter::noop(),
            metrics::Counter::noop(),
            metrics::Counter::noop(),
        ]
    }

    fn failed(s: &Settlement) -> bool {
        matches!(s, Settlement::Report(ProviderReport::Declined { .. }))
    }

    #[test]
    fn outcomes_map_to_settlements() {
        let limits = limits();
        let ok = settlement(
            &row(1, false),
            Ok(ProviderOutcome::Succeeded {
                reference: "r\0ef".into(),
            }),
            limits.retry,
        );
        assert!(matches!(
            ok,
            Settlement::Report(ProviderReport::Succeeded {
                reference: Some(ref r),
            }) if r.as_str() == "ref"
        ));
        let declined = settlement(
            &row(1, false),
            Ok(ProviderOutcome::Declined {
                reason: "no".into(),
            }),
            limits.retry,
        );
        assert!(
            matches!(declined, Settlement::Report(ProviderReport::Declined { reason: r }) if r.as_str() == "no")
        );
        let permanent = Err(ProviderError::Permanent {
            reason: "HTTP 422: {\"error\":\"invalid_account\"}".into(),
        });
        assert!(failed(&settlement(&row(1, false), permanent, limits.retry)));
        let transient = ProviderError::Transient {
            reason: "503".into(),
            retry_after: Some(Duration::from_secs(2)),
            ambiguous: true,
        };
        match settlement(&row(2, false), Err(transient.clone()), limits.retry) {
            Settlement::Retry {
                delay, ambiguous, ..
            } => {
                assert!(delay >= Duration::from_secs(2));
                assert!(ambiguous);
            }
            other => panic!("{other:?}"),
        }
        // The budget, not the fencing token, decides the dead letter.
        assert!(matches!(
            settlement(&row(3, false), Err(transient), limits.retry),
            Settlement::Dead {
                ambiguous: true,
                ..
            }
        ));
    }

    #[test]
    fn an_answer_that_is_not_the_provider_parks_the_row_and_never_finalizes() {
        let misconfigured = || {
            Err(ProviderError::Misconfigured {
                reason: "HTTP 404: <html>not found</html>".into(),
            })
        };
        for r in [row(1, false), row(2, true)] {
            match settlement(&r, misconfigured(), limits().retry) {
                Settlement::Dead { error, ambiguous } => {
                    assert!(error.as_str().starts_with("parked: HTTP 404"), "{error:?}");
                    assert!(ambiguous, "a retry asks the provider first");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// A provider that only answers lookups, with `found`.
    struct Lookup(Result<Option<ProviderOutcome>, ProviderError>);

    impl Provider for Lookup {
        fn execute(
            &self,
            _: Payout,
        ) -> futures::future::BoxFuture<'static, Result<ProviderOutcome, ProviderError>> {
            unreachable!("only looked up")
        }
        fn lookup(
            &self,
            _: uuid::Uuid,
        ) -> futures::future::BoxFuture<'static, Result<Option<ProviderOutcome>, ProviderError>>
        {
            let found = self.0.clone();
            Box::pin(async move { found })
        }
    }

    #[actix_web::test]
    async fn an_ambiguous_row_is_looked_up_before_anything_is_posted() {
        let executed = Lookup(Ok(Some(ProviderOutcome::Succeeded {
            reference: "r".into(),
        })));
        // Nothing ambiguous: nobody is asked (the lookup would panic).
        struct Silent;
        impl Provider for Silent {
            fn execute(
                &self,
                _: Payout,
            ) -> futures::future::BoxFuture<'static, Result<ProviderOutcome, ProviderError>>
            {
                unreachable!()
            }
            fn lookup(
                &self,
                _: uuid::Uuid,
            ) -> futures::future::BoxFuture<'static, Result<Option<ProviderOutcome>, ProviderError>>
            {
                unreachable!("a row that is not ambiguous is posted without a lookup")
            }
        }
        assert_eq!(
            look_up_first(&Silent, &row(1, false), &lookups()).await,
            None
        );
        // The provider's record decides...
        assert_eq!(
            look_up_first(&executed, &row(2, true), &lookups()).await,
            Some(Ok(ProviderOutcome::Succeeded {
                reference: "r".into()
            }))
        );
        // ...its own "no such payout" lets the POST go out...
        assert_eq!(
            look_up_first(&Lookup(Ok(None)), &row(2, true), &lookups()).await,
            None
        );
        // ...and a lookup that cannot tell keeps the row waiting.
        let unknown = ProviderError::Transient {
            reason: "lookup: HTTP 404: <html>".into(),
            retry_after: None,
            ambiguous: true,
        };
        let r = look_up_first(&Lookup(Err(unknown.clone())), &row(2, true), &lookups()).await;
        assert_eq!(r, Some(Err(unknown)));
        assert!(matches!(
            settlement(&row(2, true), r.unwrap(), limits().retry),
            Settlement::Retry {
                ambiguous: true,
                ..
            }
        ));
    }

    #[test]
    fn a_refused_settlement_counts_against_the_budget() {
        let e = StoreError::Corrupt("x".into());
        assert!(matches!(
            settlement_failed(&row(1, false), &e, limits().retry),
            Settlement::Retry {
                ambiguous: true,
                ..
            }
        ));
        assert!(matches!(
            settlement_failed(&row(3, false), &e, limits().retry),
            Settlement::Dead { .. }
        ));
    }

    #[test]
    fn the_call_window_leaves_room_for_a_lookup_a_call_and_every_settlement_try() {
        let l = limits();
        assert_eq!(
            l.call_bound(),
            Duration::from_secs(5 * 2 + 5 * 3) + Duration::from_millis(400)
        );
        assert_eq!(l.call_window(), Some(Duration::from_millis(4600)));
        let short = RelayLimits {
            lease: Duration::from_secs(25),
            ..l
        };
        assert_eq!(short.call_window(), None);
    }
}
