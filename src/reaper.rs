//! The reaper actor: deletes idempotency-key rows past retention in bounded
//! batches. Correctness never depends on it (an expired row is replaced by
//! the next write of its key); it only keeps the table from growing forever.

use std::time::Duration;

use actix::prelude::*;

use crate::store::Store;

/// Bounds of the reaper.
#[derive(Debug, Clone, Copy)]
pub struct ReaperLimits {
    /// Time between ticks.
    pub interval: Duration,
    /// Rows per DELETE.
    pub batch_rows_max: i64,
    /// DELETE statements per tick.
    pub batches_per_tick_max: usize,
}

/// Deletes expired key rows on a timer; one tick at a time.
pub struct Reaper {
    store: Store,
    limits: ReaperLimits,
    busy: bool,
}

impl Reaper {
    /// A reaper that starts ticking once started.
    pub fn new(store: Store, limits: ReaperLimits) -> Self {
        Self {
            store,
            limits,
            busy: false,
        }
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            return;
        }
        self.busy = true;
        let store = self.store.clone();
        let limits = self.limits;
        let work = async move {
            let mut deleted = 0u64;
            for _ in 0..limits.batches_per_tick_max {
                match store.delete_expired_keys(limits.batch_rows_max).await {
                    Ok(n) => {
                        deleted += n;
                        if (n as i64) < limits.batch_rows_max {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reaper tick failed; will retry next tick");
                        break;
                    }
                }
            }
            deleted
        };
        ctx.spawn(work.into_actor(self).map(|deleted, reaper, _| {
            reaper.busy = false;
            if deleted > 0 {
                tracing::info!(deleted, "reaped expired idempotency keys");
            }
            metrics::counter!("payrail_reaped_keys_total").increment(deleted);
        }));
    }
}

impl Actor for Reaper {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.limits.interval, |reaper, ctx| reaper.tick(ctx));
    }
}

/// Runs one tick now (tests and operators need not wait for the timer).
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReapNow;

impl Handler<ReapNow> for Reaper {
    type Result = ();

    fn handle(&mut self, _: ReapNow, ctx: &mut Context<Self>) {
        self.tick(ctx);
    }
}
