//! The one worker skeleton every queue runs on: the relay (provider calls)
//! and the webhook delivery worker are each a [`Worker`] with their own
//! [`Work`].
//!
//! What the skeleton does, the same for every queue:
//! - wakes on NOTIFY of the queue's channel, on rows handed over in memory
//!   ([`Deliver`]), on a timer when a rescheduled row falls due, and polls
//!   as a fallback;
//! - claims at most as many rows as it has free slots, runs at most
//!   `concurrency_max` of them at once, and never starts one later than
//!   `call_window` after its claim, so no takeover overlaps it: a row
//!   that missed its window goes back to the queue at once (nothing was
//!   sent for it), due again for any worker;
//! - serves the rows it holds round-robin across their groups (the
//!   relay's: clients), and tells each claim what every group holds, so
//!   that one group's burst neither delays another's rows in memory nor
//!   takes every slot: a group holding its share (the worker's slots) gets
//!   nothing more from a claim, and is claimed for again as soon as it
//!   drops below it. Rows handed over in memory count in their group but
//!   do not take the claims' room: they have their own bound, and a claim
//!   is what brings in the other groups' rows written to Postgres;
//! - settles outcomes in batches: while one settlement transaction runs, the
//!   outcomes that arrive wait for the next, so batches grow with load and
//!   add no latency when idle. A batch Postgres refuses for particular rows
//!   is settled row by row; a row refused even alone gets the queue's
//!   fallback outcome (counted against its budget). A batch holds one
//!   outcome per row: an outdated claim's outcome is dropped;
//! - drains on [`Drain`]: no new claims, rows claimed but not started go
//!   back to the queue, the work in flight finishes and is settled;
//! - reports the same metrics per queue, labelled `queue`.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::BoxFuture;
use tokio::sync::oneshot;

use super::pending::{GroupCounts, Pending};
use super::window::{SETTLE_RETRY_DELAY, SETTLE_TRIES_MAX};
use crate::store::{Listener, StoreError};

/// The queues, as the `queue` label of the workers' metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueName {
    /// Provider calls (the relay).
    Outbox,
    /// Webhook deliveries.
    Webhooks,
    /// Status lookups of `processing` transfers.
    Polls,
    /// Lookups of `succeeded` transfers watched for a return.
    Returns,
}

impl QueueName {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Outbox => "outbox",
            Self::Webhooks => "webhooks",
            Self::Polls => "polls",
            Self::Returns => "returns",
        }
    }
}

/// How often a worker reads its queue's backlog figures for `/metrics`.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// What one queue does with its rows; the skeleton does the rest.
pub trait Work: Unpin + 'static {
    /// A claimed row.
    type Row: Clone + Send + Unpin + 'static;
    /// A row's key in its table: one live claim per key.
    type Key: Copy + Ord + Debug + Send + Unpin + 'static;
    /// How working on one row ended.
    type Outcome: Clone + Debug + Send + Unpin + 'static;
    /// What a row is served fairly by within a worker (the relay's rows:
    /// their client); `()` for a queue served first come, first served.
    type Group: Copy + Eq + Hash + Debug + Send + Unpin + 'static;

    /// The queue, for metrics and logs.
    const QUEUE: QueueName;
    /// The channel NOTIFYed when rows fall due.
    const CHANNEL: &'static str;
    /// Claim again after every settlement, not only after a full claim or
    /// a wake: for a queue whose claims come back short while rows are
    /// still due (a fair queue's shares). A queue whose due rows mostly
    /// arrive in memory or by NOTIFY leaves it off, so that an idle claim
    /// does not scan the rows it already holds.
    const CLAIM_AFTER_SETTLING: bool;

    /// The row's key and claim number (its fencing token).
    fn claim_of(row: &Self::Row) -> (Self::Key, i32);
    /// The row's group.
    fn group_of(row: &Self::Row) -> Self::Group;
    /// Claims up to `limit` due rows; `holding` says what each group
    /// holds in this worker and how much one group may hold, for a queue
    /// that claims fairly by group.
    fn claim(
        &self,
        limit: usize,
        holding: Holding<Self::Group>,
    ) -> BoxFuture<'static, Result<Vec<Self::Row>, StoreError>>;
    /// Works on one row (a provider call, a delivery attempt).
    fn work(&self, row: Self::Row) -> BoxFuture<'static, Self::Outcome>;
    /// Records a batch in one transaction, each row fenced by its claim.
    /// (Shared, so that a retry of the batch or its row-by-row fallback
    /// copies nothing.)
    fn settle(
        &self,
        batch: Arc<[(Self::Row, Self::Outcome)]>,
    ) -> BoxFuture<'static, Result<(), StoreError>>;
    /// What is recorded for a row whose outcome Postgres refused to store.
    fn settle_failed(&self, row: &Self::Row, error: &StoreError) -> Self::Outcome;
    /// Gives rows claimed but never worked on back to the queue.
    fn release(&self, rows: Vec<Self::Row>) -> BoxFuture<'static, Result<(), StoreError>>;
    /// After this outcome, when its row is due again (if it is).
    fn due_again(outcome: &Self::Outcome) -> Option<Duration>;
    /// Reads the queue's backlog figures into `/metrics`.
    fn report(&self) -> BoxFuture<'static, ()>;
}

