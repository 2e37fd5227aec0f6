//! The reaper actor: deletes idempotency-key rows past `--key-retention`,
//! finished webhook events past `--event-retention`, endpoints deleted
//! longer ago than that and provider notification ids past
//! `--provider-notification-retention`, in bounded batches, and reports how far behind it
//! is (`payrail_reaper_expired_keys`, `..._oldest_age_seconds`). Correctness never depends on it (an expired key row is replaced
//! by the next write of its key; an event is only deleted once nothing is
//! left to deliver); it keeps those tables from growing forever.

use std::future::Future;
use std::time::{Duration, SystemTime};

use actix::prelude::*;

use crate::domain::webhook::event_id_floor;
use crate::store::{EndpointStore, EventStore, KeyStore, NotificationStore, Store, StoreError};

/// The expired-key backlog is counted up to this many rows: past it the
/// figure only says "at least", and stays cheap to read.
const EXPIRED_COUNT_MAX: i64 = 1_000_000;

/// Bounds of the reaper.
#[derive(Debug, Clone, Copy)]
pub struct ReaperLimits {
    /// Time between ticks.
    pub interval: Duration,
    /// Rows per DELETE.
    pub batch_rows_max: i64,
    /// DELETE statements per tick, per table.
    pub batches_per_tick_max: usize,
    /// Age past which a finished webhook event is deleted.
    pub event_retention: Duration,
    /// Age past which a provider notification id is forgotten.
    pub notification_retention: Duration,
}

impl From<&crate::config::ServeConfig> for ReaperLimits {
    fn from(config: &crate::config::ServeConfig) -> Self {
        Self {
            interval: config.reaper_interval,
            batch_rows_max: config.reaper_batch_max,
            batches_per_tick_max: config.reaper_batches_per_tick_max,
            event_retention: config.event_retention,
            notification_retention: config.outcomes.provider_notification_retention,
        }
    }
}

/// Starts the reaper on a thread of its own.
pub fn start(limits: ReaperLimits, stores: ReapedStores) -> (Addr<Reaper>, Arbiter) {
    let arbiter = Arbiter::new();
    let addr = Reaper::start_in_arbiter(&arbiter.handle(), move |_| Reaper::new(stores, limits));
    (addr, arbiter)
}

/// The tables the reaper deletes from, each through its own handle.
#[derive(Clone)]
pub struct ReapedStores {
    /// Expired idempotency keys.
    pub keys: KeyStore,
    /// Events past their retention.
    pub events: EventStore,
    /// Endpoints deleted past the event retention.
    pub endpoints: EndpointStore,
    /// Provider notification ids past theirs.
    pub notifications: NotificationStore,
}

impl ReapedStores {
    /// The handles of `store`'s write pool.
    pub fn of(store: &Store) -> Self {
        Self {
            keys: store.keys(),
            events: store.events(),
            endpoints: store.endpoints(),
            notifications: store.notifications(),
        }
    }
}

/// Deletes expired key rows and old events on a timer; one tick at a time.
pub struct Reaper {
    stores: ReapedStores,
    limits: ReaperLimits,
    busy: bool,
    metrics: ReaperMetrics,
}

/// The reaper's metrics, registered once.
#[derive(Clone)]
struct ReaperMetrics {
    keys: metrics::Counter,
    events: metrics::Counter,
    notifications: metrics::Counter,
    expired_keys: metrics::Gauge,
    expired_keys_oldest_age: metrics::Gauge,
}

impl ReaperMetrics {
    fn new() -> Self {
        Self {
            keys: metrics::counter!("payrail_reaped_keys_total"),
            events: metrics::counter!("payrail_reaped_events_total"),
            notifications: metrics::counter!("payrail_reaped_provider_notifications_total"),
            expired_keys: metrics::gauge!("payrail_reaper_expired_keys"),
            expired_keys_oldest_age: metrics::gauge!(
                "payrail_reaper_expired_keys_oldest_age_seconds"
            ),
        }
    }
}

impl Reaper {
    /// A reaper that starts ticking once started.
    pub fn new(stores: ReapedStores, limits: ReaperLimits) -> Self {
        Self {
            stores,
            limits,
            busy: false,
            metrics: ReaperMetrics::new(),
        }
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            return;
        }
        self.busy = true;
        let ReapedStores {
            keys: keys_store,
            events: events_store,
            endpoints: endpoints_store,
            notifications: notifications_store,
        } = self.stores.clone();
        let limits = self.limits;
        let m = self.metrics.clone();
        let work = async move {
            let keys = reap(limits, "idempotency keys", |batch| {
                keys_store.delete_expired(batch)
            })
            .await;
            let before = event_id_floor(SystemTime::now() - limits.event_retention);
            let events = reap(limits, "webhook events", |batch| {
                events_store.delete_old(before, batch)
            })
            .await;
            let gone_before = chrono::Utc::now()
                - chrono::Duration::from_std(limits.event_retention)
                    .expect("the retention was checked at start-up");
            let endpoints = reap(limits, "deleted webhook endpoints", |batch| {
                endpoints_store.purge_deleted(gone_before, batch)
            })
            .await;
            let notifications = reap(limits, "provider notification ids", |batch| {
                notifications_store.purge(limits.notification_retention, batch)
            })
            .await;
            m.notifications.increment(notifications);
            if endpoints > 0 {
                tracing::info!(
                    endpoints,
                    "purged webhook endpoints deleted past the retention"
                );
            }
            match keys_store.expired_backlog(EXPIRED_COUNT_MAX).await {
                Ok((count, oldest)) => {
                    m.expired_keys.set(count as f64);
                    m.expired_keys_oldest_age.set(oldest);
                }
                Err(e) => tracing::warn!(error = %e, "reading the expired key backlog failed"),
            }
            (keys, events)
        };
        ctx.spawn(work.into_actor(self).map(|(keys, events), reaper, _| {
            reaper.busy = false;
            if keys > 0 || events > 0 {
                tracing::info!(
                    keys,
                    events,
                    "reaped expired idempotency keys and old events"
                );
            }
            reaper.metrics.keys.increment(keys);
            reaper.metrics.events.increment(events);
        }));
    }
}

/// Runs `delete` batch after batch until one comes back short or the tick's
/// budget is spent; a failure ends the tick (the next one tries again).
async fn reap<F, Fut>(limits: ReaperLimits, what: &str, delete: F) -> u64
where
    F: Fn(i64) -> Fut,
    Fut: Future<Output = Result<u64, StoreError>>,
{
    let mut deleted = 0u64;
    for _ in 0..limits.batches_per_tick_max {
        match delete(limits.batch_rows_max).await {
            Ok(n) => {
                assert!(
                    n <= limits.batch_rows_max as u64,
                    "a batch deletes at most its size"
                );
                deleted += n;
                if (n as i64) < limits.batch_rows_max {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, what, "reaper tick failed; will retry next tick");
                break;
            }
        }
    }
    deleted
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
