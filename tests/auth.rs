//! authentication and tenancy.

mod common;

use std::time::Duration;

use common::{assert_problem, new_key, spawn_app, spawn_app_with, transfer_body, wait_for};
use reqwest::StatusCode;
use serde_json::Value;

#[actix_web::test]
async fn transfers_need_a_valid_bearer_key() {
    let app = spawn_app().await;
    for path in [
        "/transfers",
        "/transfers/018f0000-0000-7000-8000-000000000000",
    ] {
        let res = app
            .http
            .get(format!("{}{path}", app.address))
            .send()
            .await
            .unwrap();
        assert_eq!(res.headers()["www-authenticate"], "Bearer");
        assert_problem(res, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
    let res = app
        .post_transfer_as("prk_not_a_real_key", &new_key(), &transfer_body())
        .await;
    assert_eq!(res.headers()["www-authenticate"], "Bearer");
    assert_problem(res, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let res = app
        .http
        .get(format!("{}/transfers", app.address))
        .header("Authorization", format!("Basic {}", app.api_key))
        .send()
        .await
        .unwrap();
    assert_problem(res, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(app.count("transfers").await, 0);
}

#[actix_web::test]
async fn api_keys_are_stored_only_as_hashes() {
    let app = spawn_app().await;
    let db = app.db().await;
    let rows = db
        .query("SELECT key_hash FROM api_keys", &[])
        .await
        .unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        let hash: Vec<u8> = row.get(0);
        assert_eq!(hash.len(), 32);
        assert!(!String::from_utf8_lossy(&hash).contains(&app.api_key));
    }
    let expected = sha2_hex(&app.api_key);
    let found: i64 = db
        .query_one(
            "SELECT count(*) FROM api_keys WHERE encode(key_hash, 'hex') = $1",
            &[&expected],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(found, 1);
}

fn sha2_hex(s: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(s.as_bytes()))
}

#[actix_web::test]
async fn another_clients_transfer_reads_as_not_found() {
    let app = spawn_app().await;
    let other = app.other_client().await;
    let mine: Value = app
        .post_transfer(&new_key(), &transfer_body())
        .await
        .json()
        .await
        .unwrap();
    let path = format!("/transfers/{}", mine["id"].as_str().unwrap());
    assert_eq!(app.get(&path).await.status(), StatusCode::OK);
    let theirs = assert_problem(
        app.get_as(&other, &path).await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    let nothing = assert_problem(
        app.get_as(&other, "/transfers/018f0000-0000-7000-8000-000000000000")
            .await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    assert_eq!(theirs, nothing, "indistinguishable from a nonexistent id");
    let list: Value = app.get_as(&other, "/transfers").await.json().await.unwrap();
    assert_eq!(list["data"].as_array().unwrap().len(), 0);
}

#[actix_web::test]
async fn idempotency_keys_are_scoped_per_client() {
    let app = spawn_app().await;
    let other = app.other_client().await;
    let key = new_key();
    let a: Value = app
        .post_transfer(&key, &transfer_body())
        .await
        .json()
        .await
        .unwrap();
    let res = app.post_transfer_as(&other, &key, &transfer_body()).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    assert!(res.headers().get("idempotent-replayed").is_none());
    let b: Value = res.json().await.unwrap();
    assert_ne!(a["id"], b["id"]);
    assert_eq!(app.count("transfers").await, 2);
}

/// Waits until `n` connections listen for revocations on this database.
async fn wait_for_revocation_listeners(db: &tokio_postgres::Client, n: i64) {
    wait_for("the revocation listeners", Duration::from_secs(10), || async {
        let listening: i64 = db
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'payrail-listen-payrail_revoked' \
                 AND datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        listening == n
    })
    .await;
}

#[actix_web::test]
async fn a_revoked_key_is_refused_at_once_by_every_process() {
    // Two processes on one database, each with the key in its auth cache.
    let app = spawn_app().await;
    let other = spawn_app_with(&app.database_url, &[])
        .await
        .acting_for(&app);
    let db = app.db().await;
    wait_for_revocation_listeners(&db, 2).await;
    for process in [&app, &other] {
        for _ in 0..2 {
            assert_eq!(process.get("/transfers").await.status(), StatusCode::OK);
        }
    }

    let hash = payrail::domain::ApiKey::from_presented(&app.api_key).hash();
    let outcome = app.store.revoke_api_key(&hash).await.unwrap();
    assert!(outcome.revoked);
    assert_eq!((outcome.listeners, outcome.confirmed), (2, 2));
    for process in [&app, &other] {
        assert_problem(
            process.get("/transfers").await,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        )
        .await;
    }
    assert!(
        !app.store.revoke_api_key(&hash).await.unwrap().revoked,
        "revoked once"
    );
}

#[actix_web::test]
async fn an_acknowledgement_counts_only_for_the_listener_that_sent_it() {
    let app = spawn_app().await;
    let db = app.db().await;
    // A listener that hears revocations but never applies or acknowledges
    // them (a process stalled mid-revocation), and a stray connection that
    // echoes every revocation on the acknowledgement channel twice.
    let (silent, silent_conn) = tokio_postgres::connect(
        &format!(
            "{}?application_name=payrail-listen-payrail_revoked",
            app.database_url
        ),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    actix_web::rt::spawn(silent_conn);
    silent
        .batch_execute("LISTEN payrail_revoked")
        .await
        .unwrap();
    wait_for_revocation_listeners(&db, 2).await;
    let hash = payrail::domain::ApiKey::from_presented(&app.api_key).hash();
    let echo = hex::encode(hash.0);
    let stray = app.db().await;
    let echoing = async {
        // Until the revocation is done: the stray echo starts right away.
        for _ in 0..40 {
            for _ in 0..2 {
                stray
                    .execute("SELECT pg_notify('payrail_revoked_ack', $1)", &[&echo])
                    .await
                    .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    };
    let (outcome, ()) = futures::join!(app.store.revoke_api_key(&hash), echoing);
    let outcome = outcome.unwrap();
    assert!(outcome.revoked);
    assert_eq!(
        (outcome.listeners, outcome.confirmed),
        (2, 1),
        "the silent listener never confirmed, whatever else was echoed"
    );
}

#[actix_web::test]
async fn a_flood_of_random_keys_is_bounded_before_postgres_and_known_clients_keep_working() {
    let app = spawn_app_with(
        &common::fresh_database().await,
        &["--auth-lookups-per-second-max", "20"],
    )
    .await;
    // The known client's key is in the cache after its first request.
    let first = app.post_transfer(&new_key(), &transfer_body()).await;
    assert_eq!(first.status(), StatusCode::CREATED);

    let stranger = |i: usize| {
        let app_http = app.http.clone();
        let url = format!("{}/transfers", app.address);
        async move {
            let res = app_http
                .get(url)
                .bearer_auth(format!("prk_random_{i}_{}", new_key()))
                .send()
                .await
                .unwrap();
            (res.status(), res.headers().contains_key("retry-after"))
        }
    };
    let known = async {
        let mut statuses = Vec::new();
        for _ in 0..20 {
            statuses.push(
                app.post_transfer(&new_key(), &transfer_body())
                    .await
                    .status(),
            );
        }
        statuses
    };
    let started = std::time::Instant::now();
    let (flood, known) = futures::join!(futures::future::join_all((0..400).map(stranger)), known);
    let elapsed = started.elapsed().as_secs_f64();
    assert!(
        known.iter().all(|s| *s == StatusCode::CREATED),
        "the known client is never refused: {known:?}"
    );
    let looked_up = flood
        .iter()
        .filter(|(s, _)| *s == StatusCode::UNAUTHORIZED)
        .count();
    let shed = flood
        .iter()
        .filter(|(s, retry)| *s == StatusCode::SERVICE_UNAVAILABLE && *retry)
        .count();
    assert_eq!(looked_up + shed, 400, "each stranger is refused one way");
    // The bucket holds 20 and refills at 20/s: of the 400 keys, at most
    // the burst and what refilled while the flood lasted reached Postgres.
    let bound = 20.0 + 20.0 * elapsed + 5.0;
    assert!(
        looked_up >= 10 && (looked_up as f64) <= bound,
        "{looked_up} lookups reached Postgres in {elapsed:.2} s (at most {bound:.0})"
    );
    assert!(shed > 0, "the flood was shed");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("payrail_auth_lookups_refused_total"),
        "the refusals are counted"
    );
}
