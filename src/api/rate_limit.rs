//! Per-client token buckets (GCRA, from `governor`), checked right after
//! authentication so that one client's burst is shed before it reaches the
//! shards that every client shares.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

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
}
