//! One run from start to finish: set up the client, offer the load, audit,
//! and assemble the report.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use clap::Parser;
use rand::Rng;
use tokio::time::Instant;

use crate::args::Args;
use crate::client::{http_client, Api, Sim};
use crate::intent::IntentFactory;
use crate::load::{self, Limits, Mode};
use crate::loopback::check_loopback_url;
use crate::mix::Scenario;
use crate::report::{Invariants, Percentiles, Report};
use crate::scenario::Ctx;
use crate::verify::{self, Audit};

/// Most reads in flight while auditing.
const AUDIT_CONCURRENCY: usize = 16;

/// Why a run could not even start; the process exits 2, not 1, because no
/// invariant was tested.
#[derive(Debug)]
pub struct SetupError(pub anyhow::Error);

/// Runs the load test described by `args` (already validated).
pub async fn run(args: Args) -> Result<Report, SetupError> {
    let target = check_loopback_url(&args.target).map_err(|e| SetupError(anyhow::anyhow!(e)))?;
    let seed = args.seed.unwrap_or_else(rand::random);
    let run_id = format!("{:08x}", rand::thread_rng().gen::<u32>());
    let mode = match args.rate {
        Some(rate) => Mode::Open {
            rate,
            max_in_flight: args.max_in_flight,
        },
        None => Mode::Closed {
            workers: args.concurrency,
        },
    };
    let pool = match mode {
        Mode::Closed { workers } => workers as usize,
        Mode::Open { max_in_flight, .. } => (max_in_flight as usize).min(1024),
    };
    let http = http_client(pool).map_err(SetupError)?;
    if args.healthz {
        return Ok(crate::ceiling::run(http, &target, &args).await);
    }

    let (api_key, fresh_client) = match &args.api_key {
        Some(key) => (key.clone(), false),
        None => (
            create_client(&args, &run_id).await.map_err(SetupError)?,
            true,
        ),
    };
    let api = Api::new(http.clone(), &target, &api_key).map_err(SetupError)?;

    let sim = match &args.provider_url {
        Some(url) => {
            let url = check_loopback_url(url).map_err(|e| SetupError(anyhow::anyhow!(e)))?;
            let sim = Sim::new(http.clone(), url);
            let before = sim
                .stats(Duration::from_secs(10))
                .await
                .map_err(|e| SetupError(anyhow::anyhow!(e)))?;
            Some((sim, before))
        }
        None => None,
    };

    let sink = match &args.webhook_sink {
        Some(url) => {
            let url = check_loopback_url(url).map_err(|e| SetupError(anyhow::anyhow!(e)))?;
            Some(crate::webhooks::Sink::new(http.clone(), url))
        }
        None => None,
    };

    eprintln!(
        "payrail-loadtest: {target} for {} (at most {} intents), {mode}, mix {}, seed {seed}, run {run_id}{}",
        humantime::format_duration(args.duration),
        args.requests,
        args.mix,
        if fresh_client { ", fresh client" } else { "" }
    );

    let ctx = Arc::new(Ctx {
        api: api.clone(),
        recorder: Default::default(),
        violations: Default::default(),
        max_attempts: args.max_attempts,
        request_timeout: args.request_timeout,
        max_retry_after: args.max_retry_after,
        burst_size: args.burst_size,
        storm_size: args.storm_size,
        give_up_at: Instant::now() + args.duration + args.grace(),
    });
    let factory = Arc::new(IntentFactory {
        seed,
        run_id: run_id.clone(),
        mix: args.mix.clone(),
        decline_percent: args.decline_percent,
        client_timeout: args.client_timeout,
    });
    let run_started = SystemTime::now();
    let limits = Limits {
        intents: args.requests,
        duration: args.duration,
    };
    let outcome = load::run(ctx.clone(), factory, mode, limits).await;
    if outcome.stuck > 0 {
        ctx.violations.push(format!(
            "{} load tasks were still running past the grace period and were aborted",
            outcome.stuck
        ));
    }

    let (mut acknowledged, mut committed_unanswered) = (0, 0);
    for intent in &outcome.intents {
        let st = intent.state();
        acknowledged += u64::from(st.acknowledged);
        committed_unanswered += u64::from(st.acknowledged && st.fresh == 0 && st.unanswered > 0);
    }
    let intents = outcome.intents.len() as u64;
    // A run in which nothing worked proves nothing; it must not pass.
    if intents > 0 && acknowledged == 0 {
        ctx.violations
            .push("no intent was acknowledged with a 201".to_owned());
    }

    let verification = verify::audit(Audit {
        api: &api,
        sim: sim.as_ref().map(|(s, before)| (s, *before)),
        sink: sink.as_ref(),
        intents: &outcome.intents,
        fresh_client,
        run_started,
        drain_timeout: args.drain_timeout,
        verify_timeout: args.verify_timeout,
        concurrency: AUDIT_CONCURRENCY,
        violations: &ctx.violations,
    })
    .await;

    let figures = ctx.recorder.figures();
    let mut scenarios = BTreeMap::new();
    for s in Scenario::ALL {
        if args.mix.weight(s) > 0 {
            scenarios.insert(s.name().to_owned(), 0);
        }
    }
    for i in &outcome.intents {
        *scenarios.entry(i.scenario.name().to_owned()).or_default() += 1;
    }
    let secs = outcome.elapsed.as_secs_f64().max(1e-9);
    let (violations, violation_count) = ctx.violations.take();
    Ok(Report {
        requests: figures.attempts,
        throughput_rps: figures.attempts as f64 / secs,
        latency_ms: Percentiles::of(&figures.latency),
        status: figures.status,
        invariants: Invariants {
            ok: violation_count == 0,
            violations,
            violation_count,
        },
        intents,
        intents_per_s: intents as f64 / secs,
        acknowledged,
        unacknowledged: intents - acknowledged,
        committed_unanswered,
        dropped: outcome.dropped,
        scenarios,
        intent_latency_ms: Percentiles::of(&figures.intent_latency),
        elapsed_s: outcome.elapsed.as_secs_f64(),
        mode: mode.to_string(),
        mix: args.mix.to_string(),
        seed,
        verification,
    })
}

/// Creates a client for this run through the payrail library, the way
/// `payrail client create` does; returns its API key.
async fn create_client(args: &Args, run_id: &str) -> anyhow::Result<String> {
    // Parsed through payrail's own flags so every field it may gain gets its
    // default (and its env var), instead of this crate guessing them.
    #[derive(Parser)]
    struct Db {
        #[command(flatten)]
        database: payrail::config::DatabaseConfig,
    }
    let url = args
        .database_url
        .as_deref()
        .context("--create-client needs --database-url or DATABASE_URL")?;
    let db = Db::try_parse_from(["payrail-loadtest", "--database-url", url])
        .context("database settings")?
        .database;
    let store = payrail::store::Store::connect(&db).context("connecting to Postgres")?;
    let (_, key) = store
        .create_client(&format!("payrail-loadtest-{run_id}"))
        .await
        .context("creating a client (has `payrail migrate` run?)")?;
    Ok(key.expose_secret().to_owned())
}
