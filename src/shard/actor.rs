use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::oneshot;

use super::cache::{CachedAnswer, ReplayCache, Scope};
use super::Outlet;
use super::{verdict, ShardLimits, Verdict};
use crate::domain::{BodyDigest, Fingerprint};
use crate::store::{KeyStore, KeyWrite, OutboxHandoff, StoreError, WriteOutcome};

/// One attempt of `POST /transfers`, handed to its shard.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Submit {
    /// What this attempt would write if its key is new.
    pub write: KeyWrite,
    /// Digest of the attempt's body, cached with the answer it gets.
    pub body: BodyDigest,
    /// Where the verdict goes. The handler returns at once, so the mailbox
    /// drains while a flush is in flight.
    pub reply: oneshot::Sender<Verdict>,
}

/// A later attempt of a key whose write is queued or in flight.
struct Waiter {
    fingerprint: Fingerprint,
    reply: oneshot::Sender<Verdict>,
}

/// How much earlier than Postgres's expiry a cached answer stops being
/// served: room for the two clocks to run at slightly different rates.
const CACHE_EXPIRY_MARGIN: Duration = Duration::from_secs(1);

/// The shard's metrics, registered once: a per-call `metrics::gauge!` with
/// labels hashes its key and labels on every request.
struct ShardMetrics {
    queue_depth: metrics::Gauge,
    cache_entries: metrics::Gauge,
    batch_size: metrics::Histogram,
    flush_seconds: metrics::Histogram,
    cache_hits: metrics::Counter,
    cache_misses: metrics::Counter,
    flush_splits: metrics::Counter,
    flush_retries: metrics::Counter,
    flush_failures: metrics::Counter,
}

impl ShardMetrics {
    fn new(index: usize) -> Self {
        let shard = index.to_string();
        Self {
            queue_depth: metrics::gauge!("payrail_shard_queue_depth", "shard" => shard.clone()),
            cache_entries: metrics::gauge!("payrail_replay_cache_entries", "shard" => shard),
            batch_size: metrics::histogram!("payrail_shard_batch_size"),
            flush_seconds: metrics::histogram!("payrail_shard_flush_seconds"),
            cache_hits: metrics::counter!("payrail_replay_cache_hits_total"),
            cache_misses: metrics::counter!("payrail_replay_cache_misses_total"),
            flush_splits: metrics::counter!("payrail_shard_flush_splits_total"),
            flush_retries: metrics::counter!("payrail_shard_flush_lock_retries_total"),
            flush_failures: metrics::counter!("payrail_shard_flush_failures_total"),
        }
    }
}

/// A key-shard actor: owns its queue, its waiters and its replay cache;
/// nothing else touches them.
///
/// Invariant: a scope is in `waiting` exactly while one attempt of it is in
/// `queue`, in `split`, or in a flush in flight, so a key never has two
/// writes at once (and two flushes in flight never share a key).
pub struct Shard {
    index: usize,
    metrics: ShardMetrics,
    /// The flushes' statements, on this shard's own pool.
    keys: KeyStore,
    limits: ShardLimits,
    /// Where committed transfers go: rows a flush claimed to this process's
    /// relay; for rows written unclaimed, a wake-up of every process's.
    outlet: Arc<dyn Outlet>,
    /// Attempts of new keys waiting for the next flush.
    queue: VecDeque<Submit>,
    /// Parts of a failed flush, retried before anything new so that the
    /// failure lands on the attempt that caused it, each with the times its
    /// attempts were already retried after a lock timeout off their rows.
    split: VecDeque<(Vec<Submit>, u32)>,
    /// Keys being written, with the attempts that wait for their outcome.
    waiting: HashMap<Scope, Vec<Waiter>>,
    waiter_count: usize,
    /// Attempts in flushes now in flight.
    flushing: usize,
    /// Flushes in flight (at most `flushes_in_flight_max`).
    flushes: usize,
    /// A flush is still running its statements: the next one starts only
    /// once it has reached its COMMIT, so at most one flush uses Postgres's
    /// CPU while the previous one waits for its commit to be durable.
    executing: bool,
    /// Filled only here; HTTP workers read it too (`ShardRouter::cached`).
    cache: Arc<ReplayCache>,
}

