//! Adversity that must stay local: a key locked elsewhere fails only its own
//! attempt; an ambiguous payout is never called failed; provider text cannot
//! break a settlement; the relay's fencing token only grows; key expiry is
//! Postgres's to decide.

mod common;

use std::time::{Duration, Instant};

use common::{
    answering, connect, fresh_database, new_key, sim_stats, spawn_app, spawn_app_with,
    spawn_relaying, spawn_sim, transfer_body,
};
use payrail::domain::{ProviderReport, ProviderText};
use payrail::sim::SimArgs;
use payrail::store::outbox::Settlement;
use payrail::store::StoreError;
use reqwest::StatusCode;
use serde_json::Value;
use uuid::Uuid;

#[actix_web::test]
async fn a_key_locked_by_another_transaction_fails_only_its_own_attempt() {
    let db = fresh_database().await;
    let app = spawn_app_with(
        &db,
        &[
            "--shards",
            "1",
            "--db-lock-timeout",
            "200ms",
            "--db-timeout",
            "4s",
        ],
    )
    .await;
    // Another writer of the same key froze between its INSERT and its COMMIT
    // (a paused VM, a stopped process): its row lock stays held.
    let stuck = new_key();
    let blocker = connect(&db).await;
    blocker.batch_execute("BEGIN").await.unwrap();
    let id = Uuid::now_v7();
    blocker
        .execute(
            "INSERT INTO transfers (id, client_id, idempotency_key, status, amount, currency, source_account, \
             destination_account, metadata, created_at, updated_at) \
             VALUES ($1, $2, $3, 'pending', 1, 'USD', 'a', 'b', '{}', now(), now())",
            &[&id, &app.client_id, &stuck],
        )
        .await
        .unwrap();
    blocker
        .execute(
            "INSERT INTO idempotency_keys (client_id, key, fingerprint, transfer_id, response_status, \
             response_body, created_at, expires_at) \
             VALUES ($1, $2, sha256('x'), $3, 201, '{}', now(), now() + interval '1 hour')",
            &[&app.client_id, &stuck, &id],
        )
        .await
        .unwrap();

    // The stuck key's retries and unrelated creates arrive together, so they
    // share flushes.
    let started = Instant::now();
    let mut sends = Vec::new();
    for i in 0..24 {
        let key = if i % 3 == 0 { stuck.clone() } else { new_key() };
        let app = &app;
        sends.push(async move {
            let res = app.post_transfer(&key, &transfer_body()).await;
            (key, res.status(), started.elapsed())
        });
    }
    let results = futures::future::join_all(sends).await;
    for (key, status, elapsed) in &results {
        if *key == stuck {
            assert!(
                [StatusCode::CONFLICT, StatusCode::SERVICE_UNAVAILABLE].contains(status),
                "the stuck key answers 409 or 503, got {status}"
            );
        } else {
            assert_eq!(*status, StatusCode::CREATED, "an unrelated attempt failed");
            assert!(
                *elapsed < Duration::from_secs(3),
                "an unrelated attempt waited {elapsed:?}"
            );
        }
    }
    assert_eq!(
        app.count("transfers").await,
        16,
        "the 16 unrelated keys were written"
    );

    // Once the other transaction ends, the key is writable again.
    blocker.batch_execute("ROLLBACK").await.unwrap();
    let res = app.post_transfer(&stuck, &transfer_body()).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    assert!(res.headers().get("idempotent-replayed").is_none());
}

/// Four creates of new keys sent while another transaction holds a lock on
/// the whole table `transfers` for `held` (the same happens to the lock on
/// growing a table when the disk stalls its holder); nobody holds the keys.
/// Returns their statuses and the transfers written, one before the lock.
async fn creates_under_a_table_lock(
    lock_timeout: &str,
    lock_retries: &str,
    held: Duration,
) -> (Vec<StatusCode>, i64) {
    let db = fresh_database().await;
    let app = spawn_app_with(
        &db,
        &[
            "--shards",
            "1",
            "--db-lock-timeout",
            lock_timeout,
            "--db-lock-retries",
            lock_retries,
            "--db-timeout",
            "4s",
            "--db-pool-size",
            "1",
        ],
    )
    .await;
    // The flush statement is prepared once per connection, before its lock
    // timeout is set: prepare it now, so the wait below is the flush's.
    let warm = app.post_transfer(&new_key(), &transfer_body()).await;
    assert_eq!(warm.status(), StatusCode::CREATED);
    let blocker = connect(&db).await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE transfers IN SHARE MODE")
        .await
        .unwrap();
    let release = async {
        tokio::time::sleep(held).await;
        blocker.batch_execute("COMMIT").await.unwrap();
    };
    let creates = futures::future::join_all(
        (0..4).map(|_| app.post_transfer_owned(new_key(), transfer_body())),
    );
    let ((), statuses) = tokio::join!(release, creates);
    (statuses, app.count("transfers").await)
}

