//! Isolation between tenants: one client sending faster than a slow
//! provider settles, or an operator's bulk retry of one client's parked
//! rows, neither refuses nor delays another client. Against provider-sim
//! answering every call after one second, over real HTTP and a real
//! Postgres.
//!
//! One test function runs every scenario in turn: they measure latencies,
//! and two of them at once on the same cores would measure each other.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fresh_database, new_key, spawn_relaying, spawn_sim, transfer_body, TestApp};
use payrail::sim::SimArgs;
use reqwest::StatusCode;
use uuid::Uuid;

/// The provider answers every call after this long.
const PROVIDER_LATENCY_MS: u64 = 1000;
/// B's pace: a small tenant.
const B_PER_SECOND: u64 = 5;

/// Flags of the engine: A is held to 200 creates/s, above what the relay
/// settles against a provider answering in 1 s (128 calls in flight: 128/s).
const FLAGS: &[&str] = &["--rate-limit", "200", "--rate-limit-burst", "200"];

/// What B saw over one scenario.
struct BRun {
    ids: Vec<String>,
    /// Answers other than 201, with their problem type.
    refused: Vec<(StatusCode, String)>,
}

/// B creates `B_PER_SECOND` transfers a second for `seconds`.
async fn b_creates(app: &TestApp, b_key: &str, seconds: u64) -> BRun {
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / B_PER_SECOND));
    let mut sends = Vec::new();
    for _ in 0..seconds * B_PER_SECOND {
        tick.tick().await;
        let http = app.http.clone();
        let url = format!("{}/transfers", app.address);
        let key = b_key.to_owned();
        sends.push(tokio::spawn(async move {
            let res = http
                .post(url)
                .bearer_auth(key)
                .header("Idempotency-Key", new_key())
                .json(&transfer_body())
                .send()
                .await
                .expect("request sent");
            let status = res.status();
            let body: serde_json::Value = res.json().await.unwrap_or_default();
            (status, body)
        }));
    }
    let mut run = BRun {
        ids: Vec::new(),
        refused: Vec::new(),
    };
    for send in sends {
        let (status, body) = send.await.unwrap();
        if status == StatusCode::CREATED {
            run.ids.push(body["id"].as_str().unwrap().to_owned());
        } else {
            run.refused
                .push((status, body["type"].as_str().unwrap_or("").to_owned()));
        }
    }
    run
}

