//! the outbox relay against provider-sim over real HTTP.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    fresh_database, sim_stats, spawn_app_with, spawn_relaying, spawn_sim, transfer_body, wait_for,
    TestApp,
};
use payrail::sim::wire::Stats;
use payrail::sim::{SimArgs, SimServer};
use serde_json::{json, Value};

/// A provider-sim answering after `latency_ms`, and `n` transfers written
/// to a fresh database by a process without a relay, still pending: the
/// sim, the database, that process and the transfers' ids.
async fn pending_behind_a_slow_sim(
    n: usize,
    latency_ms: u64,
) -> (SimServer, String, TestApp, Vec<String>) {
    let sim = spawn_sim(SimArgs {
        latency_ms,
        ..SimArgs::default()
    })
    .await;
    let db = fresh_database().await;
    let quiet = spawn_app_with(&db, &[]).await;
    let ids = quiet.create_transfers(n, &transfer_body()).await;
    (sim, db, quiet, ids)
}

/// Starts a relaying process on `db` (acting for `quiet`'s client) and
/// waits, at most `within`, until all `n` transfers there succeeded;
/// returns it and the sim's counters then.
async fn relay_until_all_succeed(
    db: &str,
    sim: &SimServer,
    quiet: &TestApp,
    extra: &[&str],
    n: i64,
    within: Duration,
) -> (TestApp, Stats) {
    let app = spawn_relaying(db, &sim.url(), extra)
        .await
        .acting_for(quiet);
    wait_for(&format!("{n} succeeded transfers"), within, || async {
        app.count_status("succeeded").await == n
    })
    .await;
    let stats = sim_stats(sim).await;
    (app, stats)
}

