//! Key-shard actors. Every attempt of one (client, key) goes to the same shard,
//! a single-threaded actor that serializes the key's attempts in memory and
//! writes new keys to Postgres in batches (group commit).

mod actor;
mod cache;
mod outlet;

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Addr, Arbiter};
use sha2::{Digest, Sha256};

use crate::domain::{BodyDigest, ClientId, Fingerprint, IdempotencyKey};
use crate::store::{FlushLimits, KeyWrite, Store, StoreError, StoredAnswer};

pub use actor::{Shard, Submit};
pub use cache::{CachedAnswer, ReplayCache, Scope};
pub use outlet::Outlet;

impl From<&crate::config::ServeConfig> for ShardLimits {
    fn from(config: &crate::config::ServeConfig) -> Self {
        Self {
            batch_size_max: config.shard_batch_max,
            queue_len_max: config.shard_queue,
            cache_entries_max: config.replay_cache,
            flushes_in_flight_max: config.shard_flushes,
            overlap_batch_min: config.shard_overlap_min,
            lock_retries_max: config.db_lock_retries,
            flush: crate::store::FlushLimits {
                key_retention: config.key_retention,
                lock_timeout: config.db_lock_timeout,
            },
        }
    }
}

/// Bounds of one shard, from `ServeConfig`.
#[derive(Debug, Clone, Copy)]
pub struct ShardLimits {
    /// Most key writes per flush.
    pub batch_size_max: usize,
    /// Most attempts held at once (queued for a flush or waiting on a key).
    pub queue_len_max: usize,
    /// Most answers in the replay cache.
    pub cache_entries_max: usize,
    /// Most flushes of one shard in flight at once; a new one starts only
    /// when the previous one has reached its COMMIT.
    pub flushes_in_flight_max: usize,
    /// Fewest attempts a flush needs to start while another one is in flight.
    pub overlap_batch_min: usize,
    /// Times a flush is retried whole after a lock timeout on a lock that
    /// is not a row's (see `StoreError::is_lock_timeout_off_rows`).
    pub lock_retries_max: u32,
    /// Bounds of each flush transaction.
    pub flush: FlushLimits,
}

/// The shard's answer to one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// This attempt created the key; the answer is now stored.
    Created(StoredAnswer),
    /// The key already had this answer for the same request.
    Replayed(StoredAnswer),
    /// The key already had an answer for a different request.
    KeyReused,
    /// The key's write did not finish within the coalesce timeout.
    InProgress,
    /// Postgres failed; nothing was stored for this attempt.
    Unavailable,
    /// The shard's queue is full; the attempt was shed.
    Overloaded,
    /// The client's settlement lags past `--outbox-lag-max`; no new key of
    /// it is taken.
    Lagging,
}

/// Routes attempts to their shard and waits for the verdict.
#[derive(Clone)]
pub struct ShardRouter {
    shards: Arc<[Addr<Shard>]>,
    /// Each shard's committed answers, in shard order.
    caches: Arc<[Arc<ReplayCache>]>,
    coalesce_timeout: Duration,
    /// Replays answered on the fast path, registered once (as the shards
    /// register theirs).
    cache_hits: metrics::Counter,
    /// Where committed transfers go; closed to new keys while settlement
    /// lags.
    outlet: Arc<dyn Outlet>,
    /// Attempts refused while it was closed.
    lag_refusals: metrics::Counter,
}