/// What a worker holds per group when it claims.
#[derive(Debug, Clone)]
pub struct Holding<G> {
    /// Most rows of one group this worker holds (waiting for a slot or in
    /// flight, handed over or claimed) past which a claim brings in no
    /// more of it: its slots.
    pub share: usize,
    /// The groups holding rows now (waiting for a slot or in flight), with
    /// how many.
    pub held: Vec<(G, usize)>,
}

/// Bounds of a worker.
#[derive(Debug, Clone, Copy)]
pub struct WorkerLimits {
    /// Rows worked on at once.
    pub concurrency_max: usize,
    /// Fallback poll interval.
    pub poll_interval: Duration,
    /// How long after its claim a row may still be started.
    pub call_window: Duration,
    /// Most outcomes settled in one transaction.
    pub settle_batch_max: usize,
}

/// Rows claimed elsewhere in this process (a flush), handed over.
pub struct Deliver<R> {
    /// The claimed rows.
    pub rows: Vec<R>,
    /// No later than Postgres's claim time.
    pub claimed_at: Instant,
}

impl<R: 'static> Message for Deliver<R> {
    type Result = ();
}

/// "Due rows may exist": sent by the LISTEN connection. Idempotent, so a
/// full mailbox can drop it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Wake;

/// Stop claiming, give back the rows claimed but not started, let the work
/// in flight finish and settle it; answers once nothing is held.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Drain;

/// Counts rows handed over in memory and not yet settled or dropped; shared
/// with whoever hands them over, which bounds it.
pub trait HeldCount: Send + Sync + 'static {
    /// `n` handed-over rows left this worker.
    fn release(&self, n: usize);
}

/// A worker's metrics, registered once with its queue's label.
#[derive(Clone)]
struct QueueMetrics {
    claim_size: metrics::Histogram,
    claims_expired: metrics::Counter,
    settle_batch_size: metrics::Histogram,
    settle_seconds: metrics::Histogram,
    settle_failures: metrics::Counter,
    held_rows: metrics::Gauge,
    handed_over: metrics::Counter,
}

impl QueueMetrics {
    fn new(queue: QueueName) -> Self {
        let q = queue.as_str();
        Self {
            claim_size: metrics::histogram!("payrail_queue_claim_size", "queue" => q),
            claims_expired: metrics::counter!("payrail_queue_claims_expired_total", "queue" => q),
            settle_batch_size: metrics::histogram!("payrail_queue_settle_batch_size", "queue" => q),
            settle_seconds: metrics::histogram!("payrail_queue_settle_seconds", "queue" => q),
            settle_failures: metrics::counter!("payrail_queue_settle_failures_total", "queue" => q),
            held_rows: metrics::gauge!("payrail_queue_held_rows", "queue" => q),
            handed_over: metrics::counter!("payrail_queue_handed_over_total", "queue" => q),
        }
    }
}

/// The three backlog gauges a queue's [`Work::report`] sets (its own
/// names, as `/metrics` has long shown them), registered once.
#[derive(Clone)]
pub struct BacklogGauges {
    waiting: metrics::Gauge,
    dead: metrics::Gauge,
    oldest_age_seconds: metrics::Gauge,
}

