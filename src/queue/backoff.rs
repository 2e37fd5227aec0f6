//! When a failed row of a queue is tried again, and when it is dead: one
//! policy for every queue. The relay backs off exponentially (capped, with
//! full jitter) under an attempt budget; webhook deliveries follow the fixed
//! schedule receivers expect (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, with
//! ±20 % jitter). Either way a `Retry-After` from the other side is a floor,
//! itself capped.

use std::time::Duration;

use rand::Rng;

/// The webhook schedule: the delay after the n-th failed attempt (n from 1).
const SCHEDULE: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];

/// Attempts in one webhook schedule: the first, then one after each delay.
pub const SCHEDULE_ATTEMPTS_MAX: i32 = SCHEDULE.len() as i32 + 1;

/// Jitter of the fixed schedule: each delay is drawn from ±this fraction
/// around its nominal value, so receivers that failed together are not
/// retried together.
const SCHEDULE_JITTER: f64 = 0.2;

/// How delays grow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Backoff {
    /// Uniform in `[0, min(cap, base·2^(n-1))]` after failure n.
    Exponential {
        /// First ceiling.
        base: Duration,
        /// Largest ceiling, and the cap on `Retry-After`.
        cap: Duration,
    },
    /// The webhook schedule, each delay multiplied by `scale` (1 in
    /// production; `--webhook-retry-scale` shrinks it for tests).
    Schedule {
        /// Multiplier (> 0).
        scale: f64,
    },
}

/// A backoff and a retry budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    backoff: Backoff,
    attempts_max: i32,
}

impl RetryPolicy {
    /// Capped exponential backoff with full jitter, dead after
    /// `attempts_max` attempts.
    pub fn exponential(base: Duration, cap: Duration, attempts_max: i32) -> Self {
        assert!(!cap.is_zero() && base <= cap, "0 < base <= cap");
        assert!(attempts_max >= 1, "at least one attempt");
        Self {
            backoff: Backoff::Exponential { base, cap },
            attempts_max,
        }
    }

    /// The webhook schedule, scaled, dead after its last step.
    pub fn schedule(scale: f64) -> Self {
        assert!(scale.is_finite() && scale > 0.0, "the scale is positive");
        Self {
            backoff: Backoff::Schedule { scale },
            attempts_max: SCHEDULE_ATTEMPTS_MAX,
        }
    }

    /// Attempts in one budget.
    pub fn attempts_max(&self) -> i32 {
        self.attempts_max
    }

    /// The delay after failed attempt `n` (from 1) of the current budget, at
    /// least `retry_after` (capped); `None` when the budget is spent and the
    /// row is dead.
    pub fn after_failure(&self, n: i32, retry_after: Option<Duration>) -> Option<Duration> {
        assert!(n >= 1, "attempts count from 1");
        if n >= self.attempts_max {
            return None;
        }
        let (delay, cap) = match self.backoff {
            Backoff::Exponential { base, cap } => {
                let exponent = (n - 1).clamp(0, 30) as u32;
                let ceiling = base.saturating_mul(1u32 << exponent).min(cap);
                (
                    ceiling.mul_f64(rand::thread_rng().gen_range(0.0..=1.0)),
                    cap,
                )
            }
            Backoff::Schedule { scale } => {
                let nominal = SCHEDULE[(n - 1) as usize];
                let jitter =
                    rand::thread_rng().gen_range(1.0 - SCHEDULE_JITTER..=1.0 + SCHEDULE_JITTER);
                (
                    nominal.mul_f64(scale * jitter),
                    SCHEDULE[SCHEDULE.len() - 1],
                )
            }
        };
        Some(delay.max(retry_after.unwrap_or_default().min(cap)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(100);
    const CAP: Duration = Duration::from_secs(60);

    fn exp() -> RetryPolicy {
        RetryPolicy::exponential(BASE, CAP, 40)
    }

    #[test]
    fn delays_stay_under_the_exponential_ceiling_and_the_cap() {
        for n in 1..40 {
            let ceiling = BASE.saturating_mul(1 << (n - 1).min(30)).min(CAP);
            for _ in 0..50 {
                assert!(exp().after_failure(n, None).unwrap() <= ceiling);
            }
        }
    }

    #[test]
    fn retry_after_is_a_floor_but_capped() {
        let d = exp()
            .after_failure(1, Some(Duration::from_secs(3)))
            .unwrap();
        assert!(d >= Duration::from_secs(3));
        let d = exp().after_failure(1, Some(Duration::from_secs(3600)));
        assert_eq!(d, Some(CAP));
        let s = RetryPolicy::schedule(0.001);
        assert!(s.after_failure(1, None).unwrap() <= Duration::from_millis(6));
        assert_eq!(
            s.after_failure(1, Some(Duration::from_secs(2))),
            Some(Duration::from_secs(2))
        );
        let huge =
            RetryPolicy::schedule(1.0).after_failure(1, Some(Duration::from_secs(86_400 * 30)));
        assert_eq!(huge, Some(Duration::from_secs(10 * 3600)));
    }

    #[test]
    fn exponential_jitter_spreads_delays() {
        let delays: std::collections::HashSet<_> =
            (0..20).map(|_| exp().after_failure(8, None)).collect();
        assert!(delays.len() > 10);
    }

    #[test]
    fn the_budget_decides_the_dead_letter() {
        let p = RetryPolicy::exponential(BASE, CAP, 3);
        assert!(p.after_failure(2, None).is_some());
        assert_eq!(p.after_failure(3, None), None);
        assert_eq!(p.after_failure(9, None), None);
    }

    #[test]
    fn the_schedule_has_eight_attempts_with_jittered_delays() {
        let s = RetryPolicy::schedule(1.0);
        for (i, nominal) in SCHEDULE.iter().enumerate() {
            let d = s.after_failure(i as i32 + 1, None).unwrap();
            assert!(
                d >= nominal.mul_f64(0.8) && d <= nominal.mul_f64(1.2),
                "{d:?}"
            );
        }
        assert_eq!(s.after_failure(SCHEDULE_ATTEMPTS_MAX, None), None);
        assert_eq!(SCHEDULE_ATTEMPTS_MAX, 8);
    }
}