impl Shard {
    /// A shard with nothing queued, the only writer of `cache`.
    pub fn new(
        index: usize,
        keys: KeyStore,
        limits: ShardLimits,
        cache: Arc<ReplayCache>,
        outlet: Arc<dyn Outlet>,
    ) -> Self {
        assert!(limits.batch_size_max > 0 && limits.flushes_in_flight_max > 0);
        assert!(limits.overlap_batch_min > 0);
        Self {
            index,
            metrics: ShardMetrics::new(index),
            keys,
            limits,
            outlet,
            queue: VecDeque::new(),
            split: VecDeque::new(),
            waiting: HashMap::new(),
            waiter_count: 0,
            flushing: 0,
            flushes: 0,
            executing: false,
            cache,
        }
    }

    fn held(&self) -> usize {
        self.queue.len()
            + self.split.iter().map(|(part, _)| part.len()).sum::<usize>()
            + self.waiter_count
            + self.flushing
    }

    fn report_depth(&self) {
        // The count is kept by hand beside the map it counts; summing the
        // map costs a walk, so only debug builds check it on every report.
        debug_assert_eq!(
            self.waiter_count,
            self.waiting.values().map(Vec::len).sum::<usize>(),
            "waiter_count counts the attempts in `waiting`"
        );
        self.metrics.queue_depth.set(self.held() as f64);
        self.metrics.cache_entries.set(self.cache.len() as f64);
    }

    /// Starts flushes while [`may_start_flush`] allows one. Attempts that
    /// arrive meanwhile form the next batch, so batches grow by themselves
    /// under load.
    fn flush_if_idle(&mut self, ctx: &mut Context<Self>) {
        loop {
            let ready = match self.split.front() {
                Some((part, _)) => part.len(),
                None => self.queue.len().min(self.limits.batch_size_max),
            };
            if !may_start_flush(&self.limits, self.executing, self.flushes, ready) {
                return;
            }
            let (batch, lock_retries) = match self.split.pop_front() {
                Some(part) => part,
                None => (self.queue.drain(..ready).collect(), 0),
            };
            self.start_flush(batch, lock_retries, ctx);
        }
    }

    fn start_flush(&mut self, batch: Vec<Submit>, lock_retries: u32, ctx: &mut Context<Self>) {
        let n = batch.len();
        assert!(n > 0 && n <= self.limits.batch_size_max);
        self.flushing += n;
        self.flushes += 1;
        self.executing = true;
        self.metrics.batch_size.record(n as f64);
        let (writes, replies): (Vec<KeyWrite>, Vec<_>) = batch
            .into_iter()
            .map(|s| (s.write, (s.reply, s.body)))
            .unzip();
        // Claim the rows for this process's relay when it has room for them.
        let handoff = match self.outlet.reserve(n) {
            Some(lease) => OutboxHandoff::Claimed { lease },
            None => OutboxHandoff::Unclaimed,
        };
        let (executed_tx, executed_rx) = oneshot::channel();
        let keys = self.keys.clone();
        let limits = self.limits.flush;
        let started = Instant::now();
        let flush = async move {
            let result = keys
                .write_keys(&writes, handoff, limits, move || {
                    let _ = executed_tx.send(());
                })
                .await;
            (writes, result)
        };
        // The next flush may start once this one's statements ran (or it
        // ended), overlapping its execution with this commit.
        ctx.spawn(executed_rx.into_actor(self).map(|_, shard, ctx| {
            shard.executing = false;
            shard.flush_if_idle(ctx);
        }));
        ctx.spawn(
            flush
                .into_actor(self)
                .map(move |(writes, result), shard, ctx| {
                    shard
                        .metrics
                        .flush_seconds
                        .record(started.elapsed().as_secs_f64());
                    shard.flushing -= n;
                    shard.flushes -= 1;
                    shard.answer_flush(writes, replies, result, handoff, started, lock_retries);
                    shard.report_depth();
                    shard.flush_if_idle(ctx);
                }),
        );
    }

