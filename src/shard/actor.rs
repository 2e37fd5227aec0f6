use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use tokio::sync::oneshot;

use super::cache::{CachedAnswer, ReplayCache, Scope};
use super::{verdict, ShardLimits, Verdict};
use crate::domain::{now_micros, BodyDigest, Fingerprint};
use crate::store::{KeyWrite, Store, StoreError, WriteOutcome};

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

/// A key-shard actor: owns its queue, its waiters and its replay cache;
/// nothing else touches them.
///
/// Invariant: a scope is in `waiting` exactly while one attempt of it is in
/// `queue` or in the flush in flight, so a key never has two writes at once.
pub struct Shard {
    index: usize,
    label: String,
    store: Store,
    limits: ShardLimits,
    /// Attempts of new keys waiting for the next flush.
    queue: VecDeque<Submit>,
    /// Keys being written, with the attempts that wait for their outcome.
    waiting: HashMap<Scope, Vec<Waiter>>,
    waiter_count: usize,
    /// Attempts in the flush now in flight (0 when none is).
    flushing: usize,
    /// Filled only here; HTTP workers read it too (`ShardRouter::cached`).
    cache: Arc<ReplayCache>,
}

impl Shard {
    /// A shard with nothing queued, the only writer of `cache`.
    pub fn new(index: usize, store: Store, limits: ShardLimits, cache: Arc<ReplayCache>) -> Self {
        Self {
            index,
            label: index.to_string(),
            store,
            limits,
            queue: VecDeque::new(),
            waiting: HashMap::new(),
            waiter_count: 0,
            flushing: 0,
            cache,
        }
    }

    fn held(&self) -> usize {
        self.queue.len() + self.waiter_count + self.flushing
    }

    fn report_depth(&self) {
        metrics::gauge!("payrail_shard_queue_depth", "shard" => self.label.clone())
            .set(self.held() as f64);
        metrics::gauge!("payrail_replay_cache_entries", "shard" => self.label.clone())
            .set(self.cache.len() as f64);
    }

    /// Starts a flush of up to `batch_size_max` queued attempts unless one is
    /// in flight: attempts that arrive meanwhile form the next batch.
    fn flush_if_idle(&mut self, ctx: &mut Context<Self>) {
        if self.flushing > 0 || self.queue.is_empty() {
            return;
        }
        let n = self.queue.len().min(self.limits.batch_size_max);
        let (writes, replies): (Vec<KeyWrite>, Vec<_>) = self
            .queue
            .drain(..n)
            .map(|s| (s.write, (s.reply, s.body)))
            .unzip();
        self.flushing = n;
        metrics::histogram!("payrail_shard_batch_size").record(n as f64);
        let store = self.store.clone();
        let started = Instant::now();
        let flush = async move {
            let result = store.write_keys(&writes).await;
            (writes, result)
        };
        ctx.spawn(
            flush
                .into_actor(self)
                .map(move |(writes, result), shard, ctx| {
                    metrics::histogram!("payrail_shard_flush_seconds")
                        .record(started.elapsed().as_secs_f64());
                    shard.flushing = 0;
                    shard.settle(writes, replies, result);
                    shard.report_depth();
                    shard.flush_if_idle(ctx);
                }),
        );
    }

    /// Answers every attempt of a finished flush and the attempts that waited on it.
    fn settle(
        &mut self,
        writes: Vec<KeyWrite>,
        replies: Vec<(oneshot::Sender<Verdict>, BodyDigest)>,
        result: Result<Vec<WriteOutcome>, StoreError>,
    ) {
        let outcomes = match result {
            Ok(outcomes) => outcomes,
            Err(e) => {
                tracing::warn!(shard = self.index, batch = writes.len(), error = %e, "flush failed; answering 503");
                metrics::counter!("payrail_shard_flush_failures_total").increment(1);
                for (write, (reply, _)) in writes.into_iter().zip(replies) {
                    let _ = reply.send(Verdict::Unavailable);
                    self.release(&scope_of(&write), None);
                }
                return;
            }
        };
        debug_assert_eq!(outcomes.len(), writes.len());
        for ((write, (reply, digest)), outcome) in writes.into_iter().zip(replies).zip(outcomes) {
            let scope = scope_of(&write);
            let fingerprint = write.answer.fingerprint;
            let answer = match outcome {
                WriteOutcome::Inserted => {
                    let _ = reply.send(Verdict::Created(write.answer.clone()));
                    Some(write.answer)
                }
                WriteOutcome::Existing(stored) => {
                    let _ = reply.send(verdict(fingerprint, &stored));
                    Some(stored)
                }
                WriteOutcome::Vanished => {
                    let _ = reply.send(Verdict::Unavailable);
                    None
                }
            };
            // The attempt's bytes carry the answer's fingerprint only if it
            // asked for the same thing.
            let cached = answer.map(|answer| CachedAnswer {
                body: (answer.fingerprint == fingerprint).then_some(digest),
                answer,
            });
            self.release(&scope, cached);
        }
    }

    /// Ends a key's write: its waiters get their verdict from `answer` (or
    /// 503 when the write failed), and a known answer is cached.
    fn release(&mut self, scope: &Scope, answer: Option<CachedAnswer>) {
        let waiters = self.waiting.remove(scope).unwrap_or_default();
        self.waiter_count -= waiters.len();
        for w in waiters {
            let v = answer
                .as_ref()
                .map_or(Verdict::Unavailable, |a| a.verdict(w.fingerprint));
            let _ = w.reply.send(v);
        }
        if let Some(a) = answer {
            self.cache.put(scope.clone(), a);
        }
    }
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
        let fingerprint = msg.write.answer.fingerprint;
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
        if let Some(cached) = self.cache.get(&scope, now_micros()) {
            metrics::counter!("payrail_replay_cache_hits_total").increment(1);
            let _ = msg.reply.send(cached.verdict(fingerprint));
            return;
        }
        metrics::counter!("payrail_replay_cache_misses_total").increment(1);
        self.waiting.insert(scope, Vec::new());
        self.queue.push_back(msg);
        self.report_depth();
        self.flush_if_idle(ctx);
    }
}