impl BacklogGauges {
    /// Registers the gauges of rows waiting, rows dead (or stuck) and the
    /// age in seconds of the oldest waiting row.
    pub fn new(
        waiting: &'static str,
        dead: &'static str,
        oldest_age_seconds: &'static str,
    ) -> Self {
        Self {
            waiting: metrics::gauge!(waiting),
            dead: metrics::gauge!(dead),
            oldest_age_seconds: metrics::gauge!(oldest_age_seconds),
        }
    }

    /// Sets all three.
    pub fn set(&self, waiting: i64, dead: i64, oldest_age_seconds: f64) {
        self.waiting.set(waiting as f64);
        self.dead.set(dead as f64);
        self.oldest_age_seconds.set(oldest_age_seconds);
    }
}

/// A row this worker holds, and where the claim came from.
struct Held<R> {
    row: R,
    claimed_at: Instant,
    /// Counted in the hand-over count until settled or dropped.
    handed_over: bool,
}

/// A queue's worker: an actor on a thread of its own.
pub struct Worker<W: Work> {
    work: Arc<W>,
    /// Its queue's channel, on a connection of its own.
    listener: Listener,
    limits: WorkerLimits,
    metrics: QueueMetrics,
    handed_over: Option<Arc<dyn HeldCount>>,
    /// Rows waiting for a slot, served round-robin per group.
    pending: Pending<W::Group, Held<W::Row>>,
    in_flight: usize,
    /// Rows waiting for a slot or in flight, per group, handed over or
    /// claimed: each group's share is counted on them.
    in_memory: GroupCounts<W::Group>,
    /// Of those, the rows handed over: not counted against the claims'
    /// room.
    handed_over_active: usize,
    /// Groups the last claim left at their share: as soon as one of them
    /// drops below it, claim again (its rows may be waiting in Postgres).
    at_share: HashSet<W::Group>,
    claiming: bool,
    /// Rows are probably due in Postgres: claim as soon as there is room.
    more_due: bool,
    /// The last claim came back with fewer rows than it had room for.
    last_claim_short: bool,
    /// Outcomes waiting for the next settlement batch.
    outcomes: Vec<(Held<W::Row>, W::Outcome)>,
    settling: bool,
    /// When a timer will next claim rows whose retry falls due.
    wake_at: Option<Instant>,
    draining: bool,
    /// Give-backs of unstarted rows in flight.
    releasing: usize,
    drained: Vec<oneshot::Sender<()>>,
}

impl<W: Work> Worker<W> {
    /// A worker that starts listening and polling once started;
    /// `handed_over` counts the rows [`Deliver`]ed to it.
    pub fn new(
        work: W,
        listener: Listener,
        limits: WorkerLimits,
        handed_over: Option<Arc<dyn HeldCount>>,
    ) -> Self {
        assert!(limits.concurrency_max > 0 && limits.settle_batch_max > 0);
        assert!(!limits.call_window.is_zero(), "a claim leaves time to work");
        Self {
            work: Arc::new(work),
            listener,
            limits,
            metrics: QueueMetrics::new(W::QUEUE),
            handed_over,
            pending: Pending::default(),
            in_flight: 0,
            in_memory: GroupCounts::default(),
            handed_over_active: 0,
            at_share: HashSet::new(),
            claiming: false,
            more_due: true,
            last_claim_short: false,
            outcomes: Vec::new(),
            settling: false,
            wake_at: None,
            draining: false,
            releasing: 0,
            drained: Vec::new(),
        }
    }

