use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use tokio::sync::oneshot;

use super::{HandoffCount, RelayLimits, SETTLE_RETRY_DELAY, SETTLE_TRIES_MAX};
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

/// Stop claiming, let the calls in flight finish and record their outcomes,
/// give back the rows claimed but not called; answers once nothing is held.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Drain;

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
    /// Shutting down: nothing new is claimed or called.
    draining: bool,
    /// Give-backs of uncalled rows in flight.
    releasing: usize,
    /// Who waits for the drain to end.
    drained: Vec<oneshot::Sender<()>>,
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
        assert!(
            limits.call_window().is_some(),
            "the lease outlasts a call, a lookup and the settlement's tries"
        );
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
            draining: false,
            releasing: 0,
            drained: Vec::new(),
        }
    }

    /// Claims due rows from Postgres, up to the free call slots.
    fn claim(&mut self, ctx: &mut Context<Self>) {
        let room = self
            .limits
            .concurrency_max
            .saturating_sub(self.in_flight + self.pending.len());
        if self.draining {
            return;
        }
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
        if self.draining {
            self.release_pending(ctx);
            self.check_drained();
            return;
        }
        let window = self
            .limits
            .call_window()
            .expect("checked when the relay was made");
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
            let result = match look_up_first(provider.as_ref(), &row).await {
                Some(known) => known,
                None => {
                    let started = Instant::now();
                    let result = provider.execute(row.payout.clone()).await;
                    metrics::histogram!("payrail_provider_call_seconds")
                        .record(started.elapsed().as_secs_f64());
                    metrics::counter!("payrail_provider_calls_total", "outcome" => outcome_label(&result))
                        .increment(1);
                    tracing::debug!(transfer_id = %row.payout.transfer_id, attempt = row.attempt, ?result, "provider answered");
                    result
                }
            };
            settlement(&row, result, &limits)
        };
        ctx.spawn(call.into_actor(self).map(move |settlement, relay, ctx| {
            relay.in_flight -= 1;
            if let Settlement::Dead { error, .. } = &settlement {
                tracing::error!(transfer_id = %held.row.payout.transfer_id, attempts = held.row.budget_used, %error, "dead-lettered (parked)");
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
        let mut batch: Vec<(Held, Settlement)> = self.outcomes.drain(..n).collect();
        // A row this process held twice (its lease ran out and it claimed
        // it again) has one live claim: the latest. The older outcome would
        // be fenced out anyway; it never shares a batch with the live one.
        batch.sort_by_key(|(h, _)| (h.row.payout.transfer_id, std::cmp::Reverse(h.row.attempt)));
        let mut stale = Vec::new();
        let mut i = 1;
        while i < batch.len() {
            if batch[i].0.row.payout.transfer_id == batch[i - 1].0.row.payout.transfer_id {
                stale.push(batch.remove(i));
            } else {
                i += 1;
            }
        }
        for (held, _) in &stale {
            tracing::info!(transfer_id = %held.row.payout.transfer_id, attempt = held.row.attempt, "outcome of an outdated claim dropped");
            self.forget(held);
        }
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
            relay.check_drained();
        }));
    }

    /// A held row leaves this process's memory.
    fn forget(&self, held: &Held) {
        if held.handed_off {
            self.handed_off.release(1);
        }
    }

    /// While draining: the rows claimed but never called go back to the
    /// queue at once, without waiting for their leases (and without being
    /// taken for ambiguous: no call went out for them).
    fn release_pending(&mut self, ctx: &mut Context<Self>) {
        if self.pending.is_empty() {
            return;
        }
        let rows: Vec<Held> = self.pending.drain(..).collect();
        for held in &rows {
            self.forget(held);
        }
        let claims: Vec<(uuid::Uuid, i32)> = rows
            .iter()
            .map(|h| (h.row.payout.transfer_id, h.row.attempt))
            .collect();
        let store = self.store.clone();
        self.releasing += 1;
        ctx.spawn(
            async move {
                if let Err(e) = store.release_outbox(&claims).await {
                    tracing::warn!(rows = claims.len(), error = %e, "giving back uncalled rows failed; their leases will expire");
                }
            }
            .into_actor(self)
            .map(|(), relay, _| {
                relay.releasing -= 1;
                relay.check_drained();
            }),
        );
    }

    /// Answers the drain's waiters once nothing is held any more.
    fn check_drained(&mut self) {
        let idle = self.in_flight == 0
            && self.outcomes.is_empty()
            && !self.settling
            && self.pending.is_empty()
            && self.releasing == 0;
        if self.draining && idle {
            for waiter in self.drained.drain(..) {
                let _ = waiter.send(());
            }
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

/// Settles a batch in one transaction. When Postgres rejects something
/// about particular rows, each row is settled alone, so one bad row fails
/// no other; a row that cannot be settled even alone is rescheduled with a
/// plain error instead, which counts against its attempt limit, so no row is
/// retried forever outside the dead letters. When Postgres fails as a whole
/// past the tries, the rows are left to their leases: whoever claims them
/// next takes them for ambiguous and asks the provider first.
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
    match limits.retry.after_failure(row.budget_used, None) {
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
) -> Option<Result<ProviderOutcome, ProviderError>> {
    if !row.ambiguous {
        return None;
    }
    let found = provider.lookup(row.payout.transfer_id).await;
    let label = match &found {
        Ok(Some(_)) => "found",
        Ok(None) => "not_found",
        Err(_) => "unknown",
    };
    metrics::counter!("payrail_provider_lookups_total", "outcome" => label).increment(1);
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
    limits: &RelayLimits,
) -> Settlement {
    match result {
        Ok(ProviderOutcome::Succeeded { reference }) => Settlement::Final {
            status: TransferStatus::Succeeded,
            provider_reference: Some(ProviderText::clean(&reference)),
            failure_reason: None,
        },
        // Final only because an ambiguous row was looked up first: this
        // answer is about the first `POST` the provider acted on.
        Ok(ProviderOutcome::Declined { reason }) | Err(ProviderError::Permanent { reason }) => {
            Settlement::Final {
                status: TransferStatus::Failed,
                provider_reference: None,
                failure_reason: Some(ProviderText::clean(&reason)),
            }
        }
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
            match limits.retry.after_failure(row.budget_used, retry_after) {
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
        Ok(ProviderOutcome::Succeeded { .. }) => "succeeded",
        Ok(ProviderOutcome::Declined { .. }) => "declined",
        Err(ProviderError::Transient { .. }) => "transient",
        Err(ProviderError::Permanent { .. }) => "permanent",
        Err(ProviderError::Misconfigured { .. }) => "misconfigured",
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

impl Handler<Drain> for Relay {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Drain, ctx: &mut Context<Self>) -> Self::Result {
        tracing::info!(
            in_flight = self.in_flight,
            unsettled = self.outcomes.len(),
            "relay draining: no new claims; calls in flight finish"
        );
        self.draining = true;
        let (tx, rx) = oneshot::channel();
        self.drained.push(tx);
        self.pump(ctx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

impl Handler<Deliver> for Relay {
    type Result = ();

    fn handle(&mut self, msg: Deliver, ctx: &mut Context<Self>) {
        metrics::counter!("payrail_relay_handed_off_total").increment(msg.rows.len() as u64);
        if self.draining {
            // Written claimed just before the drain: give them back.
            for row in &msg.rows {
                assert_eq!(row.attempt, 1, "a flush claims a row's first attempt");
            }
            self.pending.extend(msg.rows.into_iter().map(|row| Held {
                row,
                claimed_at: msg.claimed_at,
                handed_off: true,
            }));
            self.release_pending(ctx);
            return;
        }
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
        }
    }

    fn failed(s: &Settlement) -> bool {
        matches!(
            s,
            Settlement::Final {
                status: TransferStatus::Failed,
                ..
            }
        )
    }

    #[test]
    fn outcomes_map_to_settlements() {
        let limits = limits();
        let ok = settlement(
            &row(1, false),
            Ok(ProviderOutcome::Succeeded {
                reference: "r\0ef".into(),
            }),
            &limits,
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
            &limits,
        );
        assert!(
            matches!(declined, Settlement::Final { status: TransferStatus::Failed, failure_reason: Some(r), .. } if r.as_str() == "no")
        );
        let permanent = Err(ProviderError::Permanent {
            reason: "HTTP 422: {\"error\":\"invalid_account\"}".into(),
        });
        assert!(failed(&settlement(&row(1, false), permanent, &limits)));
        let transient = ProviderError::Transient {
            reason: "503".into(),
            retry_after: Some(Duration::from_secs(2)),
            ambiguous: true,
        };
        match settlement(&row(2, false), Err(transient.clone()), &limits) {
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
            settlement(&row(3, false), Err(transient), &limits),
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
            match settlement(&r, misconfigured(), &limits()) {
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
        assert_eq!(look_up_first(&Silent, &row(1, false)).await, None);
        // The provider's record decides...
        assert_eq!(
            look_up_first(&executed, &row(2, true)).await,
            Some(Ok(ProviderOutcome::Succeeded {
                reference: "r".into()
            }))
        );
        // ...its own "no such payout" lets the POST go out...
        assert_eq!(look_up_first(&Lookup(Ok(None)), &row(2, true)).await, None);
        // ...and a lookup that cannot tell keeps the row waiting.
        let unknown = ProviderError::Transient {
            reason: "lookup: HTTP 404: <html>".into(),
            retry_after: None,
            ambiguous: true,
        };
        let r = look_up_first(&Lookup(Err(unknown.clone())), &row(2, true)).await;
        assert_eq!(r, Some(Err(unknown)));
        assert!(matches!(
            settlement(&row(2, true), r.unwrap(), &limits()),
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
            settlement_failed(&row(1, false), &e, &limits()),
            Settlement::Retry {
                ambiguous: true,
                ..
            }
        ));
        assert!(matches!(
            settlement_failed(&row(3, false), &e, &limits()),
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
