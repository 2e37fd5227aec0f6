//! Per-client token buckets (GCRA, from `governor`), checked right after
//! authentication so that one client's burst is shed before it reaches the
//! shards that every client shares; and one bucket for the lookups of keys
//! no cache knows, checked before authentication reaches Postgres.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::domain::ClientId;

/// One bucket per authenticated client. The map holds one small entry per
/// client that has called; clients exist only when an operator creates
/// them, so it cannot be grown by strangers.
pub struct ClientRateLimiter {
    limiter: DefaultKeyedRateLimiter<ClientId>,
    clock: DefaultClock,
}

impl ClientRateLimiter {
    /// `per_second` requests per second with bursts of up to `burst`
    /// (`ServeConfig::validate` has rejected zeros; they would mean 1).
    pub fn new(per_second: u32, burst: u32) -> Self {
        let per_second = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        Self {
            limiter: RateLimiter::keyed(Quota::per_second(per_second).allow_burst(burst)),
            clock: DefaultClock::default(),
        }
    }

    /// Takes a token for `client`; when none is left, how long until one is.
    pub fn check(&self, client: ClientId) -> Result<(), Duration> {
        self.limiter
            .check_key(&client)
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

/// One bucket for the whole process: lookups of API keys that neither the
/// key cache nor the unknown-key cache holds. Strangers choose those keys,
/// so this is the bound on what they can make Postgres do.
pub struct LookupLimiter {
    limiter: DefaultDirectRateLimiter,
    refused: metrics::Counter,
}

impl LookupLimiter {
    /// `per_second` lookups per second, in bursts of as many.
    pub fn new(per_second: u32) -> Self {
        let per_second = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
        Self {
            limiter: RateLimiter::direct(Quota::per_second(per_second)),
            refused: metrics::counter!("payrail_auth_lookups_refused_total"),
        }
    }

    /// Takes a token for one lookup; false (and counted) when none is left.
    pub fn check(&self) -> bool {
        let allowed = self.limiter.check().is_ok();
        if !allowed {
            self.refused.increment(1);
        }
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn a_client_past_its_burst_waits_and_others_do_not() {
        let limiter = ClientRateLimiter::new(1, 3);
        let a = ClientId(Uuid::from_u128(1));
        let b = ClientId(Uuid::from_u128(2));
        for _ in 0..3 {
            assert_eq!(limiter.check(a), Ok(()));
        }
        let wait = limiter
            .check(a)
            .expect_err("fourth request is over the burst");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert_eq!(limiter.check(b), Ok(()), "buckets are per client");
    }

    #[test]
    fn lookups_past_the_bucket_are_refused() {
        let l = LookupLimiter::new(3);
        let allowed = (0..10).filter(|_| l.check()).count();
        assert_eq!(
            allowed, 3,
            "a burst of the rate, then nothing until it refills"
        );
    }
}
