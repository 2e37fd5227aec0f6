//! One intent — a payment a user means to make exactly once — and how a
//! retrying mobile app sends it under each scenario. Every answer is checked
//! as it arrives, since some broken promises (a second fresh `201`, a replay
//! that is not byte-identical) are visible only on the wire.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;
use uuid::Uuid;

use crate::args::{Mix, Scenario};
use crate::client::{Answer, Api, Failure, Transfer, TransferBody};
use crate::record::{Recorder, Violations, ERROR, TIMEOUT};

/// Currencies drawn for bodies; all active ISO 4217 codes.
const CURRENCIES: [&str; 5] = ["USD", "EUR", "JPY", "GBP", "CHF"];
/// First delay between retries that got no `Retry-After`; doubles per attempt.
const BACKOFF_BASE: Duration = Duration::from_millis(10);
/// Longest delay between retries that got no `Retry-After`.
const BACKOFF_CAP: Duration = Duration::from_secs(1);

/// Everything an intent needs while it runs; shared by all of them.
pub struct Ctx {
    /// payrail, as this run's client.
    pub api: Api,
    /// Where attempts and intents are counted.
    pub recorder: Recorder,
    /// Where broken invariants go.
    pub violations: Violations,
    /// Attempts per sender.
    pub max_attempts: u32,
    /// Timeout of every attempt but a `timeout` intent's first.
    pub request_timeout: Duration,
    /// Cap on a honoured `Retry-After`.
    pub max_retry_after: Duration,
    /// Senders of a `burst` intent.
    pub burst_size: u32,
    /// Replays of a `storm` intent.
    pub storm_size: u32,
    /// No attempt starts, and none runs, past this: the load window plus the
    /// grace that lets the last intents finish their retries.
    pub give_up_at: Instant,
}

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
fn changed_amount(body: &TransferBody) -> TransferBody {
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
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What an attempt's answer is expected to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// `201` (fresh or replayed).
    Create,
    /// `422 idempotency-key-reused`: the key with a changed body.
    Reuse,
}

/// How a sender's run of attempts ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// A `201` named this transfer.
    Created(Uuid),
    /// The expected `422 idempotency-key-reused`.
    KeyReused,
    /// A final answer that is a violation (already recorded).
    Unexpected,
    /// Attempts or time ran out without a final answer.
    GaveUp,
}

/// What to do after one answer.
enum Next {
    Done(End),
    Retry,
}

/// Options of a sender's first attempt.
#[derive(Clone, Copy, Default)]
struct First {
    /// Give up on the first attempt after this (the `timeout` scenario).
    short_timeout: Option<Duration>,
    /// Open loop: measure the first attempt from its scheduled start.
    scheduled: Option<Instant>,
}

