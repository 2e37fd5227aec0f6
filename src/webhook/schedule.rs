//! When a failed delivery is tried again: 5 s, 5 min, 30 min, 2 h, 5 h,
//! 10 h, 10 h after each failure, with jitter, then never.

use std::time::Duration;

use rand::Rng;

/// Delay after the n-th failed attempt of a schedule (n from 1).
const SCHEDULE: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];

/// Attempts in one schedule: the first, then one after each delay.
pub const ATTEMPTS_MAX: i32 = SCHEDULE.len() as i32 + 1;

/// Jitter: each delay is drawn from ±this fraction around its nominal
/// value, so receivers that failed together are not retried together.
const JITTER: f64 = 0.2;

/// The retry schedule, scaled (`--webhook-retry-scale`; 1 in production).
#[derive(Debug, Clone, Copy)]
pub struct RetrySchedule {
    scale: f64,
}

impl RetrySchedule {
    /// A schedule whose delays are multiplied by `scale` (> 0).
    pub fn scaled(scale: f64) -> Self {
        assert!(scale.is_finite() && scale > 0.0, "the scale is positive");
        Self { scale }
    }

    /// The delay after failed attempt `attempt` (1-based) of the current
    /// schedule, at least `retry_after` when the receiver asked for one
    /// (bounded by the longest step); `None` when it was the last.
    pub fn after_failure(&self, attempt: i32, retry_after: Option<Duration>) -> Option<Duration> {
        assert!(attempt >= 1, "attempts count from 1");
        let nominal = *SCHEDULE.get(usize::try_from(attempt - 1).ok()?)?;
        let jitter = rand::thread_rng().gen_range(1.0 - JITTER..=1.0 + JITTER);
        let delay = nominal.mul_f64(self.scale * jitter);
        let longest = SCHEDULE[SCHEDULE.len() - 1];
        Some(match retry_after {
            Some(asked) => delay.max(asked.min(longest)),
            None => delay,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_has_eight_attempts_with_jittered_delays() {
        let s = RetrySchedule::scaled(1.0);
        for (i, nominal) in SCHEDULE.iter().enumerate() {
            let d = s.after_failure(i as i32 + 1, None).unwrap();
            assert!(
                d >= nominal.mul_f64(0.8) && d <= nominal.mul_f64(1.2),
                "{d:?}"
            );
        }
        assert_eq!(s.after_failure(ATTEMPTS_MAX, None), None);
        assert_eq!(ATTEMPTS_MAX, 8);
    }

    #[test]
    fn scale_and_retry_after_apply() {
        let s = RetrySchedule::scaled(0.001);
        let d = s.after_failure(1, None).unwrap();
        assert!(d <= Duration::from_millis(6), "{d:?}");
        let asked = s.after_failure(1, Some(Duration::from_secs(2))).unwrap();
        assert_eq!(asked, Duration::from_secs(2));
        let huge = RetrySchedule::scaled(1.0)
            .after_failure(1, Some(Duration::from_secs(86_400 * 30)))
            .unwrap();
        assert_eq!(huge, Duration::from_secs(10 * 3600));
    }
}
