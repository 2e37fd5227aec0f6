use std::time::Duration;

use rand::Rng;

/// Capped exponential backoff with full jitter (uniform in
/// `[0, min(cap, base·2^(attempt-1))]`), so retries of many rows spread out
/// instead of arriving together; never less than the provider's
/// `Retry-After`, which is capped too.
pub fn retry_delay(
    attempt: i32,
    base: Duration,
    cap: Duration,
    retry_after: Option<Duration>,
) -> Duration {
    let exponent = attempt.saturating_sub(1).clamp(0, 30) as u32;
    let ceiling = base.saturating_mul(1u32 << exponent).min(cap);
    let jittered = ceiling.mul_f64(rand::thread_rng().gen_range(0.0..=1.0));
    jittered.max(retry_after.unwrap_or_default().min(cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(100);
    const CAP: Duration = Duration::from_secs(60);

    #[test]
    fn delays_stay_under_the_exponential_ceiling_and_the_cap() {
        for attempt in 1..40 {
            let ceiling = BASE.saturating_mul(1 << (attempt - 1).min(30)).min(CAP);
            for _ in 0..50 {
                assert!(retry_delay(attempt, BASE, CAP, None) <= ceiling);
            }
        }
    }

    #[test]
    fn retry_after_is_a_floor_but_capped() {
        let d = retry_delay(1, BASE, CAP, Some(Duration::from_secs(3)));
        assert!(d >= Duration::from_secs(3));
        let d = retry_delay(1, BASE, CAP, Some(Duration::from_secs(3600)));
        assert_eq!(d, CAP);
    }

    #[test]
    fn jitter_spreads_delays() {
        let delays: std::collections::HashSet<_> =
            (0..20).map(|_| retry_delay(8, BASE, CAP, None)).collect();
        assert!(delays.len() > 10);
    }
}
