use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::{retry_delay, HandoffCount, RelayLimits};
use crate::domain::{ProviderText, TransferStatus};
use crate::provider::{Provider, ProviderError, ProviderOutcome};
use crate::store::outbox::{ClaimedRow, Settlement, OUTBOX_CHANNEL};
use crate::store::{Store, StoreError};

/// "Due rows may exist": sent by the LISTEN connection and the poll timer.
/// Idempotent, so a full mailbox can drop it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Wake;

/// Rows a flush of this process wrote already claimed (see `Handoff`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Deliver {
    /// The claimed rows, attempt 1 each.
    pub rows: Vec<ClaimedRow>,
    /// No later than Postgres's claim time.
    pub claimed_at: Instant,
}

/// A row this process holds, and where the claim came from.
struct Held {
    row: ClaimedRow,
    claimed_at: Instant,
    /// Counted in the handoff count until settled or dropped.
    handed_off: bool,
}

/// The relay actor. Takes claimed rows (handed over by this process's
/// flushes, or claimed from Postgres in batches), runs up to
/// `concurrency_max` provider calls at once, and settles the outcomes in
/// batches: while one settlement transaction runs, the outcomes that arrive
/// wait for the next, so batches grow with load and add no latency when idle.
pub struct Relay {
    store: Store,
    provider: Arc<dyn Provider>,
    limits: RelayLimits,
    handed_off: Arc<HandoffCount>,
    /// Claimed rows waiting for a call slot.
    pending: VecDeque<Held>,
    in_flight: usize,
    claiming: bool,
    /// Rows are probably due in Postgres (a wake, or a full claim): claim as
    /// soon as there is room.
    more_due: bool,
    /// Outcomes waiting for the next settlement batch.
    outcomes: Vec<(Held, Settlement)>,
    settling: bool,
    /// When a timer will next claim rows whose retry falls due.
    wake_at: Option<Instant>,
}

impl Relay {
    /// A relay that starts listening and polling once started. `handed_off`
    /// is shared with the shards that hand rows over.
    pub fn new(
        store: Store,
        provider: Arc<dyn Provider>,
        limits: RelayLimits,
        handed_off: Arc<HandoffCount>,
    ) -> Self {
        assert!(limits.concurrency_max > 0 && limits.settle_batch_max > 0);
        let _ = limits.call_window();
        Self {
            store,
            provider,
            limits,
            handed_off,
            pending: VecDeque::new(),
            in_flight: 0,
            claiming: false,
            more_due: false,
            outcomes: Vec::new(),
            settling: false,
            wake_at: None,
        }
    }