#[actix_web::test]
async fn a_flush_that_waits_on_a_table_lock_is_retried_not_refused() {
    // Held longer than halving a flush of 4 down to 1 takes (3 timeouts),
    // shorter than the 5 retries: the keys are written, not refused.
    let (statuses, written) =
        creates_under_a_table_lock("200ms", "5", Duration::from_millis(700)).await;
    assert_eq!(statuses, vec![StatusCode::CREATED; 4]);
    assert_eq!(written, 5);
}

#[actix_web::test]
async fn a_table_lock_held_past_every_retry_answers_503_not_409() {
    // Two lock timeouts (the flush and its one retry) pass well within the
    // second the lock is held: nobody holds these keys, so no `409`.
    let (statuses, written) =
        creates_under_a_table_lock("100ms", "1", Duration::from_secs(1)).await;
    assert_eq!(statuses, vec![StatusCode::SERVICE_UNAVAILABLE; 4]);
    assert_eq!(written, 1);
}

#[actix_web::test]
async fn a_lock_timeout_is_told_apart_by_what_waited() {
    let db = fresh_database().await;
    let app = spawn_app_with(&db, &[]).await;
    let holder = connect(&db).await;
    let waiter = connect(&db).await;
    waiter
        .batch_execute("SET lock_timeout = 100")
        .await
        .unwrap();
    let insert_key = "INSERT INTO idempotency_keys (client_id, key, fingerprint, transfer_id, response_status, \
         response_body, created_at, expires_at) \
         VALUES ($1, 'held', sha256('x'), gen_random_uuid(), 201, '{}', now(), now() + interval '1 hour') \
         ON CONFLICT DO NOTHING";
    // The waiter's insert, which waits past its lock timeout.
    let waited = || async {
        StoreError::from(
            waiter
                .execute(insert_key, &[&app.client_id])
                .await
                .unwrap_err(),
        )
    };

    // A row: another transaction wrote the same key and has not committed.
    holder.batch_execute("BEGIN").await.unwrap();
    holder.execute(insert_key, &[&app.client_id]).await.unwrap();
    let err = waited().await;
    assert!(err.is_lock_timeout(), "{err}");
    assert!(!err.is_lock_timeout_off_rows(), "a row wait: {err}");
    holder.batch_execute("ROLLBACK").await.unwrap();

    // The table: nothing about any key.
    holder
        .batch_execute("BEGIN; LOCK TABLE idempotency_keys IN SHARE MODE")
        .await
        .unwrap();
    let err = waited().await;
    assert!(err.is_lock_timeout_off_rows(), "a table wait: {err}");
    holder.batch_execute("ROLLBACK").await.unwrap();
}

#[actix_web::test]
async fn a_permanent_refusal_after_an_ambiguous_attempt_is_reconciled_not_failed() {
    // Attempt 1 executes and the answer is lost; attempt 2 is refused with a
    // 403 (say, a rotated credential). The payout did execute.
    let sim = spawn_sim(SimArgs {
        ambiguous_rate: 1.0,
        repeat_reject_rate: 1.0,
        ..SimArgs::default()
    })
    .await;
    let url = sim.url();
    let app = spawn_relaying(&fresh_database().await, &url, &[]).await;
    let ids = app.create_transfers(3, &transfer_body()).await;
    for id in &ids {
        let t = app.wait_final(id).await;
        assert_eq!(t["status"], "succeeded", "{t}");
        assert!(t["provider_reference"]
            .as_str()
            .unwrap()
            .starts_with("sim_"));
        assert!(t["failure_reason"].is_null());
    }
    let stats = sim_stats(&sim).await;
    assert_eq!(stats.executions, 3);
    assert_eq!(stats.distinct_ids, 3);
    assert_eq!(app.count("outbox").await, 0);
}