    fn queue(&self) -> &'static str {
        W::QUEUE.as_str()
    }

    /// Claims due rows, up to the free slots.
    fn claim(&mut self, ctx: &mut Context<Self>) {
        if self.draining {
            return;
        }
        let room = self.room();
        if self.claiming || room == 0 {
            self.more_due = true;
            return;
        }
        self.claiming = true;
        self.more_due = false;
        let claimed_at = Instant::now();
        let share = self.limits.concurrency_max;
        let holding = Holding {
            share,
            held: self.in_memory.all(),
        };
        let held_before: HashMap<W::Group, usize> = holding.held.iter().copied().collect();
        let claim = self.work.claim(room, holding);
        ctx.spawn(claim.into_actor(self).map(move |claimed, w, ctx| {
            w.claiming = false;
            match claimed {
                Ok(rows) => {
                    assert!(rows.len() <= room, "a claim never returns more than asked");
                    w.metrics.claim_size.record(rows.len() as f64);
                    // A full claim means more rows are probably due.
                    if rows.len() == room {
                        w.more_due = true;
                    }
                    w.last_claim_short = rows.len() < room;
                    let mut got: HashMap<W::Group, usize> = HashMap::new();
                    for row in rows {
                        let group = W::group_of(&row);
                        let held = Held {
                            row,
                            claimed_at,
                            handed_over: false,
                        };
                        *got.entry(group).or_insert(0) += 1;
                        w.in_memory.add(group);
                        w.pending.push(group, held);
                    }
                    w.at_share = at_share(&held_before, &got, share);
                }
                Err(e) => {
                    tracing::warn!(queue = w.queue(), error = %e, "claim failed; retrying on the next wake")
                }
            }
            w.pump(ctx);
        }));
    }

    /// Free slots for claimed rows: the slots less the claimed rows
    /// waiting or in flight. Rows handed over in memory are bounded by
    /// whoever hands them over; were they counted here, a burst of one
    /// client's handed-over rows would leave no room to claim another
    /// client's rows written to Postgres, which would wait for the burst.
    fn room(&self) -> usize {
        let active = self.in_memory.total();
        assert_eq!(
            active,
            self.in_flight + self.pending.len(),
            "every row waiting or in flight is counted in its group"
        );
        assert!(active >= self.handed_over_active);
        self.limits
            .concurrency_max
            .saturating_sub(active - self.handed_over_active)
    }

    /// A row of `group` is no longer waiting or in flight.
    fn left(&mut self, group: W::Group) {
        self.in_memory.remove(group);
        if self.at_share.remove(&group) {
            // Below its share now: its rows waiting in Postgres, if any,
            // may be claimed.
            self.more_due = true;
        }
    }

    /// Starts work on pending rows while slots are free; claims more when
    /// rows are probably due and room is left.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.draining {
            self.release_pending(ctx);
            self.check_drained();
            return;
        }
        let mut late = Vec::new();
        while self.in_flight < self.limits.concurrency_max {
            let Some(held) = self.pending.pop() else {
                break;
            };
            if held.claimed_at.elapsed() >= self.limits.call_window {
                // Too late to finish within the lease, and nothing was sent
                // for it: back to the queue at once, due for any worker
                // (and counted as waiting again), instead of sitting out
                // its lease and coming back ambiguous.
                late.push(held);
                continue;
            }
            self.start(held, ctx);
        }
        if !late.is_empty() {
            self.metrics.claims_expired.increment(late.len() as u64);
            tracing::warn!(
                queue = self.queue(),
                rows = late.len(),
                "claims too old to start; given back to the queue"
            );
            self.give_back(late, ctx);
        }
        if self.more_due {
            self.claim(ctx);
        }
    }

    /// Works on one row, as a task of its own on this worker's thread; its
    /// outcome comes back as [`Worked`] and joins the next settlement batch.
    ///
    /// Not `ctx.spawn`: an actor's context polls every future spawned on it
    /// whenever any of them wakes, so with `concurrency_max` calls in flight
    /// each answer would poll them all. A task is polled only when it woke.
    fn start(&mut self, held: Held<W::Row>, ctx: &mut Context<Self>) {
        self.in_flight += 1;
        assert!(self.in_flight <= self.limits.concurrency_max);
        let work = self.work.work(held.row.clone());
        let me = ctx.address();
        actix::spawn(async move {
            let outcome = work.await;
            // Past the mailbox's capacity: an outcome must not be lost to a
            // full mailbox. If the worker is gone, the row's lease returns it.
            me.do_send(Worked { held, outcome });
        });
    }

    /// Settles the waiting outcomes in one transaction, unless one runs.
    fn settle(&mut self, ctx: &mut Context<Self>) {
        if self.settling || self.outcomes.is_empty() {
            return;
        }
        let n = self.outcomes.len().min(self.limits.settle_batch_max);
        let mut batch: Vec<(Held<W::Row>, W::Outcome)> = self.outcomes.drain(..n).collect();
        // A row held twice (its lease ran out and this worker claimed it
        // again) has one live claim: the latest. The older outcome would be
        // fenced out anyway; it never shares a batch with the live one.
        batch.sort_by_key(|(h, _)| {
            let (key, claim) = W::claim_of(&h.row);
            (key, std::cmp::Reverse(claim))
        });
        let mut last = None;
        let mut outdated = 0;
        batch.retain(|(held, _)| {
            let (key, _) = W::claim_of(&held.row);
            let live = last != Some(key);
            last = Some(key);
            if !live {
                tracing::info!(
                    queue = W::QUEUE.as_str(),
                    "outcome of an outdated claim dropped"
                );
                outdated += usize::from(held.handed_over);
            }
            live
        });
        self.release_handed_over(outdated);
        self.settling = true;
        self.metrics.settle_batch_size.record(batch.len() as f64);
        // What is needed once the batch is settled, so that the rows
        // themselves move into the settlement uncopied.
        let handed_over = batch.iter().filter(|(h, _)| h.handed_over).count();
        let next_due = batch.iter().filter_map(|(_, o)| W::due_again(o)).min();
        let rows: Arc<[(W::Row, W::Outcome)]> =
            batch.into_iter().map(|(h, o)| (h.row, o)).collect();
        let started = Instant::now();
        let work = self.work.clone();
        let failures = self.metrics.settle_failures.clone();
        let settled = async move { settle_with_fallback(work.as_ref(), rows, &failures).await };
        ctx.spawn(settled.into_actor(self).map(move |(), w, ctx| {
            w.metrics
                .settle_seconds
                .record(started.elapsed().as_secs_f64());
            w.settling = false;
            w.release_handed_over(handed_over);
            if let Some(due) = next_due {
                w.wake_after(due, ctx);
            }
            if W::CLAIM_AFTER_SETTLING {
                w.more_due = true;
            }
            w.settle(ctx);
            w.pump(ctx);
            w.check_drained();
        }));
    }

    /// A row that never started leaves this worker's memory.
    fn forget(&mut self, held: &Held<W::Row>) {
        if held.handed_over {
            self.handed_over_active -= 1;
            self.release_handed_over(1);
        }
        self.left(W::group_of(&held.row));
    }

    /// `n` handed-over rows left this worker's memory.
    fn release_handed_over(&self, n: usize) {
        if n > 0 {
            let count = self
                .handed_over
                .as_ref()
                .expect("rows are handed over only where counted");
            count.release(n);
        }
    }

    /// While draining: rows claimed but never started go back to the queue
    /// at once, without waiting for their leases.
    fn release_pending(&mut self, ctx: &mut Context<Self>) {
        if self.pending.is_empty() {
            return;
        }
        let rows = self.pending.drain();
        self.give_back(rows, ctx);
    }

    /// Gives rows claimed and never started back to the queue: due at
    /// once, not charged to their budget, not ambiguous.
    fn give_back(&mut self, rows: Vec<Held<W::Row>>, ctx: &mut Context<Self>) {
        for held in &rows {
            self.forget(held);
        }
        let release = self.work.release(rows.into_iter().map(|h| h.row).collect());
        self.releasing += 1;
        ctx.spawn(release.into_actor(self).map(|released, w, _| {
            if let Err(e) = released {
                tracing::warn!(queue = w.queue(), error = %e, "giving back unstarted rows failed; their leases will expire");
            }
            w.releasing -= 1;
            w.check_drained();
        }));
    }

    /// Answers the drain's waiters once nothing is held any more. A claim
    /// still running holds what it will return: its rows are given back
    /// when it ends, and only then is the worker drained.
    fn check_drained(&mut self) {
        let idle = self.in_flight == 0
            && self.outcomes.is_empty()
            && !self.settling
            && !self.claiming
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
        ctx.run_later(delay, |w, ctx| {
            w.wake_at = None;
            w.claim(ctx);
        });
    }

    fn report(&self, ctx: &mut Context<Self>) {
        self.metrics
            .held_rows
            .set((self.pending.len() + self.in_flight + self.outcomes.len()) as f64);
        ctx.spawn(self.work.report().into_actor(self));
    }
}