/// provider-sim's own record of the payout of transfer `id`.
async fn provider_record(sim: &SimServer, id: &str) -> Value {
    reqwest::get(format!("{}/payouts/{id}", sim.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[actix_web::test]
async fn an_executed_payout_makes_the_transfer_succeed_with_the_reference() {
    let sim = spawn_sim(SimArgs::default()).await;
    let app = spawn_relaying(&fresh_database().await, &sim.url(), &[]).await;
    let id = app.create_transfers(1, &transfer_body()).await.remove(0);

    let t = app.wait_final(&id).await;
    assert_eq!(t["status"], "succeeded");
    assert!(t["provider_reference"]
        .as_str()
        .unwrap()
        .starts_with("sim_"));
    assert!(t["failure_reason"].is_null());
    assert_ne!(t["updated_at"], t["created_at"]);
    assert_eq!(
        app.count("outbox").await,
        0,
        "the row completes with the status"
    );
    let record = provider_record(&sim, &id).await;
    assert_eq!(record["amount"], 1500);
    assert_eq!(record["destination_account"], "acc_bob");
    assert_eq!(sim_stats(&sim).await.executions, 1);
}

#[actix_web::test]
async fn a_declined_payout_fails_the_transfer_with_the_reason() {
    let sim = spawn_sim(SimArgs::default()).await;
    let app = spawn_relaying(&fresh_database().await, &sim.url(), &[]).await;
    let mut body = transfer_body();
    body["destination_account"] = json!("decline_me");
    let id = app.create_transfers(1, &body).await.remove(0);

    let t = app.wait_final(&id).await;
    assert_eq!(t["status"], "failed");
    assert_eq!(t["failure_reason"], "insufficient_funds");
    assert!(t["provider_reference"].is_null());
}

#[actix_web::test]
async fn a_permanent_provider_error_fails_the_transfer() {
    let sim = spawn_sim(SimArgs::default()).await;
    let db = fresh_database().await;
    // First without a relay, so the payout can be pre-empted at the provider
    // with a different body under the same business id: a permanent 422.
    let quiet = spawn_app_with(&db, &[]).await;
    let id = quiet.create_transfers(1, &transfer_body()).await.remove(0);
    let res = reqwest::Client::new()
        .post(format!("{}/payouts", sim.url()))
        .header("Idempotency-Key", &id)
        .json(&json!({"transfer_id": id, "account_owner": quiet.client_id,
                      "amount": 1, "currency": "USD",
                      "source_account": "x", "destination_account": "y"}))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success());

    let app = spawn_relaying(&db, &sim.url(), &[])
        .await
        .acting_for(&quiet);
    let t = app.wait_final(&id).await;
    assert_eq!(t["status"], "failed");
    assert!(t["failure_reason"].as_str().unwrap().contains("422"), "{t}");
}

#[actix_web::test]
async fn transient_failures_are_retried_no_sooner_than_retry_after() {
    let sim = spawn_sim(SimArgs {
        fail_rate: 1.0,
        ..SimArgs::default()
    })
    .await;
    let app = spawn_relaying(
        &fresh_database().await,
        &sim.url(),
        &["--relay-retry-cap", "5s"],
    )
    .await;
    let id = app.create_transfers(1, &transfer_body()).await.remove(0);
    let db = app.db().await;

    let first_failure = || async {
        let row = db
            .query_one(
                "SELECT attempts, last_error, EXTRACT(EPOCH FROM available_at - now())::float8 FROM outbox",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, Option<String>>(1)
            .map(|e| (row.get::<_, i32>(0), e, row.get::<_, f64>(2)))
    };
    wait_for(
        "the first failed attempt",
        Duration::from_secs(10),
        || async { first_failure().await.is_some() },
    )
    .await;
    let (attempts, error, due_in) = first_failure().await.unwrap();
    assert_eq!(attempts, 1);
    assert!(error.contains("503"), "{error}");
    // The sim says Retry-After: 1; the backoff alone would be under 20 ms.
    assert!(due_in > 0.5, "next attempt due in {due_in}s");
    wait_for("a second attempt", Duration::from_secs(10), || async {
        db.query_one("SELECT attempts FROM outbox", &[])
            .await
            .unwrap()
            .get::<_, i32>(0)
            >= 2
    })
    .await;
    assert_eq!(&app.transfer(&id).await["status"], "pending");
    assert_eq!(sim_stats(&sim).await.executions, 0);
}

#[actix_web::test]
async fn under_provider_faults_every_transfer_executes_exactly_once() {
    let sim = spawn_sim(SimArgs {
        fail_rate: 0.2,
        ambiguous_rate: 0.1,
        ..SimArgs::default()
    })
    .await;
    let app = spawn_relaying(
        &fresh_database().await,
        &sim.url(),
        &["--relay-retry-cap", "200ms"],
    )
    .await;
    app.create_transfers(500, &transfer_body()).await;

    wait_for(
        "500 succeeded transfers",
        Duration::from_secs(90),
        || async { app.count_status("succeeded").await == 500 },
    )
    .await;
    let stats = sim_stats(&sim).await;
    assert_eq!(stats.executions, 500);
    assert_eq!(stats.distinct_ids, 500);
    assert!(
        stats.requests > stats.executions,
        "faults forced retries: {stats:?}"
    );
    assert_eq!(app.count("outbox").await, 0);
}

#[actix_web::test]
async fn flushes_without_a_relay_wake_the_relay_of_another_process() {
    let sim = spawn_sim(SimArgs::default()).await;
    let db = fresh_database().await;
    // It polls once a minute: only a notification makes it claim sooner.
    let relaying =
        spawn_app_with(&db, &["--provider-url", &sim.url(), "--relay-poll", "60s"]).await;
    let quiet = spawn_app_with(&db, &[]).await;
    // Its LISTEN in effect, the relay catches up once (on an empty outbox);
    // the transfers below come after that.
    let listening = || async {
        let n: i64 = relaying
            .db()
            .await
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'payrail-listen-payrail_outbox'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        n == 1
    };
    wait_for("the relay's LISTEN", Duration::from_secs(10), listening).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Two flushes apart, each of which must lead to a NOTIFY of its own.
    for n in 1..=2 {
        quiet.create_transfers(1, &transfer_body()).await;
        wait_for(
            &format!("{n} succeeded transfers, long before the next poll"),
            Duration::from_secs(10),
            || async { quiet.count_status("succeeded").await == n },
        )
        .await;
    }
    assert_eq!(sim_stats(&sim).await.executions, 2);
}

#[actix_web::test]
async fn the_relay_keeps_one_provider_connection_per_call_in_flight() {
    // Calls slow enough that the relay keeps all 48 of its calls in flight:
    // more than a client pool of reqwest's usual size keeps idle. Each
    // burst of answers must go back to the pool, not be closed and
    // reopened by the next burst.
    let (sim, db, quiet, _) = pending_behind_a_slow_sim(480, 100).await;
    let (_, stats) = relay_until_all_succeed(
        &db,
        &sim,
        &quiet,
        &["--relay-concurrency", "48"],
        480,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(stats.executions, 480);
    // 48 for the relay, one for this request for the stats.
    assert!(
        stats.connections <= 49,
        "the relay reconnected: {} connections for 48 calls in flight",
        stats.connections
    );
}

#[actix_web::test]
async fn a_fresh_process_is_ready_with_its_connections_open() {
    let sim = spawn_sim(SimArgs {
        latency_ms: 200,
        ..SimArgs::default()
    })
    .await;
    let db = fresh_database().await;
    let app = spawn_relaying(
        &db,
        &sim.url(),
        &[
            "--relay-concurrency",
            "16",
            "--shards",
            "2",
            "--shard-flushes",
            "2",
            "--auth-db-pool-size",
            "2",
        ],
    )
    .await;

    // Before any transfer: the relay's 16 connections to the provider,
    // opened by lookups (no payout was posted), and one for this request.
    let warm = sim_stats(&sim).await;
    assert_eq!(warm.connections, 16 + 1, "{warm:?}");
    assert_eq!(warm.requests, 0, "warming posts no payout");
    // And Postgres's: 2 per shard, the relay's own 4, the authentication
    // pool's 2, and the one that ran the migrations.
    let backends: i64 = app
        .db()
        .await
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'payrail' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(backends > 2 * 2 + 4 + 2, "{backends} connections open");

    // A first burst of 16 calls (each takes 200 ms, so they overlap) finds
    // them open: the provider sees no new connection but the next stats
    // request's.
    app.create_transfers(16, &transfer_body()).await;
    wait_for(
        "16 succeeded transfers",
        Duration::from_secs(30),
        || async { app.count_status("succeeded").await == 16 },
    )
    .await;
    let after = sim_stats(&sim).await;
    assert_eq!(after.executions, 16);
    assert_eq!(after.connections, warm.connections + 1, "{after:?}");
}

#[actix_web::test]
async fn two_processes_drain_one_outbox_without_sending_a_row_twice() {
    let sim = spawn_sim(SimArgs {
        latency_ms: 20,
        ..SimArgs::default()
    })
    .await;
    let db = fresh_database().await;
    let a = spawn_relaying(&db, &sim.url(), &[]).await;
    let b = spawn_relaying(&db, &sim.url(), &[]).await;
    let body = transfer_body();
    let (x, y) = futures::join!(
        a.create_transfers(100, &body),
        b.create_transfers(100, &body)
    );
    assert_eq!(x.len() + y.len(), 200);

    wait_for(
        "200 succeeded transfers",
        Duration::from_secs(60),
        || async { a.count_status("succeeded").await == 200 },
    )
    .await;
    let stats = sim_stats(&sim).await;
    assert_eq!(stats.executions, 200);
    // No faults were injected, so any repeat would be a row sent twice.
    assert_eq!(stats.requests, 200, "{stats:?}");
    assert_eq!(stats.replays, 0);
}

#[actix_web::test]
async fn a_dead_letter_waits_for_an_operator_and_then_succeeds() {
    let broken = spawn_sim(SimArgs {
        fail_rate: 1.0,
        ..SimArgs::default()
    })
    .await;
    let db = fresh_database().await;
    let app = spawn_relaying(
        &db,
        &broken.url(),
        &["--relay-attempts-max", "3", "--relay-retry-cap", "50ms"],
    )
    .await;
    let id = app.create_transfers(1, &transfer_body()).await.remove(0);
    let conn = app.db().await;
    wait_for("a dead letter", Duration::from_secs(15), || async {
        conn.query_one("SELECT dead_at IS NOT NULL FROM outbox", &[])
            .await
            .unwrap()
            .get::<_, bool>(0)
    })
    .await;
    assert_eq!(
        sim_stats(&broken).await.requests,
        3,
        "exactly --relay-attempts-max calls"
    );
    assert_eq!(&app.transfer(&id).await["status"], "pending");

    let listed = payrail_cli(&["outbox", "list", "--dead", "--database-url", &db]);
    assert!(listed.status.success());
    let line: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(line["transfer_id"], id);
    assert_eq!(line["attempts"], 3);
    app.stop().await;

    let healthy = spawn_sim(SimArgs::default()).await;
    let app = spawn_relaying(&db, &healthy.url(), &[])
        .await
        .acting_for(&app);
    let retried = payrail_cli(&["outbox", "retry", &id, "--database-url", &db]);
    assert!(
        retried.status.success(),
        "{}",
        String::from_utf8_lossy(&retried.stderr)
    );
    assert_eq!(app.wait_final(&id).await["status"], "succeeded");
    let again = payrail_cli(&["outbox", "retry", &id, "--database-url", &db]);
    assert!(!again.status.success(), "no dead row is left to retry");
}

fn payrail_cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_payrail"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[actix_web::test]
async fn rows_held_by_a_killed_process_are_taken_over_after_the_lease() {
    let (sim, db, quiet, ids) = pending_behind_a_slow_sim(10, 1500).await;

    let mut victim = Command::new(env!("CARGO_BIN_EXE_payrail"))
        .args([
            "serve",
            "--database-url",
            &db,
            "--listen",
            "127.0.0.1:0",
            "--provider-url",
            &sim.url(),
        ])
        .args([
            "--relay-lease",
            "9s",
            "--provider-timeout",
            "2s",
            "--db-timeout",
            "1s",
            "--relay-poll",
            "100ms",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let conn = quiet.db().await;
    wait_for(
        "the victim to hold rows and call the provider",
        Duration::from_secs(20),
        || async {
            let held: i64 = conn
                .query_one(
                    "SELECT count(*) FROM outbox WHERE locked_until > now()",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            held == 10 && sim_stats(&sim).await.requests >= 1
        },
    )
    .await;
    victim.kill().unwrap();
    victim.wait().unwrap();

    let (rescuer, stats) = relay_until_all_succeed(
        &db,
        &sim,
        &quiet,
        &["--relay-poll", "100ms"],
        10,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(stats.executions, 10);
    assert_eq!(stats.distinct_ids, 10);
    for id in ids {
        assert!(&rescuer.transfer(&id).await["provider_reference"].is_string());
    }
}

#[actix_web::test]
async fn every_payout_names_its_owner_so_no_client_debits_anothers_account() {
    let sim = spawn_sim(SimArgs::default()).await;
    let app = spawn_relaying(&fresh_database().await, &sim.url(), &[]).await;
    // Both clients name the same source account.
    let mine = app.create_transfers(1, &transfer_body()).await.remove(0);
    let other_key = app.other_client().await;
    let theirs = common::create_via(&app.address, &other_key).await;
    let other_client: uuid::Uuid = app
        .db()
        .await
        .query_one(
            "SELECT client_id FROM transfers WHERE id = $1::text::uuid",
            &[&theirs],
        )
        .await
        .unwrap()
        .get(0);
    assert_ne!(other_client, app.client_id);
    wait_for("both to succeed", Duration::from_secs(20), || async {
        app.count_status("succeeded").await == 2
    })
    .await;
    for (id, owner) in [(&mine, app.client_id), (&theirs, other_client)] {
        let record = provider_record(&sim, id).await;
        assert_eq!(record["source_account"], "acc_alice");
        assert_eq!(
            record["account_owner"],
            owner.to_string(),
            "the provider debits acc_alice of the client that created the transfer"
        );
    }
}

#[actix_web::test]
async fn creation_to_final_time_is_a_histogram_in_metrics() {
    let sim = spawn_sim(SimArgs::default()).await;
    let app = spawn_relaying(&fresh_database().await, &sim.url(), &[]).await;
    let id = app.create_transfers(1, &transfer_body()).await.remove(0);
    assert_eq!(app.wait_final(&id).await["status"], "succeeded");
    let text = app.get("/metrics").await.text().await.unwrap();
    let count = text
        .lines()
        .find_map(|l| l.strip_prefix("payrail_transfer_creation_to_final_seconds_count "))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .expect("the histogram is exported");
    assert!(count >= 1.0, "{count}");
    // Its buckets reach past the latency buckets' 10 s: a final status
    // may come minutes after the creation.
    assert!(
        text.contains("payrail_transfer_creation_to_final_seconds_bucket{le=\"3600\"}"),
        "{text}"
    );
}

#[actix_web::test]
async fn an_outbox_row_written_without_its_client_by_the_release_before_is_still_settled() {
    // During a rolling deploy an engine of the release before writes its
    // outbox rows without their client. The fair claim walks rows client
    // by client: such a row must be given its client and settled.
    let sim = spawn_sim(SimArgs::default()).await;
    let app = spawn_relaying(&fresh_database().await, &sim.url(), &[]).await;
    let id = uuid::Uuid::now_v7();
    app.db()
        .await
        .execute(
            "WITH t AS (
                INSERT INTO transfers (id, client_id, idempotency_key, status, amount, currency,
                                       source_account, destination_account, created_at, updated_at)
                VALUES ($1, $2, 'from-the-release-before', 'pending', 100, 'EUR', 'acc_a', 'acc_b', now(), now())
                RETURNING id)
             INSERT INTO outbox (transfer_id) SELECT id FROM t",
            &[&id, &app.client_id],
        )
        .await
        .unwrap();
    let t = app.wait_final(&id.to_string()).await;
    assert_eq!(t["status"], "succeeded", "{t}");
    assert_eq!(app.count("outbox").await, 0);
}