impl ShardRouter {
    /// Starts `count` shards, each on an `Arbiter` (thread) of its own with
    /// a write pool of its own (one connection per flush in flight, driven
    /// on that thread), and returns once those pools are open and their
    /// statements prepared; the caller keeps the arbiters and stops them at
    /// shutdown.
    pub async fn start(
        count: usize,
        store: &Store,
        limits: ShardLimits,
        coalesce_timeout: Duration,
        outlet: Arc<dyn Outlet>,
    ) -> Result<(Self, Vec<Arbiter>), StoreError> {
        assert!(count > 0, "at least one shard");
        let mut arbiters = Vec::with_capacity(count);
        let mut shards = Vec::with_capacity(count);
        let mut caches = Vec::with_capacity(count);
        let mut warming = Vec::with_capacity(count);
        for index in 0..count {
            let arbiter = Arbiter::new();
            let keys = store.with_own_pool(limits.flushes_in_flight_max)?.keys();
            let warming_keys = keys.clone();
            warming.push(crate::warm::on(
                arbiter.handle(),
                "a shard's Postgres connections",
                async move { warming_keys.warm().await },
            ));
            let cache = Arc::new(ReplayCache::new(limits.cache_entries_max));
            caches.push(cache.clone());
            let outlet = outlet.clone();
            shards.push(Shard::start_in_arbiter(&arbiter.handle(), move |ctx| {
                // A real bound: `try_send` fails once this many messages wait.
                ctx.set_mailbox_capacity(limits.queue_len_max);
                Shard::new(index, keys, limits, cache, outlet)
            }));
            arbiters.push(arbiter);
        }
        futures::future::join_all(warming).await;
        Ok((
            Self {
                shards: shards.into(),
                caches: caches.into(),
                cache_hits: metrics::counter!("payrail_replay_cache_hits_total"),
                coalesce_timeout,
                outlet,
                lag_refusals: metrics::counter!("payrail_transfers_refused_lagging_total"),
            },
            arbiters,
        ))
    }

    /// The committed answer of a key still in its shard's cache, read on the
    /// caller's thread; `None` means ask the shard with [`ShardRouter::submit`].
    ///
    /// This is the replay fast path: no hop to the shard's thread and back,
    /// and the caller need not build the transfer it would have created.
    /// It is safe without the shard's serialization because a cached answer
    /// is final: the shard caches only committed answers, and a key with a
    /// live cached answer is never written again.
    pub fn cached(&self, scope: &Scope) -> Option<CachedAnswer> {
        let index = shard_index(scope.0, &scope.1, self.shards.len());
        let cached = self.caches[index].get(scope, Instant::now())?;
        self.cache_hits.increment(1);
        Some(cached)
    }

    /// Hands an attempt to its shard and waits for the verdict, at most the
    /// coalesce timeout. While the client's settlement lags it answers
    /// [`Verdict::Lagging`] at once: the attempt may be a new key, and an
    /// attempt whose answer is no longer in memory is refused alike (its
    /// retry after the lag gets it).
    pub async fn submit(&self, write: KeyWrite, body: BodyDigest) -> Verdict {
        if self.outlet.lagging(write.transfer.client_id) {
            self.lag_refusals.increment(1);
            return Verdict::Lagging;
        }
        let index = shard_index(
            write.transfer.client_id,
            &write.transfer.idempotency_key,
            self.shards.len(),
        );
        let (reply, verdict) = tokio::sync::oneshot::channel();
        if let Err(e) = self.shards[index].try_send(Submit { write, body, reply }) {
            return match e {
                actix::dev::SendError::Full(_) => Verdict::Overloaded,
                actix::dev::SendError::Closed(_) => Verdict::Unavailable,
            };
        }
        match tokio::time::timeout(self.coalesce_timeout, verdict).await {
            Ok(Ok(v)) => v,
            // The shard dropped the reply: it stopped, so nothing is known stored.
            Ok(Err(_)) => Verdict::Unavailable,
            Err(_) => Verdict::InProgress,
        }
    }
}

/// What a key's stored answer means for an attempt with this fingerprint.
fn verdict(fingerprint: Fingerprint, stored: &StoredAnswer) -> Verdict {
    if stored.fingerprint == fingerprint {
        Verdict::Replayed(stored.clone())
    } else {
        Verdict::KeyReused
    }
}

/// A stable hash of (client, key), so the same key lands on the same shard in
/// every process and across restarts (not needed for correctness, which the
/// primary key guarantees, but it keeps a key's attempts in one queue).
fn shard_index(client_id: ClientId, key: &IdempotencyKey, shards: usize) -> usize {
    if shards == 1 {
        return 0;
    }
    let mut h = Sha256::new();
    h.update(client_id.0.as_bytes());
    h.update(key.as_str().as_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_le_bytes(first) % shards as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn a_key_always_maps_to_the_same_shard_and_keys_spread() {
        let client = ClientId(Uuid::from_u128(7));
        let mut seen = [0usize; 4];
        for i in 0..400 {
            let key = IdempotencyKey::parse(format!("key-{i}").as_bytes()).unwrap();
            let s = shard_index(client, &key, 4);
            assert_eq!(s, shard_index(client, &key, 4));
            seen[s] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
    }
}
