//! A bounded cache of authenticated API keys, so that a replay does not pay
//! a Postgres round-trip just to learn who is calling.
//!
//! Revocation stays immediate: `Store::revoke_api_key` notifies every
//! process and waits for each to confirm that it evicted the key. The cache
//! is trusted only while its revocation listener is connected (a process
//! that cannot hear revocations asks Postgres every time), it is cleared
//! whenever the listener (re)connects, and entries expire after a TTL in any
//! case. A lookup that raced a revocation cannot put the key back: every
//! eviction bumps a generation, and a key read from Postgres is cached only
//! if no eviction happened since the lookup began.
//!
//! Unknown keys are remembered too, briefly, so that a caller retrying a
//! wrong key does not cost a Postgres query each time.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::domain::{ApiKeyHash, ClientId};
use crate::store::Heard;

/// Keys known valid, with when Postgres confirmed them, and keys recently
/// found unknown.
pub struct AuthCache {
    entries: Mutex<LruCache<[u8; 32], (ClientId, Instant)>>,
    ttl: Duration,
    unknown: Mutex<LruCache<[u8; 32], Instant>>,
    unknown_ttl: Duration,
    /// The revocation listener is connected and LISTENing.
    listening: AtomicBool,
    /// Bumped, under the `entries` lock, by everything that evicts.
    generation: AtomicU64,
}

/// Where a lookup started: pass it back to [`AuthCache::put`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation(u64);

