//! `failed` means "declined, or provably never executed": real `serve`
//! processes killed, stopped and restarted, provider-sim refusing repeats,
//! and a gateway of the test's own where the provider should be.

mod common;

use std::time::Duration;

use common::{
    answering, connect, create_via, fresh_database, new_client_key, sim_stats, spawn_sim, wait_for,
    ServeProcess,
};
use payrail::sim::{SimArgs, SimServer};

/// A provider that takes 3 s to answer and refuses every repeat with `403`
/// (its API key was rotated between attempts).
async fn slow_sim_refusing_repeats() -> SimServer {
    spawn_sim(SimArgs {
        latency_ms: 3000,
        repeat_reject_rate: 1.0,
        ..SimArgs::default()
    })
    .await
}

/// `serve` relaying to `provider`, with a lease of 13 s (2 × 4 s of
/// provider timeout and 3 × 1 s of settlement tries fit in it).
async fn serve(db: &str, provider: &str, tag: &str, extra: &[&str]) -> ServeProcess {
    let mut flags = vec![
        "--provider-url",
        provider,
        "--provider-timeout",
        "4s",
        "--db-timeout",
        "1s",
        "--relay-lease",
        "13s",
        "--relay-poll",
        "100ms",
        "--provider-poll-scan-interval",
        "100ms",
        "--relay-retry-base",
        "20ms",
        "--relay-retry-cap",
        "200ms",
    ];
    flags.extend_from_slice(extra);
    let log = std::env::temp_dir().join(format!("payrail-never-wrongly-final-{tag}.log"));
    ServeProcess::start(db, &flags, "info", &log).await
}