    /// Claims due rows from Postgres, up to the free call slots.
    fn claim(&mut self, ctx: &mut Context<Self>) {
        let room = self
            .limits
            .concurrency_max
            .saturating_sub(self.in_flight + self.pending.len());
        if self.claiming || room == 0 {
            self.more_due = true;
            return;
        }
        self.claiming = true;
        self.more_due = false;
        let store = self.store.clone();
        let lease = self.limits.lease;
        let claimed_at = Instant::now();
        let claim = async move { store.claim_outbox(room as i64, lease).await };
        ctx.spawn(claim.into_actor(self).map(move |claimed, relay, ctx| {
            relay.claiming = false;
            match claimed {
                Ok(rows) => {
                    metrics::histogram!("payrail_relay_claim_size").record(rows.len() as f64);
                    // A full claim means more rows are probably due.
                    if rows.len() == room {
                        relay.more_due = true;
                    }
                    relay.pending.extend(rows.into_iter().map(|row| Held {
                        row,
                        claimed_at,
                        handed_off: false,
                    }));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "outbox claim failed; retrying on the next wake")
                }
            }
            relay.pump(ctx);
        }));
    }

    /// Starts calls for pending rows while slots are free; claims more when
    /// rows are probably due and room is left.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        let window = self.limits.call_window();
        while self.in_flight < self.limits.concurrency_max {
            let Some(held) = self.pending.pop_front() else {
                break;
            };
            if held.claimed_at.elapsed() >= window {
                // Too late to call and settle within the lease: leave the row
                // to its lease, so that no two calls for it ever overlap.
                metrics::counter!("payrail_relay_claims_expired_total").increment(1);
                tracing::warn!(transfer_id = %held.row.payout.transfer_id, "claim too old to call; left to its lease");
                self.forget(&held);
                continue;
            }
            self.call(held, ctx);
        }
        if self.more_due {
            self.claim(ctx);
        }
    }

    /// One provider call (and, for an ambiguous row, a lookup); its outcome
    /// joins the next settlement batch.
    fn call(&mut self, held: Held, ctx: &mut Context<Self>) {
        self.in_flight += 1;
        let provider = self.provider.clone();
        let limits = self.limits;
        let row = held.row.clone();
        let call = async move {
            let started = Instant::now();
            let result = provider.execute(row.payout.clone()).await;
            metrics::histogram!("payrail_provider_call_seconds")
                .record(started.elapsed().as_secs_f64());
            metrics::counter!("payrail_provider_calls_total", "outcome" => outcome_label(&result))
                .increment(1);
            tracing::debug!(transfer_id = %row.payout.transfer_id, attempt = row.attempt, ?result, "provider answered");
            let result = reconcile(provider.as_ref(), &row, result).await;
            settlement(&row, result, &limits)
        };
        ctx.spawn(call.into_actor(self).map(move |settlement, relay, ctx| {
            relay.in_flight -= 1;
            if let Settlement::Dead { error, .. } = &settlement {
                tracing::error!(transfer_id = %held.row.payout.transfer_id, attempts = held.row.budget_used, %error, "dead-lettered");
            }
            relay.outcomes.push((held, settlement));
            relay.settle(ctx);
            relay.pump(ctx);
        }));
    }

    /// Settles the waiting outcomes in one transaction, unless one is running.
    fn settle(&mut self, ctx: &mut Context<Self>) {
        if self.settling || self.outcomes.is_empty() {
            return;
        }
        let n = self.outcomes.len().min(self.limits.settle_batch_max);
        let batch: Vec<(Held, Settlement)> = self.outcomes.drain(..n).collect();
        self.settling = true;
        metrics::histogram!("payrail_relay_settle_batch_size").record(n as f64);
        let store = self.store.clone();
        let limits = self.limits;
        let rows: Vec<(ClaimedRow, Settlement)> = batch
            .iter()
            .map(|(h, s)| (h.row.clone(), s.clone()))
            .collect();
        let started = Instant::now();
        let work = async move { settle_batch(&store, rows, &limits).await };
        ctx.spawn(work.into_actor(self).map(move |(), relay, ctx| {
            metrics::histogram!("payrail_relay_settle_seconds")
                .record(started.elapsed().as_secs_f64());
            relay.settling = false;
            let mut next_retry: Option<Duration> = None;
            for (held, settlement) in &batch {
                relay.forget(held);
                if let Settlement::Retry { delay, .. } = settlement {
                    next_retry = Some(next_retry.map_or(*delay, |d| d.min(*delay)));
                }
            }
            if let Some(delay) = next_retry {
                relay.wake_after(delay, ctx);
            }
            relay.settle(ctx);
            relay.pump(ctx);
        }));
    }

    /// A held row leaves this process's memory.
    fn forget(&self, held: &Held) {
        if held.handed_off {
            self.handed_off.release(1);
        }
    }

    /// Claims again once a rescheduled row falls due, instead of waiting for
    /// the next poll. At most one timer is pending before any given instant.
    fn wake_after(&mut self, delay: Duration, ctx: &mut Context<Self>) {
        let at = Instant::now() + delay;
        if self.wake_at.is_some_and(|w| w <= at) {
            return;
        }
        self.wake_at = Some(at);
        ctx.run_later(delay, |relay, ctx| {
            relay.wake_at = None;
            relay.claim(ctx);
        });
    }

    fn report_stats(&self, ctx: &mut Context<Self>) {
        let store = self.store.clone();
        metrics::gauge!("payrail_relay_held_rows")
            .set((self.pending.len() + self.in_flight + self.outcomes.len()) as f64);
        ctx.spawn(
            async move {
                if let Ok(s) = store.outbox_stats().await {
                    metrics::gauge!("payrail_outbox_backlog").set(s.backlog as f64);
                    metrics::gauge!("payrail_outbox_dead").set(s.dead as f64);
                    metrics::gauge!("payrail_outbox_oldest_due_age_seconds")
                        .set(s.oldest_due_age_secs);
                }
            }
            .into_actor(self),
        );
    }
}