impl AuthCache {
    /// At most `capacity` keys, each trusted for `ttl` (zero disables it),
    /// and at most `unknown_capacity` unknown keys, each remembered for
    /// `unknown_ttl` (zero disables that).
    pub fn new(
        capacity: usize,
        ttl: Duration,
        unknown_capacity: usize,
        unknown_ttl: Duration,
    ) -> Self {
        let bound = |n: usize| NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN);
        Self {
            entries: Mutex::new(LruCache::new(bound(capacity))),
            ttl,
            unknown: Mutex::new(LruCache::new(bound(unknown_capacity))),
            unknown_ttl,
            listening: AtomicBool::new(false),
            generation: AtomicU64::new(0),
        }
    }

    /// Take this before asking Postgres about a key.
    pub fn generation(&self) -> Generation {
        Generation(self.generation.load(Ordering::Acquire))
    }

    /// True when Postgres said recently that no live key has this hash.
    pub fn is_unknown(&self, hash: &ApiKeyHash) -> bool {
        let mut unknown = crate::sync::lock(&self.unknown);
        match unknown.get(&hash.0) {
            Some(at) if at.elapsed() < self.unknown_ttl => true,
            Some(_) => {
                unknown.pop(&hash.0);
                false
            }
            None => false,
        }
    }

    /// Remembers that Postgres knows no live key with this hash.
    pub fn put_unknown(&self, hash: &ApiKeyHash) {
        if !self.unknown_ttl.is_zero() {
            crate::sync::lock(&self.unknown).put(hash.0, Instant::now());
        }
    }

    /// The client of a key confirmed less than `ttl` ago, while revocations
    /// can be heard.
    pub fn get(&self, hash: &ApiKeyHash) -> Option<ClientId> {
        if !self.listening.load(Ordering::Acquire) {
            return None;
        }
        let mut entries = self.lock();
        match entries.get(&hash.0) {
            Some((client, at)) if at.elapsed() < self.ttl => Some(*client),
            Some(_) => {
                entries.pop(&hash.0);
                None
            }
            None => None,
        }
    }

    /// Remembers a key that Postgres confirmed in a lookup that began at
    /// `since`, unless anything was evicted meanwhile: the confirmation may
    /// then predate a revocation whose eviction already ran.
    pub fn put(&self, hash: &ApiKeyHash, client: ClientId, since: Generation) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.lock();
        if self.generation.load(Ordering::Acquire) == since.0 {
            entries.put(hash.0, (client, Instant::now()));
        }
    }

    /// Applies what the revocation listener heard. Returns only once a
    /// revoked key is gone, because the listener confirms right after.
    pub fn on_revocation(&self, heard: Heard<'_>) {
        match heard {
            // Revocations may have been missed while nobody listened.
            Heard::Listening => {
                self.evict(|e| e.clear());
                self.listening.store(true, Ordering::Release);
            }
            Heard::Lost => {
                self.listening.store(false, Ordering::Release);
                self.evict(|e| e.clear());
            }
            Heard::Notification(hex_hash) => {
                match hex::decode(hex_hash)
                    .ok()
                    .and_then(|h| <[u8; 32]>::try_from(h).ok())
                {
                    Some(hash) => self.evict(|e| {
                        e.pop(&hash);
                    }),
                    None => self.evict(|e| e.clear()),
                }
            }
        }
    }

    /// Evicts under the lock and bumps the generation before releasing it,
    /// so a `put` either runs before (and is evicted) or sees the new
    /// generation (and caches nothing).
    fn evict(&self, f: impl FnOnce(&mut LruCache<[u8; 32], (ClientId, Instant)>)) {
        let mut entries = self.lock();
        f(&mut entries);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    fn lock(&self) -> MutexGuard<'_, LruCache<[u8; 32], (ClientId, Instant)>> {
        crate::sync::lock(&self.entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    const HASH: ApiKeyHash = ApiKeyHash([1; 32]);

    fn listening_cache(ttl: Duration) -> AuthCache {
        let cache = AuthCache::new(8, ttl, 8, Duration::from_secs(5));
        cache.on_revocation(Heard::Listening);
        cache
    }

    #[test]
    fn a_revocation_evicts_the_key() {
        let cache = listening_cache(Duration::from_secs(60));
        let client = ClientId(Uuid::nil());
        cache.put(&HASH, client, cache.generation());
        assert_eq!(cache.get(&HASH), Some(client));
        cache.on_revocation(Heard::Notification(&hex::encode(HASH.0)));
        assert_eq!(cache.get(&HASH), None);
    }

    #[test]
    fn nothing_is_trusted_while_revocations_cannot_be_heard() {
        let cache = AuthCache::new(8, Duration::from_secs(60), 8, Duration::ZERO);
        cache.put(&HASH, ClientId(Uuid::nil()), cache.generation());
        assert_eq!(cache.get(&HASH), None, "not listening yet");
        cache.on_revocation(Heard::Listening);
        cache.put(&HASH, ClientId(Uuid::nil()), cache.generation());
        cache.on_revocation(Heard::Lost);
        assert_eq!(cache.get(&HASH), None, "listener lost");
        cache.on_revocation(Heard::Listening);
        assert_eq!(
            cache.get(&HASH),
            None,
            "reconnecting clears what was cached"
        );
    }

    #[test]
    fn entries_expire_and_a_zero_ttl_disables_the_cache() {
        let cache = listening_cache(Duration::from_millis(1));
        cache.put(&HASH, ClientId(Uuid::nil()), cache.generation());
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(cache.get(&HASH), None);
        let off = listening_cache(Duration::ZERO);
        off.put(&HASH, ClientId(Uuid::nil()), off.generation());
        assert_eq!(off.get(&HASH), None);
    }

    #[test]
    fn a_lookup_that_raced_a_revocation_cannot_cache_the_key() {
        let cache = listening_cache(Duration::from_secs(60));
        // The lookup starts and reads the key as valid from Postgres...
        let since = cache.generation();
        // ...the revocation commits and its eviction runs (nothing cached yet)...
        cache.on_revocation(Heard::Notification(&hex::encode(HASH.0)));
        // ...then the lookup's answer arrives: it must not be trusted later.
        cache.put(&HASH, ClientId(Uuid::nil()), since);
        assert_eq!(cache.get(&HASH), None);
        // A lookup that began after the eviction caches as usual.
        cache.put(&HASH, ClientId(Uuid::nil()), cache.generation());
        assert!(cache.get(&HASH).is_some());
    }

    #[test]
    fn unknown_keys_are_remembered_briefly_and_boundedly() {
        let cache = AuthCache::new(8, Duration::from_secs(60), 2, Duration::from_millis(50));
        let other = |i: u8| ApiKeyHash([i; 32]);
        assert!(!cache.is_unknown(&HASH));
        cache.put_unknown(&HASH);
        assert!(cache.is_unknown(&HASH));
        cache.put_unknown(&other(2));
        cache.put_unknown(&other(3));
        assert!(!cache.is_unknown(&HASH), "bounded: the oldest went");
        std::thread::sleep(Duration::from_millis(60));
        assert!(!cache.is_unknown(&other(3)), "and only for a while");
    }
}
