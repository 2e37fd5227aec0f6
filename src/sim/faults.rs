//! Fault injection: every random decision the sim makes comes from one seeded
//! RNG, so a run with a given `--seed` and the same request order is
//! reproducible. (With concurrent clients the order of draws follows the order
//! requests arrive, which the sim does not control.)

use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Reasons drawn for `--decline-rate` declines. The `decline` prefix rule always
/// uses `insufficient_funds` (the README's provider-sim section) so tests can assert on it.
pub const RANDOM_DECLINE_REASONS: &[&str] =
    &["insufficient_funds", "account_closed", "risk_rejected"];

/// The reason of a decline forced by a `decline…` destination account.
pub const PREFIX_DECLINE_REASON: &str = "insufficient_funds";

/// The seeded fault source of one sim instance.
pub struct Faults {
    rng: Mutex<StdRng>,
    seed: u64,
    fail_rate: f64,
    ambiguous_rate: f64,
    decline_rate: f64,
    repeat_reject_rate: f64,
}

impl Faults {
    /// Rates are probabilities in `0..=1`, already validated by the caller.
    pub fn new(seed: u64, fail_rate: f64, ambiguous_rate: f64, decline_rate: f64) -> Self {
        Self {
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            seed,
            fail_rate,
            ambiguous_rate,
            decline_rate,
            repeat_reject_rate: 0.0,
        }
    }

    /// Also answers repeats of executed payouts `403` at this rate.
    pub fn with_repeat_reject_rate(mut self, rate: f64) -> Self {
        self.repeat_reject_rate = rate;
        self
    }

    /// The seed in use, for logging so a run can be repeated.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    fn draw(&self, p: f64) -> bool {
        // Rates of exactly 0 and 1 do not touch the RNG, so turning a fault fully
        // on or off does not shift the sequence the other faults see.
        if p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        crate::sync::lock(&self.rng).gen_bool(p)
    }

    /// Draws `true` with probability `p` (for the asynchronous mode's rates).
    pub fn chance(&self, p: f64) -> bool {
        self.draw(p)
    }

    /// A uniform draw in `0..n` (n > 0).
    pub fn index(&self, n: usize) -> usize {
        assert!(n > 0, "a draw from nothing");
        crate::sync::lock(&self.rng).gen_range(0..n)
    }

    /// A uniform draw in `min..=max` milliseconds.
    pub fn millis_between(&self, min: u64, max: u64) -> std::time::Duration {
        let ms = if max <= min {
            min
        } else {
            crate::sync::lock(&self.rng).gen_range(min..=max)
        };
        std::time::Duration::from_millis(ms)
    }

    /// Should this request be answered `503` without executing?
    pub fn fail(&self) -> bool {
        self.draw(self.fail_rate)
    }

    /// Should the answer of this fresh execution be dropped?
    pub fn ambiguous(&self) -> bool {
        self.draw(self.ambiguous_rate)
    }

    /// Should this repeat of an executed payout be refused with a `403`?
    pub fn reject_repeat(&self) -> bool {
        self.draw(self.repeat_reject_rate)
    }

    /// The reason to decline this payout with, if it is to be declined.
    pub fn decline(&self, destination_account: &str) -> Option<&'static str> {
        if destination_account.starts_with("decline") {
            return Some(PREFIX_DECLINE_REASON);
        }
        if !self.draw(self.decline_rate) {
            return None;
        }
        let i = crate::sync::lock(&self.rng).gen_range(0..RANDOM_DECLINE_REASONS.len());
        Some(RANDOM_DECLINE_REASONS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sequence(f: &Faults) -> Vec<(bool, bool, Option<&'static str>)> {
        (0..200)
            .map(|_| (f.fail(), f.ambiguous(), f.decline("acc")))
            .collect()
    }

    #[test]
    fn same_seed_same_decisions() {
        let a = Faults::new(42, 0.3, 0.3, 0.3);
        let b = Faults::new(42, 0.3, 0.3, 0.3);
        assert_eq!(sequence(&a), sequence(&b));
        let c = Faults::new(43, 0.3, 0.3, 0.3);
        assert_ne!(sequence(&Faults::new(42, 0.3, 0.3, 0.3)), sequence(&c));
    }

    #[test]
    fn extreme_rates_are_absolute() {
        let never = Faults::new(1, 0.0, 0.0, 0.0);
        let always = Faults::new(1, 1.0, 1.0, 1.0);
        for _ in 0..100 {
            assert!(!never.fail() && !never.ambiguous() && never.decline("acc").is_none());
            assert!(always.fail() && always.ambiguous() && always.decline("acc").is_some());
        }
    }

    #[test]
    fn rates_are_roughly_honoured() {
        let f = Faults::new(7, 0.25, 0.0, 0.0);
        let hits = (0..10_000).filter(|_| f.fail()).count();
        assert!((2_000..3_000).contains(&hits), "{hits}");
    }

    #[test]
    fn decline_prefix_always_declines() {
        let f = Faults::new(1, 0.0, 0.0, 0.0);
        assert_eq!(f.decline("decline_me"), Some("insufficient_funds"));
        assert_eq!(f.decline("declined"), Some("insufficient_funds"));
        assert_eq!(f.decline("acc_decline"), None);
    }
}