/// A whole batch tries this often when Postgres fails as a whole (right
/// after a restart the pool may hand out a dead connection) before the rows
/// are left to their leases.
const SETTLE_TRIES_MAX: u32 = 3;
/// Pause between those tries.
const SETTLE_RETRY_DELAY: Duration = Duration::from_millis(200);

/// Settles a batch in one transaction. When Postgres rejects something
/// about particular rows, each row is settled alone, so one bad row fails
/// no other; a row that cannot be settled even alone is rescheduled with a
/// plain error instead, which counts against its attempt limit, so no row is
/// retried forever outside the dead letters.
async fn settle_batch(store: &Store, batch: Vec<(ClaimedRow, Settlement)>, limits: &RelayLimits) {
    for attempt in 1..=SETTLE_TRIES_MAX {
        match store.settle_outbox_batch(&batch).await {
            Ok(report) => {
                log_fenced(&batch, &report.held);
                return;
            }
            Err(e) if e.is_row_specific() => {
                tracing::warn!(batch = batch.len(), error = %e, "settlement batch refused; settling each row alone");
                break;
            }
            Err(e) if attempt < SETTLE_TRIES_MAX => {
                tracing::debug!(error = %e, "settling failed; trying again");
                tokio::time::sleep(SETTLE_RETRY_DELAY).await;
            }
            // The leases run out and the rows are claimed again; the provider
            // answers the repeats from its records.
            Err(e) => {
                tracing::warn!(batch = batch.len(), error = %e, "settling failed; the leases will expire");
                return;
            }
        }
    }
    for pair in batch {
        let single = std::slice::from_ref(&pair);
        match store.settle_outbox_batch(single).await {
            Ok(report) => log_fenced(single, &report.held),
            Err(e) => {
                metrics::counter!("payrail_relay_settle_failures_total").increment(1);
                let fallback = settlement_failed(&pair.0, &e, limits);
                tracing::warn!(transfer_id = %pair.0.payout.transfer_id, error = %e, ?fallback, "settlement refused");
                if let Err(e) = store.settle_outbox_batch(&[(pair.0, fallback)]).await {
                    tracing::warn!(error = %e, "recording the settlement failure failed; the lease will expire");
                }
            }
        }
    }
}

fn log_fenced(batch: &[(ClaimedRow, Settlement)], held: &[bool]) {
    assert_eq!(batch.len(), held.len());
    for ((row, _), held) in batch.iter().zip(held) {
        if !held {
            tracing::info!(transfer_id = %row.payout.transfer_id, "claim was taken over; left to the new holder");
        }
    }
}

/// What is recorded for a row whose outcome Postgres refused to store. The
/// payout may have executed, so the row counts as ambiguous.
fn settlement_failed(row: &ClaimedRow, error: &StoreError, limits: &RelayLimits) -> Settlement {
    let error = ProviderText::clean(&format!("settlement failed: {error}"));
    if row.budget_used >= limits.max_attempts {
        Settlement::Dead {
            error,
            ambiguous: true,
        }
    } else {
        Settlement::Retry {
            delay: retry_delay(row.budget_used, limits.retry_base, limits.retry_cap, None),
            error,
            ambiguous: true,
        }
    }
}