/// Runs one intent to its end under its scenario. `scheduled` is the open
/// loop's planned start: latency counts from there, so a generator or server
/// falling behind shows up in the figures instead of hiding (coordinated omission).
pub async fn run_intent(ctx: &Ctx, intent: &Intent, scheduled: Option<Instant>) {
    let started = scheduled.unwrap_or_else(Instant::now);
    let first = First {
        short_timeout: None,
        scheduled,
    };
    let body = intent.body_bytes.clone();
    match intent.scenario {
        Scenario::Unique => {
            send(ctx, intent, Phase::Create, body, first).await;
        }
        Scenario::Timeout => {
            let first = First {
                short_timeout: Some(intent.short_timeout),
                ..first
            };
            send(ctx, intent, Phase::Create, body, first).await;
        }
        Scenario::Burst => {
            let senders =
                (0..ctx.burst_size).map(|_| send(ctx, intent, Phase::Create, body.clone(), first));
            futures::future::join_all(senders).await;
        }
        Scenario::Reuse => {
            // Only a key known to exist must refuse a changed body; after an
            // unanswered first request the changed one may rightly create it.
            if let End::Created(_) = send(ctx, intent, Phase::Create, body, first).await {
                let changed = changed_amount(&intent.body);
                let changed = Bytes::from(serde_json::to_vec(&changed).expect("serializes"));
                send(ctx, intent, Phase::Reuse, changed, First::default()).await;
            }
        }
        Scenario::Replay => {
            if let End::Created(_) = send(ctx, intent, Phase::Create, body.clone(), first).await {
                for _ in 0..ctx.storm_size {
                    send(ctx, intent, Phase::Create, body.clone(), First::default()).await;
                }
            }
        }
        Scenario::Storm => {
            if let End::Created(_) = send(ctx, intent, Phase::Create, body.clone(), first).await {
                let sequential = ctx.storm_size / 2;
                for _ in 0..sequential {
                    send(ctx, intent, Phase::Create, body.clone(), First::default()).await;
                }
                let together = (sequential..ctx.storm_size)
                    .map(|_| send(ctx, intent, Phase::Create, body.clone(), First::default()));
                futures::future::join_all(together).await;
            }
        }
    }
    ctx.recorder.intent(started.elapsed());

    let st = intent.state();
    // Exactly one attempt of a key gets the "created" answer; if every attempt
    // was answered, that answer cannot have been lost on the way.
    if st.acknowledged && st.fresh == 0 && st.unanswered == 0 {
        ctx.violations.push(format!(
            "key {} ({}): every attempt was answered, all as replays; none created the transfer",
            intent.key, intent.scenario
        ));
    }
}

/// Sends `body` under the intent's key until a final answer, retrying with
/// the same key and bytes on timeouts, connection errors, `409`, `429` and `5xx`.
async fn send(ctx: &Ctx, intent: &Intent, phase: Phase, body: Bytes, first: First) -> End {
    for attempt in 0..ctx.max_attempts {
        let now = Instant::now();
        if now >= ctx.give_up_at {
            break;
        }
        let deliberate = attempt == 0 && first.short_timeout.is_some();
        let timeout = match first.short_timeout {
            Some(short) if attempt == 0 => short,
            _ => ctx.request_timeout,
        }
        .min(ctx.give_up_at - now);
        let measured_from = match first.scheduled {
            Some(at) if attempt == 0 => at,
            _ => now,
        };
        let (seq, acked_before) = {
            let mut st = intent.state();
            st.sent += 1;
            (st.sent - 1, st.acknowledged)
        };

        let result = ctx
            .api
            .post_transfer(&intent.key, body.clone(), timeout)
            .await;
        let latency = measured_from.elapsed();

        let wait = match result {
            Err(Failure::Timeout) => {
                // A deliberately abandoned attempt measures our impatience, not the server.
                ctx.recorder
                    .attempt(TIMEOUT, (!deliberate).then_some(latency));
                intent.state().unanswered += 1;
                backoff(attempt)
            }
            Err(Failure::Error(_)) => {
                ctx.recorder.attempt(ERROR, None);
                intent.state().unanswered += 1;
                backoff(attempt)
            }
            Ok(answer) => {
                ctx.recorder
                    .attempt(&answer.status.to_string(), Some(latency));
                // A connection that broke during COMMIT leaves the server
                // itself unsure whether the flush landed, and it answers
                // 503: for the auditor that outcome is as unknown as a
                // timeout, and the retry's replay is what settles it.
                if answer.status == 503 {
                    intent.state().unanswered += 1;
                }
                match judge(ctx, intent, phase, &answer, seq, acked_before) {
                    Next::Done(end) => return end,
                    Next::Retry => answer
                        .retry_after
                        .map(|d| d.min(ctx.max_retry_after))
                        .unwrap_or_else(|| backoff(attempt)),
                }
            }
        };
        if attempt + 1 < ctx.max_attempts {
            let until = (Instant::now() + wait).min(ctx.give_up_at);
            tokio::time::sleep_until(until).await;
        }
    }
    End::GaveUp
}