/// The groups a claim may have left rows of in Postgres: those it could
/// give nothing (at their share when it ran: whether they have rows due is
/// unknown) and those it gave all of their room (they may have more). A
/// group that got less than its room has nothing more due, and is not
/// claimed for again until a wake or the poll: a client at its share with
/// everything handed over in memory costs no claim per row.
fn at_share<G: Copy + Eq + Hash>(
    held_before: &HashMap<G, usize>,
    got: &HashMap<G, usize>,
    share: usize,
) -> HashSet<G> {
    let groups: HashSet<G> = held_before.keys().chain(got.keys()).copied().collect();
    groups
        .into_iter()
        .filter(|g| {
            let room = share.saturating_sub(held_before.get(g).copied().unwrap_or(0));
            let got = got.get(g).copied().unwrap_or(0);
            assert!(got <= room, "a claim gives a group at most its room");
            room == 0 || got == room
        })
        .collect()
}

/// Settles a batch in one transaction; when Postgres refuses something
/// about particular rows, each row alone, so one bad row fails no other; a
/// row refused even alone gets the queue's fallback outcome. When Postgres
/// fails as a whole past the tries, the rows are left to their leases.
async fn settle_with_fallback<W: Work>(
    work: &W,
    batch: Arc<[(W::Row, W::Outcome)]>,
    failures: &metrics::Counter,
) {
    let queue = W::QUEUE.as_str();
    for attempt in 1..=SETTLE_TRIES_MAX {
        match work.settle(batch.clone()).await {
            Ok(()) => return,
            Err(e) if e.is_row_specific() => {
                tracing::warn!(queue, batch = batch.len(), error = %e, "settlement batch refused; settling each row alone");
                break;
            }
            Err(e) if attempt < SETTLE_TRIES_MAX => {
                tracing::debug!(queue, error = %e, "settling failed; trying again");
                tokio::time::sleep(SETTLE_RETRY_DELAY).await;
            }
            Err(e) => {
                tracing::warn!(queue, batch = batch.len(), error = %e, "settling failed; the leases will expire");
                return;
            }
        }
    }
    for (row, outcome) in batch.iter() {
        if let Err(e) = work
            .settle(Arc::from([(row.clone(), outcome.clone())]))
            .await
        {
            failures.increment(1);
            let fallback = work.settle_failed(row, &e);
            tracing::warn!(queue, error = %e, ?fallback, "settlement refused");
            if let Err(e) = work.settle(Arc::from([(row.clone(), fallback)])).await {
                tracing::warn!(queue, error = %e, "recording the settlement failure failed; the lease will expire");
            }
        }
    }
}

