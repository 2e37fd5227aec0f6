//! A bounded cache of authenticated API keys, so that a replay does not pay
//! a Postgres round-trip just to learn who is calling.
//!
//! Revocation stays immediate: `Store::revoke_api_key` notifies every
//! process and waits for each to confirm that it evicted the key. The cache
//! is trusted only while its revocation listener is connected (a process
//! that cannot hear revocations asks Postgres every time), it is cleared
//! whenever the listener (re)connects, and entries expire after a TTL in any
//! case.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::domain::{ApiKeyHash, ClientId};
use crate::store::Heard;

/// Keys known valid, with when Postgres confirmed them.
pub struct AuthCache {
    entries: Mutex<LruCache<[u8; 32], (ClientId, Instant)>>,
    ttl: Duration,
    /// The revocation listener is connected and LISTENing.
    listening: AtomicBool,
}

impl AuthCache {
    /// At most `capacity` keys, each trusted for `ttl` (zero disables it).
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Self {
            entries: Mutex::new(LruCache::new(capacity)),
            ttl,
            listening: AtomicBool::new(false),
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

    /// Remembers a key that Postgres just confirmed.
    pub fn put(&self, hash: &ApiKeyHash, client: ClientId) {
        if !self.ttl.is_zero() {
            self.lock().put(hash.0, (client, Instant::now()));
        }
    }

    /// Applies what the revocation listener heard. Returns only once a
    /// revoked key is gone, because the listener confirms right after.
    pub fn on_revocation(&self, heard: Heard<'_>) {
        match heard {
            // Revocations may have been missed while nobody listened.
            Heard::Listening => {
                self.lock().clear();
                self.listening.store(true, Ordering::Release);
            }
            Heard::Lost => {
                self.listening.store(false, Ordering::Release);
                self.lock().clear();
            }
            Heard::Notification(hex_hash) => {
                match hex::decode(hex_hash)
                    .ok()
                    .and_then(|h| <[u8; 32]>::try_from(h).ok())
                {
                    Some(hash) => {
                        self.lock().pop(&hash);
                    }
                    None => self.lock().clear(),
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<[u8; 32], (ClientId, Instant)>> {
        // Every critical section is a single map operation: a panic cannot
        // leave the map half-updated, so a poisoned lock is still sound.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    const HASH: ApiKeyHash = ApiKeyHash([1; 32]);

    fn listening_cache(ttl: Duration) -> AuthCache {
        let cache = AuthCache::new(8, ttl);
        cache.on_revocation(Heard::Listening);
        cache
    }

    #[test]
    fn a_revocation_evicts_the_key() {
        let cache = listening_cache(Duration::from_secs(60));
        let client = ClientId(Uuid::nil());
        cache.put(&HASH, client);
        assert_eq!(cache.get(&HASH), Some(client));
        cache.on_revocation(Heard::Notification(&hex::encode(HASH.0)));
        assert_eq!(cache.get(&HASH), None);
    }

    #[test]
    fn nothing_is_trusted_while_revocations_cannot_be_heard() {
        let cache = AuthCache::new(8, Duration::from_secs(60));
        cache.put(&HASH, ClientId(Uuid::nil()));
        assert_eq!(cache.get(&HASH), None, "not listening yet");
        cache.on_revocation(Heard::Listening);
        cache.put(&HASH, ClientId(Uuid::nil()));
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
        cache.put(&HASH, ClientId(Uuid::nil()));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(cache.get(&HASH), None);
        let off = listening_cache(Duration::ZERO);
        off.put(&HASH, ClientId(Uuid::nil()));
        assert_eq!(off.get(&HASH), None);
    }
}