/// Capped exponential backoff with jitter, so retries of many intents do not
/// arrive in lockstep.
fn backoff(attempt: u32) -> Duration {
    let full = BACKOFF_BASE
        .saturating_mul(1u32 << attempt.min(16))
        .min(BACKOFF_CAP);
    full.mul_f64(rand::thread_rng().gen_range(0.5..=1.0))
}

/// The problem type a retryable status must carry (docs/API.md).
fn retryable_types(status: u16) -> Option<&'static [&'static str]> {
    match status {
        409 => Some(&["/problems/request-in-progress"]),
        429 => Some(&["/problems/rate-limited"]),
        503 => Some(&["/problems/unavailable", "/problems/overloaded"]),
        _ => None,
    }
}

/// Checks one answer against the contract and decides what comes next.
/// `seq` is the attempt's number within the intent; `acked_before` says
/// whether a `201` had already arrived when it was sent.
fn judge(
    ctx: &Ctx,
    intent: &Intent,
    phase: Phase,
    answer: &Answer,
    seq: u32,
    acked_before: bool,
) -> Next {
    let key = &intent.key;
    let scenario = intent.scenario;
    let violation = |what: String| {
        ctx.violations
            .push(format!("key {key} ({scenario}): {what}"))
    };
    let status = answer.status;

    if let Some(types) = retryable_types(status) {
        let ty = answer.problem_type();
        if !ty.as_deref().is_some_and(|t| types.contains(&t)) {
            violation(format!(
                "{status} with problem type {ty:?}, expected one of {types:?}"
            ));
        }
        return Next::Retry;
    }
    // 408: the request did not arrive in time, so nothing was stored; the
    // same key is retried. The body timeout answers problem+json; the HTTP
    // layer's head timeout (say, after the server was paused with the head
    // already in its socket) answers with an empty body.
    if status == 408 {
        let ty = answer.problem_type();
        if !answer.body.is_empty() && ty.as_deref() != Some("/problems/request-timeout") {
            violation(format!(
                "408 with problem type {ty:?}, expected /problems/request-timeout or no body"
            ));
        }
        return Next::Retry;
    }
    if (500..600).contains(&status) {
        violation(format!("unexpected status {status}; retried"));
        return Next::Retry;
    }

    match (phase, status) {
        (Phase::Reuse, 422) => {
            let ty = answer.problem_type();
            if ty.as_deref() == Some("/problems/idempotency-key-reused") {
                Next::Done(End::KeyReused)
            } else {
                violation(format!(
                    "changed body answered 422 of type {ty:?}, expected /problems/idempotency-key-reused"
                ));
                Next::Done(End::Unexpected)
            }
        }
        (_, 201) => {
            // The first answer's bytes were parsed and checked when they came;
            // the same bytes again name the same transfer and pass the same checks.
            let known = intent
                .state()
                .first
                .as_ref()
                .filter(|(body, _)| *body == answer.body)
                .map(|&(_, id)| id);
            let id = match known {
                Some(id) => id,
                None => {
                    let transfer: Transfer = match serde_json::from_slice(&answer.body) {
                        Ok(t) => t,
                        Err(e) => {
                            violation(format!("201 body is not a transfer: {e}"));
                            return Next::Done(End::Unexpected);
                        }
                    };
                    if phase == Phase::Create {
                        check_transfer(intent, &transfer, &violation);
                    }
                    transfer.id
                }
            };
            if phase == Phase::Reuse {
                // Remembered so the audit reads this transfer back too.
                intent.state().ids.insert(id);
                violation(format!(
                    "the key with a changed amount was answered 201{} (transfer {id}), expected 422 idempotency-key-reused",
                    if answer.replayed { " as a replay" } else { "" }
                ));
                return Next::Done(End::Unexpected);
            }
            check_created(intent, answer, id, seq, acked_before, &violation);
            Next::Done(End::Created(id))
        }
        _ => {
            let ty = answer.problem_type();
            let expected = match phase {
                Phase::Create => "201",
                Phase::Reuse => "422 idempotency-key-reused",
            };
            violation(format!(
                "unexpected status {status} (problem type {ty:?}), expected {expected}"
            ));
            Next::Done(End::Unexpected)
        }
    }
}