/// A permanent `4xx` proves nothing once an earlier call's outcome was
/// unknown: that call may have executed the payout, and the `4xx` may only
/// say the repeat was refused. Ask the provider what became of it.
async fn reconcile(
    provider: &dyn Provider,
    row: &ClaimedRow,
    result: Result<ProviderOutcome, ProviderError>,
) -> Result<ProviderOutcome, ProviderError> {
    let Err(ProviderError::Permanent { reason }) = &result else {
        return result;
    };
    if !row.ambiguous {
        return result;
    }
    metrics::counter!("payrail_provider_lookups_total").increment(1);
    match provider.lookup(row.payout.transfer_id).await {
        Ok(Some(outcome)) => {
            tracing::info!(transfer_id = %row.payout.transfer_id, %reason, ?outcome, "an earlier ambiguous call had decided it");
            Ok(outcome)
        }
        // Never executed: the permanent answer stands.
        Ok(None) => result,
        Err(e) => Err(e),
    }
}

/// What the outbox records for one call's result.
fn settlement(
    row: &ClaimedRow,
    result: Result<ProviderOutcome, ProviderError>,
    limits: &RelayLimits,
) -> Settlement {
    match result {
        Ok(ProviderOutcome::Succeeded { reference }) => Settlement::Final {
            status: TransferStatus::Succeeded,
            provider_reference: Some(ProviderText::clean(&reference)),
            failure_reason: None,
        },
        Ok(ProviderOutcome::Declined { reason }) | Err(ProviderError::Permanent { reason }) => {
            Settlement::Final {
                status: TransferStatus::Failed,
                provider_reference: None,
                failure_reason: Some(ProviderText::clean(&reason)),
            }
        }
        Err(ProviderError::Transient {
            reason, ambiguous, ..
        }) if row.budget_used >= limits.max_attempts => Settlement::Dead {
            error: ProviderText::clean(&reason),
            ambiguous,
        },
        Err(ProviderError::Transient {
            reason,
            retry_after,
            ambiguous,
        }) => Settlement::Retry {
            delay: retry_delay(
                row.budget_used,
                limits.retry_base,
                limits.retry_cap,
                retry_after,
            ),
            error: ProviderText::clean(&reason),
            ambiguous,
        },
    }
}

fn outcome_label(result: &Result<ProviderOutcome, ProviderError>) -> &'static str {
    match result {
        Ok(ProviderOutcome::Succeeded { .. }) => "succeeded",
        Ok(ProviderOutcome::Declined { .. }) => "declined",
        Err(ProviderError::Transient { .. }) => "transient",
        Err(ProviderError::Permanent { .. }) => "permanent",
    }
}

impl Actor for Relay {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(64);
        ctx.run_interval(self.limits.poll_interval, |relay, ctx| {
            relay.claim(ctx);
            relay.report_stats(ctx);
        });
        // LISTEN on a connection of its own; reconnect whenever it breaks
        // (a Postgres restart, say). Polling covers the gaps.
        let me = ctx.address();
        let listen = self
            .store
            .clone()
            .listen_forever(OUTBOX_CHANNEL, None, move |_| {
                let _ = me.try_send(Wake);
            });
        ctx.spawn(listen.into_actor(self));
    }
}

impl Handler<Wake> for Relay {
    type Result = ();

    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        self.claim(ctx);
    }
}

impl Handler<Deliver> for Relay {
    type Result = ();