impl<W: Work> Actor for Worker<W> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(64);
        self.claim(ctx);
        ctx.run_interval(self.limits.poll_interval, |w, ctx| w.claim(ctx));
        self.report(ctx);
        ctx.run_interval(REPORT_INTERVAL, |w, ctx| w.report(ctx));
        // LISTEN on a connection of its own; reconnect whenever it breaks
        // (a Postgres restart, say). Polling covers the gaps.
        let me = ctx.address();
        let listen = self
            .listener
            .clone()
            .listen_forever(W::CHANNEL, None, move |_| {
                let _ = me.try_send(Wake);
            });
        ctx.spawn(listen.into_actor(self));
    }
}

impl<W: Work> Handler<Wake> for Worker<W> {
    type Result = ();

    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        // A queue that claims after every settlement, whose last claim came
        // back short while work is in flight, is probably held to its
        // groups' shares: its next settlement claims again, the poll in any
        // case. A claim per notification (one per settlement of the relay)
        // would walk the due backlog of a full endpoint each time, to find
        // nothing.
        if W::CLAIM_AFTER_SETTLING && self.last_claim_short && self.in_flight > 0 {
            return;
        }
        self.claim(ctx);
    }
}

/// One row's work is done: its outcome, for the next settlement batch.
struct Worked<R, O> {
    held: Held<R>,
    outcome: O,
}

impl<R: 'static, O: 'static> Message for Worked<R, O> {
    type Result = ();
}

impl<W: Work> Handler<Worked<W::Row, W::Outcome>> for Worker<W> {
    type Result = ();

    fn handle(&mut self, msg: Worked<W::Row, W::Outcome>, ctx: &mut Context<Self>) {
        assert!(self.in_flight > 0, "an outcome answers a row in flight");
        self.in_flight -= 1;
        if msg.held.handed_over {
            self.handed_over_active -= 1;
        }
        self.left(W::group_of(&msg.held.row));
        self.outcomes.push((msg.held, msg.outcome));
        self.settle(ctx);
        self.pump(ctx);
    }
}

