//! One intent — a payment a user means to make exactly once — as it is fixed
//! before its first attempt: its scenario, key, body and short timeout, drawn
//! from the run's seed, and what its answers said so far.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

use crate::client::TransferBody;
use crate::mix::{Mix, Scenario};

/// Currencies drawn for bodies; all active ISO 4217 codes.
const CURRENCIES: [&str; 5] = ["USD", "EUR", "JPY", "GBP", "CHF"];

/// How intents are made from the run's seed.
#[derive(Debug, Clone)]
pub struct IntentFactory {
    /// The run's seed.
    pub seed: u64,
    /// Random id of this run, in every transfer's metadata for tracing.
    pub run_id: String,
    /// Scenario weights.
    pub mix: Mix,
    /// Share of intents paying an always-declined account.
    pub decline_percent: u8,
    /// Upper bound of a `timeout` intent's first-attempt timeout.
    pub client_timeout: Duration,
}

impl IntentFactory {
    /// Intent number `index`. Its scenario, body and short timeout depend only
    /// on (seed, index), not on scheduling, so a seed repeats a run's choices.
    /// The key is a fresh UUID v4 from the OS: keys must never collide with an
    /// earlier run's, even one with the same seed.
    pub fn make(&self, index: u64) -> Intent {
        let mut rng = StdRng::seed_from_u64(self.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let scenario = self.mix.pick(rng.gen_range(0..self.mix.total()));
        let declined = rng.gen_range(0..100u8) < self.decline_percent;
        let body = TransferBody {
            amount: rng.gen_range(1..=1_000_000),
            currency: CURRENCIES[rng.gen_range(0..CURRENCIES.len())].to_owned(),
            source_account: format!("lt_src_{}", rng.gen_range(0..1000)),
            destination_account: if declined {
                format!("decline_lt_{}", rng.gen_range(0..1000))
            } else {
                format!("lt_dst_{}", rng.gen_range(0..1000))
            },
            description: rng
                .gen_bool(0.5)
                .then(|| format!("payrail-loadtest {} #{index}", self.run_id)),
            metadata: BTreeMap::from([
                ("run".to_owned(), self.run_id.clone()),
                ("intent".to_owned(), index.to_string()),
            ]),
        };
        let max_us = u64::try_from(self.client_timeout.as_micros())
            .unwrap_or(u64::MAX)
            .max(1000);
        let short_timeout = Duration::from_micros(rng.gen_range(1000..=max_us));
        Intent::new(
            index,
            scenario,
            Uuid::new_v4().to_string(),
            body,
            short_timeout,
        )
    }
}

/// One intent, fixed before its first attempt.
#[derive(Debug)]
pub struct Intent {
    /// Its number in this run.
    pub index: u64,
    /// How it is sent.
    pub scenario: Scenario,
    /// The `Idempotency-Key`, the same for every attempt.
    pub key: String,
    /// What it asks for.
    pub body: TransferBody,
    /// `body` serialized once, so every retry sends the very same bytes.
    pub body_bytes: Bytes,
    /// `timeout` scenario: the first attempt's timeout.
    pub short_timeout: Duration,
    /// What its answers said so far.
    pub state: Mutex<IntentState>,
}

/// What an intent's answers said, updated as they arrive.
#[derive(Debug, Default)]
pub struct IntentState {
    /// Every transfer id an answer named (more than one is a violation).
    pub ids: BTreeSet<Uuid>,
    /// The first `201` body and the transfer it names; every replay must
    /// repeat the body byte for byte.
    pub first: Option<(Bytes, Uuid)>,
    /// `201`s without `Idempotent-Replayed: true` (more than one is a violation).
    pub fresh: u32,
    /// Attempts sent.
    pub sent: u32,
    /// Attempts whose outcome is unknown: no answer, or a `503` (see `send`).
    pub unanswered: u32,
    /// Some attempt got a `201` naming a transfer.
    pub acknowledged: bool,
}

/// The body changed for the second half of a `reuse` intent.
pub fn changed_amount(body: &TransferBody) -> TransferBody {
    let mut changed = body.clone();
    changed.amount = if body.amount > 1 { body.amount - 1 } else { 2 };
    changed
}

impl Intent {
    /// An intent with nothing sent yet.
    pub fn new(
        index: u64,
        scenario: Scenario,
        key: String,
        body: TransferBody,
        short_timeout: Duration,
    ) -> Self {
        let body_bytes = Bytes::from(serde_json::to_vec(&body).expect("a body always serializes"));
        Self {
            index,
            scenario,
            key,
            body,
            body_bytes,
            short_timeout,
            state: Mutex::new(IntentState::default()),
        }
    }

    /// Locks its state; nothing panics while it is held.
    pub fn state(&self) -> std::sync::MutexGuard<'_, IntentState> {
        payrail::sync::lock(&self.state)
    }
}

/// The factory the unit tests share: seed 42, half the intents declined,
/// `mix` in `--mix` syntax.
#[cfg(test)]
pub fn test_factory(mix: &str) -> IntentFactory {
    IntentFactory {
        seed: 42,
        run_id: "r1".into(),
        mix: mix.parse().unwrap(),
        decline_percent: 50,
        client_timeout: Duration::from_millis(5),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_depend_on_seed_and_index_only() {
        let f = test_factory("unique=1,burst=1,storm=1");
        let a = f.make(17);
        let b = f.make(17);
        assert_eq!(
            (a.scenario, &a.body, a.short_timeout),
            (b.scenario, &b.body, b.short_timeout)
        );
        assert_ne!(a.key, b.key, "keys are fresh every time");
        assert!(Uuid::parse_str(&a.key).unwrap().get_version_num() == 4);
    }

    #[test]
    fn bodies_follow_the_contract() {
        let f = test_factory("unique=1,timeout=1");
        let mut declined = 0;
        for i in 0..500 {
            let it = f.make(i);
            let b = &it.body;
            assert!((1..=999_999_999_999).contains(&b.amount));
            assert_ne!(b.source_account, b.destination_account);
            assert!(b.destination_account.len() <= 64);
            assert!(b
                .description
                .as_ref()
                .is_none_or(|d| d.chars().count() <= 140));
            assert!(it.short_timeout >= Duration::from_millis(1));
            assert!(it.short_timeout <= Duration::from_millis(5));
            declined += usize::from(b.destination_account.starts_with("decline"));
            let json: serde_json::Value = serde_json::from_slice(&it.body_bytes).unwrap();
            assert_eq!(json["amount"], b.amount);
        }
        assert!((150..350).contains(&declined), "{declined}");
    }

    #[test]
    fn the_mix_decides_the_scenarios() {
        let f = test_factory("storm=1");
        assert!((0..50).all(|i| f.make(i).scenario == Scenario::Storm));
    }

    #[test]
    fn a_reused_key_changes_only_the_amount() {
        let f = test_factory("reuse=1");
        let it = f.make(3);
        let changed = changed_amount(&it.body);
        assert_ne!(changed.amount, it.body.amount);
        assert!(changed.amount >= 1);
        assert_eq!(changed.metadata, it.body.metadata);
    }
}