    fn handle(&mut self, msg: Deliver, ctx: &mut Context<Self>) {
        metrics::counter!("payrail_relay_handed_off_total").increment(msg.rows.len() as u64);
        self.pending.extend(msg.rows.into_iter().map(|row| {
            assert_eq!(row.attempt, 1, "a flush claims a row's first attempt");
            Held {
                row,
                claimed_at: msg.claimed_at,
                handed_off: true,
            }
        }));
        self.pump(ctx);
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

    const LIMITS: RelayLimits = RelayLimits {
        concurrency_max: 1,
        poll_interval: Duration::from_secs(1),
        lease: Duration::from_secs(30),
        max_attempts: 3,
        retry_base: Duration::from_millis(100),
        retry_cap: Duration::from_secs(10),
        provider_timeout: Duration::from_secs(5),
        settle_timeout: Duration::from_secs(5),
        settle_batch_max: 64,
    };

    #[test]
    fn outcomes_map_to_settlements() {
        let ok = settlement(
            &row(1, false),
            Ok(ProviderOutcome::Succeeded {
                reference: "r\0ef".into(),
            }),
            &LIMITS,
        );
        assert!(matches!(
            ok,
            Settlement::Final {
                status: TransferStatus::Succeeded,
                provider_reference: Some(ref r),
                ..
            } if r.as_str() == "ref"
        ));
        let declined = settlement(
            &row(1, false),
            Ok(ProviderOutcome::Declined {
                reason: "no".into(),
            }),
            &LIMITS,
        );
        assert!(
            matches!(declined, Settlement::Final { status: TransferStatus::Failed, failure_reason: Some(r), .. } if r.as_str() == "no")
        );
        let permanent = settlement(
            &row(1, false),
            Err(ProviderError::Permanent {
                reason: "bad".into(),
            }),
            &LIMITS,
        );
        assert!(matches!(
            permanent,
            Settlement::Final {
                status: TransferStatus::Failed,
                ..
            }
        ));
        let transient = ProviderError::Transient {
            reason: "503".into(),
            retry_after: Some(Duration::from_secs(2)),
            ambiguous: true,
        };
        match settlement(&row(2, false), Err(transient.clone()), &LIMITS) {
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
            settlement(&row(3, false), Err(transient), &LIMITS),
            Settlement::Dead {
                ambiguous: true,
                ..
            }
        ));
    }

    /// A provider whose lookup always says `found`.
    struct Lookup(Option<ProviderOutcome>);

    impl Provider for Lookup {
        fn execute(
            &self,
            _: Payout,
        ) -> futures::future::BoxFuture<'static, Result<ProviderOutcome, ProviderError>> {
            unreachable!("reconcile only looks up")
        }
        fn lookup(
            &self,
            _: uuid::Uuid,
        ) -> futures::future::BoxFuture<'static, Result<Option<ProviderOutcome>, ProviderError>>
        {
            let found = self.0.clone();
            Box::pin(async move { Ok(found) })
        }
    }

    #[actix_web::test]
    async fn a_permanent_refusal_is_final_only_when_nothing_ambiguous_came_before() {
        let refused = || {
            Err(ProviderError::Permanent {
                reason: "HTTP 403".into(),
            })
        };
        let executed = Lookup(Some(ProviderOutcome::Succeeded {
            reference: "r".into(),
        }));
        // No earlier ambiguity: the refusal stands, nobody is asked.
        assert_eq!(
            reconcile(&executed, &row(1, false), refused()).await,
            refused()
        );
        // After an ambiguous attempt the provider's record decides...
        assert_eq!(
            reconcile(&executed, &row(2, true), refused()).await,
            Ok(ProviderOutcome::Succeeded {
                reference: "r".into()
            })
        );
        // ...and "never executed" (404) makes the refusal final.
        assert_eq!(
            reconcile(&Lookup(None), &row(2, true), refused()).await,
            refused()
        );
    }

    #[test]
    fn a_refused_settlement_counts_against_the_budget() {
        let e = StoreError::Corrupt("x".into());
        assert!(matches!(
            settlement_failed(&row(1, false), &e, &LIMITS),
            Settlement::Retry {
                ambiguous: true,
                ..
            }
        ));
        assert!(matches!(
            settlement_failed(&row(3, false), &e, &LIMITS),
            Settlement::Dead { .. }
        ));
    }
}
