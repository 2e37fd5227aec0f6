use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::{retry_delay, RelayLimits};
use crate::domain::TransferStatus;
use crate::provider::{Provider, ProviderError, ProviderOutcome};
use crate::store::outbox::{ClaimedRow, Settlement, OUTBOX_CHANNEL};
use crate::store::Store;

/// "Due rows may exist": sent by the LISTEN connection, the poll timer and
/// finished calls. Idempotent, so a full mailbox can drop it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Wake;

/// The relay actor. Claims due rows in batches, runs up to
/// `concurrency_max` provider calls at once, and settles each outcome in
/// one transaction with the transfer's new status.
pub struct Relay {
    store: Store,
    provider: Arc<dyn Provider>,
    limits: RelayLimits,
    in_flight: usize,
    claiming: bool,
    /// A wake arrived during a claim: claim again when it ends.
    woken: bool,
}

impl Relay {
    /// A relay that starts listening and polling once started.
    pub fn new(store: Store, provider: Arc<dyn Provider>, limits: RelayLimits) -> Self {
        Self {
            store,
            provider,
            limits,
            in_flight: 0,
            claiming: false,
            woken: false,
        }
    }

    fn claim(&mut self, ctx: &mut Context<Self>) {
        let room = self.limits.concurrency_max - self.in_flight;
        if self.claiming || room == 0 {
            self.woken = true;
            return;
        }
        self.claiming = true;
        self.woken = false;
        let store = self.store.clone();
        let lease = self.limits.lease;
        let claim = async move { store.claim_outbox(room as i64, lease).await };
        ctx.spawn(claim.into_actor(self).map(move |claimed, relay, ctx| {
            relay.claiming = false;
            match claimed {
                Ok(rows) => {
                    metrics::histogram!("payrail_relay_claim_size").record(rows.len() as f64);
                    // A full claim means more rows are probably due.
                    if rows.len() == room {
                        relay.woken = true;
                    }
                    for row in rows {
                        relay.send(row, ctx);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "outbox claim failed; retrying on the next wake")
                }
            }
            if relay.woken {
                relay.claim(ctx);
            }
        }));
    }

    /// One provider call and its settlement, off the actor's own state.
    fn send(&mut self, row: ClaimedRow, ctx: &mut Context<Self>) {
        self.in_flight += 1;
        let provider = self.provider.clone();
        let store = self.store.clone();
        let limits = self.limits;
        let call = async move {
            let started = Instant::now();
            let result = provider.execute(row.payout.clone()).await;
            metrics::histogram!("payrail_provider_call_seconds")
                .record(started.elapsed().as_secs_f64());
            metrics::counter!("payrail_provider_calls_total", "outcome" => outcome_label(&result))
                .increment(1);
            tracing::debug!(transfer_id = %row.payout.transfer_id, attempt = row.attempt, ?result, "provider answered");
            let settlement = settlement(&row, result, &limits);
            if let Settlement::Dead { error } = &settlement {
                tracing::error!(transfer_id = %row.payout.transfer_id, attempts = row.attempt, %error, "dead-lettered");
            }
            settle(&store, &row, &settlement).await;
        };
        ctx.spawn(call.into_actor(self).map(|(), relay, ctx| {
            relay.in_flight -= 1;
            relay.claim(ctx);
        }));
    }

    fn report_stats(&self, ctx: &mut Context<Self>) {
        let store = self.store.clone();
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

/// Settling tries this often before leaving the row to its lease: right
/// after a Postgres restart the pool may hand out a connection that is
/// already dead, and a retry on a fresh one saves a whole lease period.
const SETTLE_TRIES_MAX: u32 = 3;
/// Pause between settle tries.
const SETTLE_RETRY_DELAY: Duration = Duration::from_millis(200);

async fn settle(store: &Store, row: &ClaimedRow, settlement: &Settlement) {
    let id = row.payout.transfer_id;
    for attempt in 1..=SETTLE_TRIES_MAX {
        let r = store.settle_outbox(row, settlement).await;
        tracing::debug!(transfer_id = %id, ?r, "settled");
        match r {
            Ok(true) => return,
            Ok(false) => {
                tracing::info!(transfer_id = %id, "claim was taken over; left to the new holder");
                return;
            }
            Err(e) if attempt < SETTLE_TRIES_MAX => {
                tracing::debug!(transfer_id = %id, error = %e, "settling failed; trying again");
                tokio::time::sleep(SETTLE_RETRY_DELAY).await;
            }
            // The lease runs out and the row is claimed again; the provider
            // answers the repeat from its record.
            Err(e) => {
                tracing::warn!(transfer_id = %id, error = %e, "settling failed; the lease will expire")
            }
        }
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
            provider_reference: Some(reference),
            failure_reason: None,
        },
        Ok(ProviderOutcome::Declined { reason }) | Err(ProviderError::Permanent { reason }) => {
            Settlement::Final {
                status: TransferStatus::Failed,
                provider_reference: None,
                failure_reason: Some(reason),
            }
        }
        Err(ProviderError::Transient { reason, .. }) if row.attempt >= limits.attempts_max => {
            Settlement::Dead { error: reason }
        }
        Err(ProviderError::Transient {
            reason,
            retry_after,
        }) => Settlement::Retry {
            delay: retry_delay(
                row.attempt,
                limits.retry_base,
                limits.retry_cap,
                retry_after,
            ),
            error: reason,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Payout;

    fn row(attempt: i32) -> ClaimedRow {
        ClaimedRow {
            payout: Payout {
                transfer_id: uuid::Uuid::nil(),
                amount: 1,
                currency: "USD".into(),
                source_account: "a".into(),
                destination_account: "b".into(),
            },
            attempt,
        }
    }

    const LIMITS: RelayLimits = RelayLimits {
        concurrency_max: 1,
        poll_interval: Duration::from_secs(1),
        lease: Duration::from_secs(30),
        attempts_max: 3,
        retry_base: Duration::from_millis(100),
        retry_cap: Duration::from_secs(10),
    };

    #[test]
    fn outcomes_map_to_settlements() {
        let ok = settlement(
            &row(1),
            Ok(ProviderOutcome::Succeeded {
                reference: "r".into(),
            }),
            &LIMITS,
        );
        assert!(matches!(
            ok,
            Settlement::Final {
                status: TransferStatus::Succeeded,
                provider_reference: Some(_),
                ..
            }
        ));
        let declined = settlement(
            &row(1),
            Ok(ProviderOutcome::Declined {
                reason: "no".into(),
            }),
            &LIMITS,
        );
        assert!(
            matches!(declined, Settlement::Final { status: TransferStatus::Failed, failure_reason: Some(r), .. } if r == "no")
        );
        let permanent = settlement(
            &row(1),
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
        };
        match settlement(&row(2), Err(transient.clone()), &LIMITS) {
            Settlement::Retry { delay, .. } => assert!(delay >= Duration::from_secs(2)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            settlement(&row(3), Err(transient), &LIMITS),
            Settlement::Dead { .. }
        ));
    }
}