impl<W: Work> Handler<Deliver<W::Row>> for Worker<W> {
    type Result = ();

    fn handle(&mut self, msg: Deliver<W::Row>, ctx: &mut Context<Self>) {
        assert!(
            self.handed_over.is_some(),
            "rows are handed over only where counted"
        );
        self.metrics.handed_over.increment(msg.rows.len() as u64);
        self.handed_over_active += msg.rows.len();
        for row in msg.rows {
            let group = W::group_of(&row);
            let held = Held {
                row,
                claimed_at: msg.claimed_at,
                handed_over: true,
            };
            self.in_memory.add(group);
            self.pending.push(group, held);
        }
        // While draining, pump gives them straight back.
        self.pump(ctx);
    }
}

impl<W: Work> Handler<Drain> for Worker<W> {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Drain, ctx: &mut Context<Self>) -> Self::Result {
        tracing::info!(
            queue = self.queue(),
            in_flight = self.in_flight,
            unsettled = self.outcomes.len(),
            "draining: no new claims; work in flight finishes"
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A queue whose one claim takes a while and returns one row, and
    /// which records what it is given back.
    struct SlowClaim {
        released: Arc<Mutex<Vec<u32>>>,
    }

    impl Work for SlowClaim {
        type Row = u32;
        type Key = u32;
        type Outcome = ();
        type Group = ();
        const QUEUE: QueueName = QueueName::Polls;
        const CHANNEL: &'static str = "payrail_test_slow_claim";
        const CLAIM_AFTER_SETTLING: bool = false;

        fn claim_of(row: &u32) -> (u32, i32) {
            (*row, 1)
        }
        fn group_of(_row: &u32) {}
        fn claim(
            &self,
            _limit: usize,
            _holding: Holding<()>,
        ) -> BoxFuture<'static, Result<Vec<u32>, StoreError>> {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok(vec![7])
            })
        }
        fn work(&self, _row: u32) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }
        fn settle(&self, _batch: Arc<[(u32, ())]>) -> BoxFuture<'static, Result<(), StoreError>> {
            Box::pin(async { Ok(()) })
        }
        fn settle_failed(&self, _row: &u32, _error: &StoreError) {}
        fn release(&self, rows: Vec<u32>) -> BoxFuture<'static, Result<(), StoreError>> {
            let released = self.released.clone();
            Box::pin(async move {
                crate::sync::lock(&released).extend(rows);
                Ok(())
            })
        }
        fn due_again(_outcome: &()) -> Option<Duration> {
            None
        }
        fn report(&self) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }
    }

    #[test]
    fn a_claim_is_repeated_for_groups_it_could_not_serve_in_full() {
        let held = HashMap::from([('a', 4), ('b', 2), ('c', 1)]);
        let got = HashMap::from([('b', 2), ('c', 1), ('d', 4)]);
        let mut again: Vec<char> = at_share(&held, &got, 4).into_iter().collect();
        again.sort();
        // a: at its share; b: got all its room; c: got less than its room
        // (nothing more due); d: new, got its whole share.
        assert_eq!(again, ['a', 'b', 'd']);
    }

    #[actix::test]
    async fn a_drain_waits_for_the_claim_in_flight_and_gives_its_rows_back() {
        // No Postgres listens here: the listener retries in the background.
        let config = crate::cli::serve_config(["--database-url", "postgres://x@127.0.0.1:1/none"])
            .expect("valid flags");
        let listener = crate::store::Store::connect(&config.database)
            .expect("a lazy pool")
            .listener();
        let released = Arc::new(Mutex::new(Vec::new()));
        let limits = WorkerLimits {
            concurrency_max: 4,
            poll_interval: Duration::from_secs(60),
            call_window: Duration::from_secs(10),
            settle_batch_max: 4,
        };
        let work = SlowClaim {
            released: released.clone(),
        };
        let worker = Worker::new(work, listener, limits, None).start();
        // The first claim starts with the worker; drain while it runs.
        tokio::time::sleep(Duration::from_millis(50)).await;
        worker.send(Drain).await.expect("the worker answers");
        assert_eq!(
            *crate::sync::lock(&released),
            [7],
            "the drain answered only after the claimed row went back"
        );
    }
}
