//! How a retrying mobile app sends one intent under each scenario: the
//! attempts, their timeouts and the backoff between them, each answer handed
//! to `judge` as it arrives.

use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use tokio::time::Instant;

use crate::client::{Api, Failure};
use crate::intent::{changed_amount, Intent};
use crate::judge::{judge, End, Next, Phase};
use crate::mix::Scenario;
use crate::record::{Recorder, Violations, ERROR, TIMEOUT};

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
                match judge(&ctx.violations, intent, phase, &answer, seq, acked_before) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert!(backoff(0) <= BACKOFF_BASE && backoff(0) >= BACKOFF_BASE / 2);
        assert!(backoff(30) <= BACKOFF_CAP && backoff(30) >= BACKOFF_CAP / 2);
    }
}