    /// Answers every attempt of a finished flush and the attempts that waited
    /// on it, and hands the rows it claimed to the relay.
    fn answer_flush(
        &mut self,
        writes: Vec<KeyWrite>,
        replies: Vec<(oneshot::Sender<Verdict>, BodyDigest)>,
        result: Result<Vec<WriteOutcome>, StoreError>,
        handoff: OutboxHandoff,
        started: Instant,
        lock_retries: u32,
    ) {
        let reserved = match handoff {
            OutboxHandoff::Claimed { .. } => writes.len(),
            OutboxHandoff::Unclaimed => 0,
        };
        let outcomes = match result {
            Ok(outcomes) => outcomes,
            Err(e) => {
                self.outlet.release(reserved);
                self.flush_failed(writes, replies, e, lock_retries);
                return;
            }
        };
        assert_eq!(outcomes.len(), writes.len(), "one outcome per write");
        // Rows written unclaimed wait for a relay to be woken.
        let wake_relays =
            reserved == 0 && outcomes.iter().any(|o| matches!(o, WriteOutcome::Inserted));
        let mut claimed = Vec::new();
        for ((write, (reply, digest)), outcome) in writes.into_iter().zip(replies).zip(outcomes) {
            let scope = scope_of(&write);
            let fingerprint = write.fingerprint;
            // Measured from before the transaction began, so the entry ends
            // before the key expires by Postgres's clock.
            let until =
                |remaining: Duration| started + remaining.saturating_sub(CACHE_EXPIRY_MARGIN);
            let cached = match outcome {
                WriteOutcome::Inserted => {
                    let answer = write.answer();
                    let _ = reply.send(Verdict::Created(answer.clone()));
                    if reserved > 0 {
                        claimed.push(write.transfer);
                    }
                    Some((answer, until(self.limits.flush.key_retention)))
                }
                WriteOutcome::Existing(live) => {
                    let _ = reply.send(verdict(fingerprint, &live.answer));
                    Some((live.answer, until(live.remaining)))
                }
                WriteOutcome::Vanished => {
                    let _ = reply.send(Verdict::Unavailable);
                    None
                }
            };
            // The attempt's bytes carry the answer's fingerprint only if it
            // asked for the same thing.
            let cached = cached.map(|(answer, until)| CachedAnswer {
                body: (answer.fingerprint == fingerprint).then_some(digest),
                answer,
                until,
            });
            self.release(&scope, cached, Verdict::Unavailable);
        }
        assert!(
            claimed.len() <= reserved,
            "a flush claims only rows it reserved"
        );
        self.outlet.release(reserved - claimed.len());
        self.outlet.deliver(claimed, started);
        // Committed: a relay woken now finds the rows.
        if wake_relays {
            self.outlet.wake();
        }
    }

    /// A flush's transaction failed. When Postgres refused something about
    /// particular rows (a row lock held elsewhere, a value), the batch is
    /// split in two and each half retried, until the failure is down to the
    /// one attempt at fault: one attempt never fails the others. A lock
    /// timeout off the rows blames no attempt: the batch is retried whole
    /// (`lock_retries` times so far). A failure of Postgres as a whole fails
    /// the batch: every attempt gets 503.
    fn flush_failed(
        &mut self,
        writes: Vec<KeyWrite>,
        replies: Vec<(oneshot::Sender<Verdict>, BodyDigest)>,
        error: StoreError,
        lock_retries: u32,
    ) {
        let n = writes.len();
        let off_rows = error.is_lock_timeout_off_rows();
        if off_rows && lock_retries < self.limits.lock_retries_max {
            // No other writer holds these keys: the flush waited on a lock
            // of the table (or of its growth) past the lock timeout, which
            // says nothing about any attempt. Retried whole, up to
            // `lock_retries_max` times; then Postgres is as good as stalled
            // for these keys, which is a 503 below, not a 409 for any of them.
            tracing::debug!(shard = self.index, batch = n, error = %error, "flush waited past the lock timeout off its rows; retrying it");
            self.metrics.flush_retries.increment(1);
            self.split
                .push_front((resubmit(writes, replies), lock_retries + 1));
            return;
        }
        if n > 1 && error.is_row_specific() && !off_rows {
            tracing::debug!(shard = self.index, batch = n, error = %error, "flush refused; retrying it in halves");
            self.metrics.flush_splits.increment(1);
            let mut parts = resubmit(writes, replies);
            let back = parts.split_off(n / 2);
            // Front of the line, in order: keys keep their place in `waiting`.
            self.split.push_front((back, lock_retries));
            self.split.push_front((parts, lock_retries));
            return;
        }
        // A lock held elsewhere past the lock timeout: the key is being
        // written by another transaction right now.
        let verdict = if error.is_lock_timeout() && !off_rows {
            Verdict::InProgress
        } else {
            Verdict::Unavailable
        };
        tracing::warn!(shard = self.index, batch = n, error = %error, ?verdict, "flush failed");
        self.metrics.flush_failures.increment(1);
        for (write, (reply, _)) in writes.into_iter().zip(replies) {
            let _ = reply.send(verdict.clone());
            self.release(&scope_of(&write), None, verdict.clone());
        }
    }

