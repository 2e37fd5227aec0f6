//! The one rule of time every leased queue keeps: work started within its
//! call window ends, with every try of its settlement, before its lease
//! does, so no takeover overlaps it. Used by the workers and by the
//! configuration's checks alike; it depends on nothing else of payrail.

use std::time::Duration;

/// A whole settlement batch is tried this often when Postgres fails as a
/// whole (right after a restart the pool may hand out a dead connection)
/// before the rows are left to their leases.
pub const SETTLE_TRIES_MAX: u32 = 3;
/// Pause between those tries.
pub const SETTLE_RETRY_DELAY: Duration = Duration::from_millis(200);

/// How long settling one row can take at most: every try and the pauses
/// between them, each try bounded by `settle_timeout`.
pub fn settle_bound(settle_timeout: Duration) -> Duration {
    settle_timeout * SETTLE_TRIES_MAX + SETTLE_RETRY_DELAY * (SETTLE_TRIES_MAX - 1)
}

/// How long after its claim a row's work may still start, for every
/// queue: the work itself (at most `work_max`: provider calls, a delivery
/// attempt, a lookup) and every try of its settlement ([`settle_bound`] of
/// `settle_timeout`) must end before the lease does, so that no other
/// process takes the row over while it is in flight. `None` when the
/// lease is too short for that; the configuration's check refuses it.
pub fn call_window(
    lease: Duration,
    work_max: Duration,
    settle_timeout: Duration,
) -> Option<Duration> {
    Some(lease.saturating_sub(work_max + settle_bound(settle_timeout))).filter(|w| !w.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_started_in_the_call_window_ends_with_every_settlement_try_before_the_lease() {
        let s = Duration::from_secs;
        // 60 s lease, a 10 s call, 5 s per settlement try: 3 tries and two
        // 200 ms pauses leave 60 - 10 - 15.4 s.
        assert_eq!(
            call_window(s(60), s(10), s(5)),
            Some(Duration::from_millis(34_600))
        );
        let bound = s(10) + settle_bound(s(5));
        assert_eq!(call_window(bound, s(10), s(5)), None, "no room at all");
        assert_eq!(call_window(s(8), s(2), s(2)), None, "8 s < 2 s + 6.4 s");
        assert!(call_window(s(10), s(2), s(2)).is_some());
    }
}