#[actix_web::test]
async fn provider_text_is_cleaned_and_bounded_before_it_is_stored() {
    let long = Box::leak(
        format!(
            r#"{{"status":"succeeded","reference":"ref\u0000\n\u001b-{}"}}"#,
            "x".repeat(1000)
        )
        .into_boxed_str(),
    );
    let (url, provider) = answering(200, "application/json", long).await;
    let app = spawn_relaying(&fresh_database().await, &url, &[]).await;
    let id = app.create_transfers(1, &transfer_body()).await.remove(0);
    let t = app.wait_final(&id).await;
    assert_eq!(t["status"], "succeeded");
    let reference = t["provider_reference"].as_str().unwrap();
    assert!(reference.starts_with("ref-xxx"), "{reference}");
    assert_eq!(reference.chars().count(), 255);
    assert_eq!(app.count("outbox").await, 0, "the settlement committed");
    provider.stop(false).await;
}

#[actix_web::test]
async fn the_fencing_token_never_goes_back_when_an_operator_retries_a_dead_row() {
    let app = spawn_app().await; // no relay: the test plays it
    let id = app.create_transfers(1, &transfer_body()).await.remove(0);
    let id = Uuid::parse_str(&id).unwrap();
    let lease = Duration::from_secs(30);

    let stale = app
        .store
        .outbox()
        .claim(10, lease, 10, &[])
        .await
        .unwrap()
        .remove(0);
    assert_eq!((stale.attempt, stale.budget_used), (1, 1));
    let dead = Settlement::Dead {
        error: ProviderText::clean("gave up"),
        ambiguous: false,
    };
    let report = app
        .store
        .outbox()
        .settle(
            &[(stale.clone(), dead)],
            payrail::store::status::FollowUp::polls_only(std::time::Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(report.held, [true]);

    assert!(app.store.outbox().retry(id, "cli:test").await.unwrap());
    let fresh = app
        .store
        .outbox()
        .claim(10, lease, 10, &[])
        .await
        .unwrap()
        .remove(0);
    assert_eq!(fresh.attempt, 2, "a new claim gets a new token");
    assert_eq!(fresh.budget_used, 1, "with a fresh retry budget");

    // The holder of the old claim wakes up and settles: it is fenced out.
    let late = Settlement::Report(ProviderReport::Declined {
        reason: ProviderText::clean("late"),
    });
    let report = app
        .store
        .outbox()
        .settle(
            &[(stale, late)],
            payrail::store::status::FollowUp::polls_only(std::time::Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(report.held, [false]);
    assert!(report.changed.is_empty());
    assert_eq!(app.count_status("pending").await, 1);
    assert_eq!(app.count("outbox").await, 1);
}

#[actix_web::test]
async fn key_expiry_is_decided_by_the_database_clock() {
    let db = fresh_database().await;
    let first = spawn_app_with(&db, &["--key-retention", "1h"]).await;
    let key = new_key();
    let created: Value = first
        .post_transfer(&key, &transfer_body())
        .await
        .json()
        .await
        .unwrap();

    // A second process (with a cold replay cache) on the same database.
    let second = spawn_app_with(&db, &["--key-retention", "1h"])
        .await
        .acting_for(&first);
    let res = second.post_transfer(&key, &transfer_body()).await;
    assert_eq!(res.headers()["idempotent-replayed"], "true");

    // By Postgres's clock the key has now expired: the same key is new again.
    first
        .db()
        .await
        .execute(
            "UPDATE idempotency_keys SET expires_at = now() - interval '1 second'",
            &[],
        )
        .await
        .unwrap();
    let third = spawn_app_with(&db, &["--key-retention", "1h"])
        .await
        .acting_for(&first);
    let res = third.post_transfer(&key, &transfer_body()).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    assert!(res.headers().get("idempotent-replayed").is_none());
    let again: Value = res.json().await.unwrap();
    assert_ne!(again["id"], created["id"]);
    let row = first
        .db()
        .await
        .query_one(
            "SELECT expires_at > now() + interval '59 minutes' FROM idempotency_keys",
            &[],
        )
        .await
        .unwrap();
    assert!(
        row.get::<_, bool>(0),
        "the new row's expiry is Postgres's now() + retention"
    );
}

#[test]
fn a_key_retention_that_would_turn_idempotency_off_or_overflow_is_refused() {
    for retention in ["0s", "500ms", "100years"] {
        let config = payrail::cli::serve_config([
            "--database-url",
            "postgres://localhost/x",
            "--key-retention",
            retention,
        ])
        .unwrap();
        let err = config.validate().unwrap_err();
        assert!(err.contains("--key-retention"), "{retention}: {err}");
    }
    let ok = payrail::cli::serve_config(["--database-url", "postgres://localhost/x"]).unwrap();
    assert!(ok.validate().is_ok());
}
