//! Bounded settlement lag: while more outbox rows wait for a relay than
//! `--outbox-backlog-max` (or the oldest has waited past
//! `--outbox-lag-max`), new transfers are refused with `503
//! settlement-lagging`, and accepted again once settlement caught up.
//! Against provider-sim over real HTTP and a real Postgres.

mod common;

use std::time::{Duration, Instant};

use common::{
    assert_problem, fresh_database, new_key, spawn_relaying, spawn_sim, transfer_body, wait_for,
    TestApp,
};
use payrail::sim::{SimArgs, SimServer};
use reqwest::StatusCode;

/// Rows due and held by no relay: what the bound is about.
const WAITING: &str = "SELECT count(*) FROM outbox \
    WHERE dead_at IS NULL AND available_at <= now() AND locked_until IS NULL";

#[actix_web::test]
async fn creates_are_refused_while_settlement_lags_and_accepted_once_it_caught_up() {
    // About 10 settlements/s (two calls in flight, 200 ms each), offered
    // far more creates than that for 4 s.
    let (_sim, app) = relaying_to_a_slow_provider(
        200,
        &[
            "--relay-concurrency",
            "2",
            "--relay-queue",
            "4",
            "--outbox-backlog-max",
            "20",
            "--outbox-lag-max",
            "30s",
        ],
    )
    .await;
    let db = app.db().await;
    let body = transfer_body();
    let (mut created, mut refused) = (Vec::new(), Vec::new());
    let mut waiting_max = 0i64;
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let keys: Vec<String> = (0..8).map(|_| new_key()).collect();
        let answers =
            futures::future::join_all(keys.iter().map(|k| app.post_transfer(k, &body))).await;
        for (key, res) in keys.into_iter().zip(answers) {
            match res.status() {
                StatusCode::CREATED => created.push(
                    res.json::<serde_json::Value>().await.unwrap()["id"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                ),
                StatusCode::SERVICE_UNAVAILABLE => {
                    assert_eq!(
                        res.headers().get("retry-after").unwrap(),
                        "1",
                        "a refusal says when to retry"
                    );
                    assert_problem(res, StatusCode::SERVICE_UNAVAILABLE, "settlement-lagging")
                        .await;
                    refused.push(key);
                }
                other => panic!("unexpected answer {other}"),
            }
        }
        let waiting: i64 = db.query_one(WAITING, &[]).await.unwrap().get(0);
        waiting_max = waiting_max.max(waiting);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !refused.is_empty(),
        "creates outran settlement and none was refused"
    );
    assert!(!created.is_empty());
    // The bound, plus what was admitted between two measurements (50 ms)
    // and flushes already under way; without the bound about a thousand.
    assert!(
        waiting_max <= 60,
        "{waiting_max} rows waited for a relay (bound 20)"
    );

    // Every admitted transfer settles; then creates are accepted again, and
    // a refused intent's retry with its key creates it.
    for id in &created {
        assert_eq!(app.wait_final(id).await["status"], "succeeded");
    }
    let retry = refused[0].clone();
    wait_for(
        "creates accepted again",
        Duration::from_secs(10),
        || async { app.post_transfer(&retry, &body).await.status() == StatusCode::CREATED },
    )
    .await;
    let refusals = gauge(&app, "payrail_transfers_refused_lagging_total").await;
    assert!(refusals >= refused.len() as f64, "{refusals}");
}

#[actix_web::test]
async fn an_old_waiting_row_refuses_creates_even_when_few_wait() {
    // One call at a time taking 1 s, a lag bound of 1 s: a handful of rows
    // is enough to be late.
    let (_sim, app) = relaying_to_a_slow_provider(
        1000,
        &[
            "--relay-concurrency",
            "1",
            "--relay-queue",
            "1",
            "--outbox-lag-max",
            "1s",
        ],
    )
    .await;
    let body = transfer_body();
    for _ in 0..4 {
        assert_eq!(
            app.post_transfer(&new_key(), &body).await.status(),
            StatusCode::CREATED
        );
    }
    // Asked every 300 ms: the backlog grows by a few rows until the gate
    // closes, then by none.
    wait_for("a refusal", Duration::from_secs(10), || async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let res = app.post_transfer(&new_key(), &body).await;
        if res.status() != StatusCode::SERVICE_UNAVAILABLE {
            return false;
        }
        assert_problem(res, StatusCode::SERVICE_UNAVAILABLE, "settlement-lagging").await;
        true
    })
    .await;
    wait_for(
        "creates accepted again",
        Duration::from_secs(30),
        || async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            app.post_transfer(&new_key(), &body).await.status() == StatusCode::CREATED
        },
    )
    .await;
}

/// provider-sim answering after `latency_ms`, and an engine on a fresh
/// database relaying to it with `flags` that measures its lag every 50 ms.
async fn relaying_to_a_slow_provider(latency_ms: u64, flags: &[&str]) -> (SimServer, TestApp) {
    let sim = spawn_sim(SimArgs {
        latency_ms,
        ..SimArgs::default()
    })
    .await;
    let mut flags = flags.to_vec();
    flags.extend(["--outbox-lag-poll", "50ms"]);
    let app = spawn_relaying(&fresh_database().await, &sim.url(), &flags).await;
    (sim, app)
}

/// A value of `/metrics` without labels (0 when absent). The recorder is
/// the test binary's: counters add up over its tests.
async fn gauge(app: &TestApp, name: &str) -> f64 {
    let metrics = app.get("/metrics").await.text().await.unwrap();
    metrics
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}