    /// Ends a key's write: its waiters get their verdict from `answer` (or
    /// `failed` when the write failed), and a known answer is cached.
    fn release(&mut self, scope: &Scope, answer: Option<CachedAnswer>, failed: Verdict) {
        let waiters = self.waiting.remove(scope).unwrap_or_default();
        assert!(
            self.waiter_count >= waiters.len(),
            "waiter_count counts every waiter in `waiting`"
        );
        self.waiter_count -= waiters.len();
        for w in waiters {
            let v = answer
                .as_ref()
                .map_or_else(|| failed.clone(), |a| a.verdict(w.fingerprint));
            let _ = w.reply.send(v);
        }
        if let Some(a) = answer {
            self.cache.put(scope.clone(), a);
        }
    }
}

/// Whether a flush of `ready` attempts may start: attempts wait, no flush
/// is running its statements, fewer than `flushes_in_flight_max` are in
/// flight, and, when another flush is in flight (committing), the batch has
/// at least `overlap_batch_min` attempts (a full batch always may). Under
/// light load the few attempts waiting are better served by one flush once
/// that commit is done than by a second small flush that competes with it
/// for the same pages.
fn may_start_flush(limits: &ShardLimits, executing: bool, flushes: usize, ready: usize) -> bool {
    let overlap_min = limits.overlap_batch_min.min(limits.batch_size_max);
    ready > 0
        && !executing
        && flushes < limits.flushes_in_flight_max
        && (flushes == 0 || ready >= overlap_min)
}

/// A failed flush's attempts, put back together to be flushed again.
fn resubmit(
    writes: Vec<KeyWrite>,
    replies: Vec<(oneshot::Sender<Verdict>, BodyDigest)>,
) -> Vec<Submit> {
    writes
        .into_iter()
        .zip(replies)
        .map(|(write, (reply, body))| Submit { write, body, reply })
        .collect()
}

fn scope_of(write: &KeyWrite) -> Scope {
    (
        write.transfer.client_id,
        write.transfer.idempotency_key.clone(),
    )
}

impl Actor for Shard {
    type Context = Context<Self>;
}

impl Handler<Submit> for Shard {
    type Result = ();

    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) {
        let scope = scope_of(&msg.write);
        let fingerprint = msg.write.fingerprint;
        if self.held() >= self.limits.queue_len_max {
            let _ = msg.reply.send(Verdict::Overloaded);
            return;
        }
        // Coalesce: a write of this key is queued or in flight; wait for it
        // in memory, holding no connection and no lock.
        if let Some(waiters) = self.waiting.get_mut(&scope) {
            waiters.push(Waiter {
                fingerprint,
                reply: msg.reply,
            });
            self.waiter_count += 1;
            self.report_depth();
            return;
        }
        // The router looked before sending, but the key's flush may have
        // finished since.
        if let Some(cached) = self.cache.get(&scope, Instant::now()) {
            self.metrics.cache_hits.increment(1);
            let _ = msg.reply.send(cached.verdict(fingerprint));
            return;
        }
        self.metrics.cache_misses.increment(1);
        self.waiting.insert(scope, Vec::new());
        self.queue.push_back(msg);
        self.report_depth();
        self.flush_if_idle(ctx);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::FlushLimits;

    fn limits(batch_size_max: usize, overlap_batch_min: usize) -> ShardLimits {
        ShardLimits {
            batch_size_max,
            queue_len_max: 4096,
            cache_entries_max: 16,
            flushes_in_flight_max: 2,
            overlap_batch_min,
            lock_retries_max: 3,
            flush: FlushLimits {
                key_retention: Duration::from_secs(60),
                lock_timeout: Duration::from_millis(250),
            },
        }
    }

    #[test]
    fn an_idle_shard_flushes_any_batch_at_once() {
        let l = limits(256, 16);
        assert!(may_start_flush(&l, false, 0, 1));
        assert!(!may_start_flush(&l, false, 0, 0), "nothing to write");
    }

    #[test]
    fn a_small_batch_waits_for_the_commit_in_flight() {
        let l = limits(256, 16);
        assert!(!may_start_flush(&l, false, 1, 15));
        assert!(may_start_flush(&l, false, 1, 16));
    }

    #[test]
    fn no_flush_starts_while_one_runs_its_statements_or_at_the_cap() {
        let l = limits(256, 16);
        assert!(!may_start_flush(&l, true, 1, 256));
        assert!(!may_start_flush(&l, false, 2, 256));
    }

    #[test]
    fn a_full_batch_may_overlap_even_below_the_overlap_minimum() {
        let l = limits(8, 16);
        assert!(may_start_flush(&l, false, 1, 8));
        assert!(!may_start_flush(&l, false, 1, 7));
    }
}