/// What a `201` body must say: a transfer of the intent's key with the
/// fields the intent sent.
fn check_transfer(intent: &Intent, transfer: &Transfer, violation: &dyn Fn(String)) {
    let id = transfer.id;
    if transfer.idempotency_key != intent.key {
        violation(format!(
            "201 names transfer {id} of key {:?}",
            transfer.idempotency_key
        ));
    }
    let mismatches = intent.body.mismatches(transfer);
    if !mismatches.is_empty() {
        violation(format!(
            "201 transfer {id} differs from the request: {}",
            mismatches.join("; ")
        ));
    }
}

/// The promises every `201` makes: it names the intent's transfer, the same
/// one as every other answer, with the same bytes, and it is "fresh" at most once.
fn check_created(
    intent: &Intent,
    answer: &Answer,
    id: Uuid,
    seq: u32,
    acked_before: bool,
    violation: &dyn Fn(String),
) {
    let expected_location = format!("/transfers/{id}");
    if answer.location.as_deref() != Some(expected_location.as_str()) {
        violation(format!(
            "201 Location {:?}, expected {expected_location:?}",
            answer.location
        ));
    }

    let mut st = intent.state();
    st.acknowledged = true;
    match &st.first {
        Some((first, _)) if *first != answer.body => {
            violation(format!(
                "replayed body for transfer {id} is not byte-identical to the first answer"
            ));
        }
        Some(_) => {}
        None => st.first = Some((answer.body.clone(), id)),
    }
    if st.ids.insert(id) && st.ids.len() > 1 {
        violation(format!("answers name different transfers: {:?}", st.ids));
    }
    if answer.replayed {
        // A burst's attempts race, so only a lone first attempt is known to be first.
        if seq == 0 && intent.scenario != Scenario::Burst {
            violation(format!(
                "the first attempt of a new key was answered as a replay (transfer {id})"
            ));
        }
    } else {
        st.fresh += 1;
        if acked_before {
            violation(format!(
                "an attempt sent after the key was acknowledged got a fresh 201 without Idempotent-Replayed (transfer {id})"
            ));
        } else if st.fresh > 1 {
            violation(format!(
                "{} answers created the key (201 without Idempotent-Replayed)",
                st.fresh
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn factory(mix: &str) -> IntentFactory {
        IntentFactory {
            seed: 42,
            run_id: "r1".into(),
            mix: mix.parse().unwrap(),
            decline_percent: 50,
            client_timeout: Duration::from_millis(5),
        }
    }

    #[test]
    fn intents_depend_on_seed_and_index_only() {
        let f = factory("unique=1,burst=1,storm=1");
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
        let f = factory("unique=1,timeout=1");
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
        let f = factory("storm=1");
        assert!((0..50).all(|i| f.make(i).scenario == Scenario::Storm));
    }

    #[test]
    fn a_reused_key_changes_only_the_amount() {
        let f = factory("reuse=1");
        let it = f.make(3);
        let changed = changed_amount(&it.body);
        assert_ne!(changed.amount, it.body.amount);
        assert!(changed.amount >= 1);
        assert_eq!(changed.metadata, it.body.metadata);
    }

    fn ctx() -> Ctx {
        let http = crate::client::http_client(1).unwrap();
        let target = "http://127.0.0.1:1".parse().unwrap();
        Ctx {
            api: Api::new(http, &target, "k").unwrap(),
            recorder: Recorder::default(),
            violations: Violations::default(),
            max_attempts: 3,
            request_timeout: Duration::from_secs(1),
            max_retry_after: Duration::from_secs(1),
            burst_size: 2,
            storm_size: 2,
            give_up_at: Instant::now(),
        }
    }

    fn created(intent: &Intent, id: Uuid, replayed: bool, amount: i64) -> Answer {
        let b = &intent.body;
        let body = serde_json::json!({
            "id": id, "status": "pending", "amount": amount, "currency": b.currency,
            "source_account": b.source_account, "destination_account": b.destination_account,
            "description": b.description, "metadata": b.metadata,
            "idempotency_key": intent.key, "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z", "provider_reference": null, "failure_reason": null
        });
        Answer {
            status: 201,
            replayed,
            location: Some(format!("/transfers/{id}")),
            retry_after: None,
            body: Bytes::from(serde_json::to_vec(&body).unwrap()),
        }
    }

    fn problem(status: u16, slug: &str) -> Answer {
        Answer {
            status,
            replayed: false,
            location: None,
            retry_after: Some(Duration::from_secs(1)),
            body: Bytes::from(format!(
                r#"{{"type":"/problems/{slug}","status":{status}}}"#
            )),
        }
    }

    fn violations(ctx: &Ctx) -> Vec<String> {
        ctx.violations.take().0
    }

    #[test]
    fn a_creation_and_its_replays_are_fine() {
        let (ctx, it) = (ctx(), factory("unique=1").make(1));
        let id = Uuid::now_v7();
        let amount = it.body.amount;
        assert!(matches!(
            judge(&ctx, &it, Phase::Create, &created(&it, id, false, amount), 0, false),
            Next::Done(End::Created(x)) if x == id
        ));
        judge(
            &ctx,
            &it,
            Phase::Create,
            &created(&it, id, true, amount),
            1,
            true,
        );
        assert_eq!(violations(&ctx), Vec::<String>::new());
        let st = it.state();
        assert_eq!((st.fresh, st.acknowledged, st.ids.len()), (1, true, 1));
    }

    #[test]
    fn a_replay_of_the_first_bytes_is_still_checked_for_its_location() {
        let (ctx, it) = (ctx(), factory("replay=1").make(1));
        let id = Uuid::now_v7();
        let first = created(&it, id, false, it.body.amount);
        judge(&ctx, &it, Phase::Create, &first, 0, false);
        let elsewhere = Answer {
            replayed: true,
            location: Some(format!("/transfers/{}", Uuid::nil())),
            ..first
        };
        judge(&ctx, &it, Phase::Create, &elsewhere, 1, true);
        let v = violations(&ctx);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("201 Location"), "{v:?}");
    }

    #[test]
    fn a_408_is_retried_with_a_problem_or_no_body_and_anything_else_is_a_violation() {
        let (ctx, it) = (ctx(), factory("unique=1").make(1));
        let bare = Answer {
            body: Bytes::new(),
            ..problem(408, "x")
        };
        for answer in [problem(408, "request-timeout"), bare] {
            assert!(matches!(
                judge(&ctx, &it, Phase::Create, &answer, 0, false),
                Next::Retry
            ));
        }
        assert_eq!(violations(&ctx), Vec::<String>::new());
        assert!(matches!(
            judge(
                &ctx,
                &it,
                Phase::Create,
                &problem(408, "unavailable"),
                0,
                false
            ),
            Next::Retry
        ));
        assert_eq!(violations(&ctx).len(), 1);
    }

    #[test]
    fn a_second_creation_or_another_id_is_a_violation() {
        let (ctx, it) = (ctx(), factory("burst=1").make(1));
        let amount = it.body.amount;
        let id = Uuid::now_v7();
        judge(
            &ctx,
            &it,
            Phase::Create,
            &created(&it, id, false, amount),
            0,
            false,
        );
        judge(
            &ctx,
            &it,
            Phase::Create,
            &created(&it, id, false, amount),
            1,
            false,
        );
        let v = violations(&ctx);
        assert!(
            v.iter().any(|m| m.contains("2 answers created the key")),
            "{v:?}"
        );

        judge(
            &ctx,
            &it,
            Phase::Create,
            &created(&it, Uuid::now_v7(), true, amount),
            2,
            true,
        );
        let v = violations(&ctx);
        assert!(v.iter().any(|m| m.contains("different transfers")), "{v:?}");
        assert!(v.iter().any(|m| m.contains("not byte-identical")), "{v:?}");
    }

    #[test]
    fn a_fresh_answer_after_acknowledgement_or_a_replay_first_is_a_violation() {
        let (ctx, it) = (ctx(), factory("storm=1").make(1));
        let amount = it.body.amount;
        judge(
            &ctx,
            &it,
            Phase::Create,
            &created(&it, Uuid::nil(), true, amount),
            0,
            false,
        );
        let v = violations(&ctx);
        assert!(
            v.iter().any(|m| m.contains("first attempt of a new key")),
            "{v:?}"
        );
        judge(
            &ctx,
            &it,
            Phase::Create,
            &created(&it, Uuid::nil(), false, amount),
            1,
            true,
        );
        let v = violations(&ctx);
        assert!(
            v.iter()
                .any(|m| m.contains("after the key was acknowledged")),
            "{v:?}"
        );
    }

    #[test]
    fn a_created_transfer_must_match_the_request() {
        let (ctx, it) = (ctx(), factory("unique=1").make(1));
        let amount = it.body.amount + 1;
        judge(
            &ctx,
            &it,
            Phase::Create,
            &created(&it, Uuid::nil(), false, amount),
            0,
            false,
        );
        let v = violations(&ctx);
        assert!(
            v.iter().any(|m| m.contains("differs from the request")),
            "{v:?}"
        );
    }

    #[test]
    fn reuse_expects_the_reused_problem_and_nothing_else() {
        let (ctx, it) = (ctx(), factory("reuse=1").make(1));
        let ok = judge(
            &ctx,
            &it,
            Phase::Reuse,
            &problem(422, "idempotency-key-reused"),
            1,
            true,
        );
        assert!(matches!(ok, Next::Done(End::KeyReused)));
        assert_eq!(violations(&ctx), Vec::<String>::new());

        let other = judge(
            &ctx,
            &it,
            Phase::Reuse,
            &problem(422, "validation-failed"),
            1,
            true,
        );
        assert!(matches!(other, Next::Done(End::Unexpected)));
        assert_eq!(violations(&ctx).len(), 1);

        let amount = it.body.amount - 1;
        let bad = judge(
            &ctx,
            &it,
            Phase::Reuse,
            &created(&it, Uuid::nil(), false, amount),
            1,
            true,
        );
        assert!(matches!(bad, Next::Done(End::Unexpected)));
        let v = violations(&ctx);
        assert!(v[0].contains("changed amount was answered 201"), "{v:?}");
        // Creating with the reused-key problem is a violation too.
        judge(
            &ctx,
            &it,
            Phase::Create,
            &problem(422, "idempotency-key-reused"),
            0,
            false,
        );
        assert_eq!(violations(&ctx).len(), 1);
    }

    #[test]
    fn transient_answers_are_retried_and_only_odd_ones_flagged() {
        let (ctx, it) = (ctx(), factory("unique=1").make(1));
        for (status, slug) in [
            (503, "unavailable"),
            (503, "overloaded"),
            (409, "request-in-progress"),
            (429, "rate-limited"),
        ] {
            assert!(matches!(
                judge(&ctx, &it, Phase::Create, &problem(status, slug), 0, false),
                Next::Retry
            ));
        }
        assert_eq!(violations(&ctx), Vec::<String>::new());
        assert!(matches!(
            judge(&ctx, &it, Phase::Create, &problem(500, "oops"), 0, false),
            Next::Retry
        ));
        assert!(matches!(
            judge(
                &ctx,
                &it,
                Phase::Create,
                &problem(401, "unauthorized"),
                0,
                false
            ),
            Next::Done(End::Unexpected)
        ));
        assert_eq!(violations(&ctx).len(), 2);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert!(backoff(0) <= BACKOFF_BASE && backoff(0) >= BACKOFF_BASE / 2);
        assert!(backoff(30) <= BACKOFF_CAP && backoff(30) >= BACKOFF_CAP / 2);
    }
}
