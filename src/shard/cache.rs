use std::num::NonZeroUsize;

use chrono::{DateTime, Utc};
use lru::LruCache;

use crate::domain::{ClientId, IdempotencyKey};
use crate::store::StoredAnswer;

/// A key as the shard knows it: idempotency keys are scoped per client.
pub type Scope = (ClientId, IdempotencyKey);

/// Recent answers of one shard, bounded by entry count, least recently used
/// out first. It only saves a Postgres round-trip: a miss is always correct.
pub struct ReplayCache {
    entries: LruCache<Scope, StoredAnswer>,
}

impl ReplayCache {
    /// A cache holding at most `capacity` answers (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: LruCache::new(NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN)),
        }
    }

    /// The live answer for `scope`; an expired one is dropped and not returned.
    pub fn get(&mut self, scope: &Scope, now: DateTime<Utc>) -> Option<StoredAnswer> {
        match self.entries.get(scope) {
            Some(a) if !a.is_expired(now) => Some(a.clone()),
            Some(_) => {
                self.entries.pop(scope);
                None
            }
            None => None,
        }
    }

    /// Remembers an answer.
    pub fn put(&mut self, scope: Scope, answer: StoredAnswer) {
        self.entries.put(scope, answer);
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Fingerprint;
    use bytes::Bytes;
    use chrono::Duration;
    use uuid::Uuid;

    fn scope(i: u32) -> Scope {
        (
            ClientId(Uuid::nil()),
            IdempotencyKey::parse(format!("k{i}").as_bytes()).unwrap(),
        )
    }

    fn answer(expires_at: DateTime<Utc>) -> StoredAnswer {
        StoredAnswer {
            fingerprint: Fingerprint([0; 32]),
            status: 201,
            body: Bytes::from_static(b"{}"),
            transfer_id: Uuid::nil(),
            expires_at,
        }
    }

    #[test]
    fn it_is_bounded_and_forgets_the_least_recent() {
        let now = Utc::now();
        let mut c = ReplayCache::new(2);
        c.put(scope(1), answer(now + Duration::hours(1)));
        c.put(scope(2), answer(now + Duration::hours(1)));
        assert!(c.get(&scope(1), now).is_some());
        c.put(scope(3), answer(now + Duration::hours(1)));
        assert_eq!(c.len(), 2);
        assert!(c.get(&scope(2), now).is_none());
        assert!(c.get(&scope(1), now).is_some());
    }

    #[test]
    fn expired_answers_are_not_served() {
        let now = Utc::now();
        let mut c = ReplayCache::new(4);
        c.put(scope(1), answer(now));
        assert!(c.get(&scope(1), now).is_none());
        assert_eq!(c.len(), 0);
    }
}
