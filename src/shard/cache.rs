use std::num::NonZeroUsize;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use lru::LruCache;

use super::{verdict, Verdict};
use crate::domain::{BodyDigest, ClientId, Fingerprint, IdempotencyKey};
use crate::store::StoredAnswer;

/// A key as the shard knows it: idempotency keys are scoped per client.
pub type Scope = (ClientId, IdempotencyKey);

/// A key's committed answer, and the digest of a request body known to carry
/// the answer's fingerprint (when this process saw one), so that a retry
/// repeating those bytes is answered without parsing them again.
#[derive(Debug, Clone)]
pub struct CachedAnswer {
    /// The answer, as stored.
    pub answer: StoredAnswer,
    /// Digest of a body whose fingerprint is `answer.fingerprint`.
    pub body: Option<BodyDigest>,
    /// When this process stops serving it: on the monotonic clock, and
    /// before the key's expiry by Postgres's clock (see `Shard`), so no
    /// host's wall clock can stretch a key's retention.
    pub until: Instant,
}

impl CachedAnswer {
    /// The verdict for a body with this digest, if the bytes alone decide it:
    /// the same bytes as a body known to ask for this answer.
    pub fn verdict_for_body(&self, body: BodyDigest) -> Option<Verdict> {
        (self.body == Some(body)).then(|| Verdict::Replayed(self.answer.clone()))
    }

    /// The verdict for an attempt with this fingerprint.
    pub fn verdict(&self, fingerprint: Fingerprint) -> Verdict {
        verdict(fingerprint, &self.answer)
    }
}

/// Committed answers of one shard, bounded by entry count, least recently
/// used out first. It only saves a Postgres round-trip (and, read from the
/// HTTP worker, the hop to the shard and back): a miss is always correct.
///
/// Only the shard writes it, and only with answers Postgres has committed,
/// so any live entry is the key's final answer. HTTP workers read it behind
/// a mutex held for one hash-map lookup.
pub struct ReplayCache {
    entries: Mutex<LruCache<Scope, CachedAnswer>>,
}

impl ReplayCache {
    /// A cache holding at most `capacity` answers (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Self {
            entries: Mutex::new(LruCache::new(capacity)),
        }
    }

    /// The live answer for `scope`; an expired one is dropped and not returned.
    pub fn get(&self, scope: &Scope, now: Instant) -> Option<CachedAnswer> {
        let mut entries = self.lock();
        match entries.get(scope) {
            Some(a) if now < a.until => Some(a.clone()),
            Some(_) => {
                entries.pop(scope);
                None
            }
            None => None,
        }
    }

    /// Remembers an answer that Postgres has committed.
    pub fn put(&self, scope: Scope, answer: CachedAnswer) {
        self.lock().put(scope, answer);
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, LruCache<Scope, CachedAnswer>> {
        // Every critical section is a single map operation: a panic cannot
        // leave the map half-updated, so a poisoned lock is still sound.
        crate::sync::lock(&self.entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;
    use uuid::Uuid;

    fn scope(i: u32) -> Scope {
        (
            ClientId(Uuid::nil()),
            IdempotencyKey::parse(format!("k{i}").as_bytes()).unwrap(),
        )
    }

    fn answer(until: Instant) -> CachedAnswer {
        CachedAnswer {
            answer: StoredAnswer {
                fingerprint: Fingerprint([1; 32]),
                status: 201,
                body: Bytes::from_static(b"{}"),
                transfer_id: Uuid::nil(),
            },
            body: Some(BodyDigest::of(b"{}")),
            until,
        }
    }

    #[test]
    fn it_is_bounded_and_forgets_the_least_recent() {
        let now = Instant::now();
        let c = ReplayCache::new(2);
        c.put(scope(1), answer(now + Duration::from_secs(3600)));
        c.put(scope(2), answer(now + Duration::from_secs(3600)));
        assert!(c.get(&scope(1), now).is_some());
        c.put(scope(3), answer(now + Duration::from_secs(3600)));
        assert_eq!(c.len(), 2);
        assert!(c.get(&scope(2), now).is_none());
        assert!(c.get(&scope(1), now).is_some());
    }

    #[test]
    fn expired_answers_are_not_served() {
        let now = Instant::now();
        let c = ReplayCache::new(4);
        c.put(scope(1), answer(now));
        assert!(c.get(&scope(1), now).is_none());
        assert!(c.is_empty());
    }

    #[test]
    fn only_the_same_bytes_skip_the_fingerprint() {
        let cached = answer(Instant::now() + Duration::from_secs(3600));
        assert!(matches!(
            cached.verdict_for_body(BodyDigest::of(b"{}")),
            Some(Verdict::Replayed(_))
        ));
        assert_eq!(cached.verdict_for_body(BodyDigest::of(b"{ }")), None);
        let unknown = CachedAnswer {
            body: None,
            ..cached.clone()
        };
        assert_eq!(unknown.verdict_for_body(BodyDigest::of(b"{}")), None);
        assert!(matches!(
            cached.verdict(Fingerprint([1; 32])),
            Verdict::Replayed(_)
        ));
        assert_eq!(cached.verdict(Fingerprint([2; 32])), Verdict::KeyReused);
    }
}
