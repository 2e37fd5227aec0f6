//! The two ways of offering load: a closed loop of workers, and an open loop
//! that starts intents on a fixed schedule whatever the server does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use payrail::sync::lock;

use crate::intent::{Intent, IntentFactory};
use crate::scenario::{run_intent, Ctx};

/// How intents are started.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// N workers, each starting its next intent when the last one ended.
    Closed {
        /// Workers.
        workers: u32,
    },
    /// Intents started at a fixed rate, at most `max_in_flight` at once.
    Open {
        /// Intents per second.
        rate: f64,
        /// Cap on intents in flight; beyond it a scheduled intent is dropped.
        max_in_flight: u32,
    },
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Closed { workers } => write!(f, "closed loop, {workers} workers"),
            Mode::Open {
                rate,
                max_in_flight,
            } => write!(f, "open loop, {rate}/s, at most {max_in_flight} in flight"),
        }
    }
}

/// When to stop starting intents.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most intents started.
    pub intents: u64,
    /// How long intents are started.
    pub duration: Duration,
}

/// What the load phase did.
pub struct LoadOutcome {
    /// Every intent started, by index.
    pub intents: Vec<Arc<Intent>>,
    /// From the first start until the last intent finished.
    pub elapsed: Duration,
    /// Open loop: scheduled intents not started because of the in-flight cap.
    pub dropped: u64,
    /// Intents still running when the grace period ended (aborted).
    pub stuck: usize,
}

/// Runs the load until `limits` say stop and every started intent has ended
/// (or `ctx.give_up_at` has passed).
pub async fn run(
    ctx: Arc<Ctx>,
    factory: Arc<IntentFactory>,
    mode: Mode,
    limits: Limits,
) -> LoadOutcome {
    let started = Instant::now();
    let stop_at = started + limits.duration;
    // Registered before their first attempt, so an intent cut short still has
    // its key checked afterwards.
    let registry: Arc<Mutex<Vec<Arc<Intent>>>> = Arc::default();
    let mut tasks = JoinSet::new();
    let mut dropped = 0u64;

    match mode {
        Mode::Closed { workers } => {
            let next = Arc::new(AtomicU64::new(0));
            for _ in 0..workers {
                let (ctx, factory, registry, next) =
                    (ctx.clone(), factory.clone(), registry.clone(), next.clone());
                tasks.spawn(async move {
                    loop {
                        if Instant::now() >= stop_at {
                            break;
                        }
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        if index >= limits.intents {
                            break;
                        }
                        let intent = Arc::new(factory.make(index));
                        lock(&registry).push(intent.clone());
                        run_intent(&ctx, &intent, None).await;
                    }
                });
            }
        }
        Mode::Open {
            rate,
            max_in_flight,
        } => {
            let in_flight = Arc::new(Semaphore::new(max_in_flight as usize));
            for index in 0..limits.intents {
                let at = started + Duration::from_secs_f64(index as f64 / rate);
                if at >= stop_at {
                    break;
                }
                // A late wake-up starts the overdue intents at once; each still
                // measures from its own scheduled time.
                tokio::time::sleep_until(at).await;
                // Reap finished tasks so the set stays as small as what is in flight.
                while tasks.try_join_next().is_some() {}
                let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                    dropped += 1;
                    continue;
                };
                let intent = Arc::new(factory.make(index));
                lock(&registry).push(intent.clone());
                let ctx = ctx.clone();
                tasks.spawn(async move {
                    run_intent(&ctx, &intent, Some(at)).await;
                    drop(permit);
                });
            }
        }
    }

    // Every attempt is bounded by give_up_at already; the margin only guards
    // against a bug here turning into a hang.
    let hard_stop = ctx.give_up_at + Duration::from_secs(5);
    let mut stuck = 0;
    loop {
        match tokio::time::timeout_at(hard_stop, tasks.join_next()).await {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(_) => {
                stuck = tasks.len();
                tasks.abort_all();
                break;
            }
        }
    }
    let elapsed = started.elapsed();

    let mut intents = std::mem::take(&mut *lock(&registry));
    intents.sort_by_key(|i| i.index);
    LoadOutcome {
        intents,
        elapsed,
        dropped,
        stuck,
    }
}