async fn status(db: &str, id: &str) -> String {
    connect(db)
        .await
        .query_one(
            "SELECT status FROM transfers WHERE id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .get(0)
}

async fn wait_until_sent(sim: &SimServer, posts: u64) {
    wait_for(
        "the payout to reach the provider",
        Duration::from_secs(20),
        || async { sim_stats(sim).await.requests >= posts },
    )
    .await;
}

/// What the provider's own record says.
async fn provider_status(sim: &SimServer, id: &str) -> String {
    let record: serde_json::Value = reqwest::get(format!("{}/payouts/{id}", sim.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    record["status"].as_str().unwrap_or("none").to_owned()
}

#[actix_web::test]
async fn a_payout_executed_while_its_holder_was_killed_is_never_called_failed() {
    let sim = slow_sim_refusing_repeats().await;
    let db = fresh_database().await;
    let mut first = serve(&db, &sim.url(), "sigkill-1", &[]).await;
    let key = new_client_key(&db).await;
    let id = create_via(&first.base, &key).await;
    wait_until_sent(&sim, 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    first.kill();

    // The next holder takes the row over after its lease: the repeat would
    // be refused with a 403, but the provider's record is asked first.
    let second = serve(&db, &sim.url(), "sigkill-2", &[]).await;
    wait_for("a final status", Duration::from_secs(40), || async {
        status(&db, &id).await != "pending"
    })
    .await;
    assert_eq!(provider_status(&sim, &id).await, "succeeded");
    assert_eq!(status(&db, &id).await, "succeeded");
    let stats = sim_stats(&sim).await;
    assert_eq!(stats.executions, 1);
    assert_eq!(stats.requests, 1, "looked up, not posted again");
    drop(second);
}

#[actix_web::test]
async fn a_sigterm_lets_the_call_in_flight_finish_and_records_it() {
    let sim = slow_sim_refusing_repeats().await;
    let db = fresh_database().await;
    let mut serve = serve(&db, &sim.url(), "sigterm", &["--shutdown-grace", "10s"]).await;
    let key = new_client_key(&db).await;
    let id = create_via(&serve.base, &key).await;
    wait_until_sent(&sim, 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &serve.child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    // It exits by itself once the answer (2 s later) is recorded.
    let exited = tokio::task::spawn_blocking(move || {
        let status = serve.child.wait();
        (status, serve)
    });
    let (exit, serve) = tokio::time::timeout(Duration::from_secs(15), exited)
        .await
        .expect("serve exits within its grace")
        .unwrap();
    assert!(exit.unwrap().success(), "a graceful exit");
    assert_eq!(
        status(&db, &id).await,
        "succeeded",
        "recorded before the exit"
    );
    assert_eq!(sim_stats(&sim).await.requests, 1);
    let outbox: i64 = connect(&db)
        .await
        .query_one("SELECT count(*) FROM outbox", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(outbox, 0);
    drop(serve);
}

#[actix_web::test]
async fn a_wrong_provider_url_parks_payouts_and_finalizes_none() {
    // The payout executes but its answer is lost.
    let sim = spawn_sim(SimArgs {
        ambiguous_rate: 1.0,
        ..SimArgs::default()
    })
    .await;
    let db = fresh_database().await;
    // One attempt only, so the row is dead-lettered with the outcome unknown.
    let mut right = serve(&db, &sim.url(), "url-right", &["--relay-attempts-max", "1"]).await;
    let key = new_client_key(&db).await;
    let executed = create_via(&right.base, &key).await;
    let conn = connect(&db).await;
    wait_for(
        "the lost answer to be recorded",
        Duration::from_secs(20),
        || async {
            conn.query_one(
                "SELECT count(*) FROM outbox WHERE ambiguous AND dead_at IS NOT NULL",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
                == 1
        },
    )
    .await;
    right.kill();

    // Restarted against a gateway that answers every path with an HTML 404,
    // and the operator retries the dead row there.
    let (gateway, gateway_handle) =
        answering(404, "text/html", "<html><body>404 Not Found</body></html>").await;
    let wrong = serve(&db, &gateway, "url-wrong", &["--relay-attempts-max", "3"]).await;
    let store = payrail::store::Store::connect(
        &payrail::cli::serve_config(["--database-url", db.as_str()])
            .unwrap()
            .database,
    )
    .unwrap();
    assert!(store
        .outbox()
        .retry(executed.parse().unwrap(), "cli:test")
        .await
        .unwrap());
    let created_meanwhile = create_via(&wrong.base, &key).await;
    wait_for(
        "both rows to be parked",
        Duration::from_secs(40),
        || async {
            conn.query_one("SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL", &[])
                .await
                .unwrap()
                .get::<_, i64>(0)
                == 2
        },
    )
    .await;
    for id in [&executed, &created_meanwhile] {
        assert_eq!(
            status(&db, id).await,
            "pending",
            "never finalized by a gateway"
        );
    }
    let parked: String = conn
        .query_one(
            "SELECT last_error FROM outbox WHERE transfer_id = $1::text::uuid",
            &[&created_meanwhile],
        )
        .await
        .unwrap()
        .get(0);
    assert!(parked.starts_with("parked: HTTP 404"), "{parked}");
    let events: i64 = conn
        .query_one("SELECT count(*) FROM webhook_events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(events, 0, "nothing was announced");
    drop(wrong);
    gateway_handle.stop(false).await;

    // Fixed, and the operator retries both: each is looked up before any
    // POST, so the executed one is not paid twice.
    let posts_before = sim_stats(&sim).await.requests;
    let fixed = serve(&db, &sim.url(), "url-fixed", &[]).await;
    for id in [&executed, &created_meanwhile] {
        assert!(store
            .outbox()
            .retry(id.parse().unwrap(), "cli:test")
            .await
            .unwrap());
    }
    wait_for("both to settle", Duration::from_secs(40), || async {
        status(&db, &executed).await == "succeeded"
            && status(&db, &created_meanwhile).await == "succeeded"
    })
    .await;
    let stats = sim_stats(&sim).await;
    assert_eq!(stats.executions, 2);
    assert_eq!(stats.distinct_ids, 2);
    // The executed one was not posted again; the other one was posted once
    // (its answer was lost too, and the lookup after it found the payout).
    assert_eq!(
        stats.requests - posts_before,
        1,
        "only the never-executed payout was posted"
    );
    drop(fixed);
}