/// A at (past) its rate limit until `stop`: 250 attempts a second, 64 at
/// most at once. Counts A's `503 settlement-lagging`.
fn a_floods(app: &TestApp, stop: Arc<AtomicBool>, lagging: Arc<AtomicUsize>) {
    let http = app.http.clone();
    let url = format!("{}/transfers", app.address);
    let key = app.api_key.clone();
    let slots = Arc::new(tokio::sync::Semaphore::new(64));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(4));
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                continue;
            };
            let (http, url, key, lagging) =
                (http.clone(), url.clone(), key.clone(), lagging.clone());
            tokio::spawn(async move {
                let _slot = slot;
                if let Ok(res) = http
                    .post(url)
                    .bearer_auth(key)
                    .header("Idempotency-Key", new_key())
                    .json(&transfer_body())
                    .send()
                    .await
                {
                    if res.status() == StatusCode::SERVICE_UNAVAILABLE {
                        let body: serde_json::Value = res.json().await.unwrap_or_default();
                        if body["type"]
                            .as_str()
                            .unwrap_or("")
                            .ends_with("settlement-lagging")
                        {
                            lagging.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
}

/// Waits until every one of `ids` is final, then reads each one's time
/// from creation to its final status by Postgres's clock (the status
/// change stamps `updated_at`), sorted.
async fn creation_to_final(app: &TestApp, ids: &[String]) -> Vec<f64> {
    let ids: Vec<Uuid> = ids.iter().map(|i| i.parse().unwrap()).collect();
    let db = app.db().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let open: i64 = db
            .query_one(
                "SELECT count(*) FROM transfers WHERE id = ANY($1) AND status IN ('pending', 'processing')",
                &[&ids],
            )
            .await
            .unwrap()
            .get(0);
        if open == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{open} of B's transfers never became final"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut ages: Vec<f64> = db
        .query(
            "SELECT EXTRACT(EPOCH FROM updated_at - created_at)::float8 FROM transfers WHERE id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    ages.sort_by(f64::total_cmp);
    assert_eq!(ages.len(), ids.len());
    ages
}

fn p99(sorted: &[f64]) -> f64 {
    assert!(!sorted.is_empty());
    sorted[((sorted.len() as f64 * 0.99).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// B alone for `seconds`: its p99 from creation to final, the baseline.
async fn b_alone(app: &TestApp, b_key: &str, seconds: u64) -> f64 {
    let run = b_creates(app, b_key, seconds).await;
    assert!(
        run.refused.is_empty(),
        "B alone was refused: {:?}",
        run.refused
    );
    let ages = creation_to_final(app, &run.ids).await;
    let p = p99(&ages);
    // The provider's second, and little else.
    assert!(p >= PROVIDER_LATENCY_MS as f64 / 1000.0, "{p}");
    p
}

/// B beside a noisy A: never refused, and its p99 within twice `alone`.
fn assert_b_unharmed(what: &str, run: &BRun, ages: &[f64], alone: f64) {
    assert!(
        run.refused.is_empty(),
        "{what}: B was refused {} times, first {:?}",
        run.refused.len(),
        run.refused.first()
    );
    let with = p99(ages);
    eprintln!(
        "{what}: B's creation-to-final p99 {with:.3} s against {alone:.3} s alone ({} transfers)",
        ages.len()
    );
    assert!(
        with <= 2.0 * alone,
        "{what}: B's p99 {with:.3} s is more than twice its {alone:.3} s alone"
    );
}

#[actix_web::test]
async fn one_tenant_past_its_settlement_or_a_bulk_retry_neither_refuses_nor_delays_another() {
    let sim = spawn_sim(SimArgs {
        latency_ms: PROVIDER_LATENCY_MS,
        ..Default::default()
    })
    .await;

    // A at its rate limit against a provider that settles 128 a second.
    let app = spawn_relaying(&fresh_database().await, &sim.url(), FLAGS).await;
    let b_key = app.other_client().await;
    let alone = b_alone(&app, &b_key, 20).await;
    let (stop, a_lagging) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    a_floods(&app, stop.clone(), a_lagging.clone());
    // Long enough for A's own backlog to pass --outbox-lag-max (10 s).
    tokio::time::sleep(Duration::from_secs(12)).await;
    let run = b_creates(&app, &b_key, 60).await;
    stop.store(true, Ordering::Relaxed);
    let ages = creation_to_final(&app, &run.ids).await;
    assert_b_unharmed("A at its rate limit", &run, &ages, alone);
    assert!(
        a_lagging.load(Ordering::Relaxed) > 0,
        "A outran its settlement and was never refused for it: the scenario did not load the relay"
    );
    app.stop().await;

    // An operator's bulk retry of 10 000 of A's parked rows.
    let app = spawn_relaying(&fresh_database().await, &sim.url(), FLAGS).await;
    let b_key = app.other_client().await;
    let alone = b_alone(&app, &b_key, 20).await;
    park(&app, 10_000).await;
    let operator = operator(&app).await;
    let retried = app
        .store
        .console()
        .retry_dead(&operator, None, None, 10_000, 500)
        .await
        .unwrap();
    assert_eq!(retried, 10_000);
    let run = b_creates(&app, &b_key, 60).await;
    let ages = creation_to_final(&app, &run.ids).await;
    assert_b_unharmed("a bulk retry of 10 000 rows", &run, &ages, alone);
    let settled: i64 = app
        .db()
        .await
        .query_one(
            "SELECT count(*) FROM transfers WHERE client_id = $1 AND status = 'succeeded'",
            &[&app.client_id],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        settled > 1000,
        "the retried rows were being settled meanwhile: {settled}"
    );
    app.stop().await;
}

/// `n` of the app's client's transfers whose outbox rows are dead
/// (parked by an outage, say).
async fn park(app: &TestApp, n: i64) {
    let db = app.db().await;
    db.execute(
        "WITH t AS (
            INSERT INTO transfers (id, client_id, idempotency_key, status, amount, currency,
                                   source_account, destination_account, created_at, updated_at)
            SELECT gen_random_uuid(), $1, 'parked-' || i, 'pending', 100, 'EUR', 'acc_a', 'acc_b', now(), now()
            FROM generate_series(1, $2::int8) i
            RETURNING id, client_id
         )
         INSERT INTO outbox (transfer_id, client_id, attempts, attempts_base, last_error, dead_at)
         SELECT id, client_id, 20, 0, 'provider answered 503', now() FROM t",
        &[&app.client_id, &n],
    )
    .await
    .unwrap();
}

/// A console operator and a session of theirs.
async fn operator(app: &TestApp) -> payrail::store::console::OperatorSession {
    let id = Uuid::now_v7();
    app.db()
        .await
        .execute(
            "INSERT INTO operators (id, name, token_hash) VALUES ($1, 'ops', sha256($2::text::bytea))",
            &[&id, &id.to_string()],
        )
        .await
        .unwrap();
    payrail::store::console::OperatorSession {
        operator_id: id,
        operator_name: "ops".into(),
        csrf_token: String::new(),
        expires_at: chrono::Utc::now() + chrono::Duration::hours(1),
    }
}
