//! Authentication and errors under pressure: per-client rate limits, tenant isolation
//! while two clients hammer the same keys, and API keys that never reach
//! the logs (checked on a real `payrail serve` process and the real CLI).

mod common;

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    assert_problem, fresh_database, new_key, spawn_app_with, transfer_body, ServeProcess, TestApp,
};
use reqwest::StatusCode;
use serde_json::{json, Value};

#[actix_web::test]
async fn a_client_over_its_rate_limit_gets_429_and_others_are_unaffected() {
    let app = spawn_app_with(
        &fresh_database().await,
        &["--rate-limit", "1", "--rate-limit-burst", "3"],
    )
    .await;
    let other = app.other_client().await;
    for _ in 0..3 {
        assert_eq!(app.get("/transfers").await.status(), StatusCode::OK);
    }
    let res = app.post_transfer(&new_key(), &transfer_body()).await;
    let retry_after: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry_after), "{retry_after}");
    assert_problem(res, StatusCode::TOO_MANY_REQUESTS, "rate-limited").await;
    assert_eq!(
        app.count("transfers").await,
        0,
        "a limited request stores nothing"
    );
    assert_eq!(app.count("idempotency_keys").await, 0);

    assert_eq!(
        app.post_transfer_as(&other, &new_key(), &transfer_body())
            .await
            .status(),
        StatusCode::CREATED,
        "buckets are per client"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        app.post_transfer(&new_key(), &transfer_body())
            .await
            .status(),
        StatusCode::CREATED,
        "the bucket refills"
    );
}

/// Every answer that `api_key` got for `key`: (status, body).
async fn attempts(app: &TestApp, api_key: &str, key: &str, body: &Value, n: usize) -> Vec<Value> {
    let sends = (0..n).map(|_| async {
        let res = app.post_transfer_as(api_key, key, body).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        res.json::<Value>().await.unwrap()
    });
    futures::future::join_all(sends).await
}

#[actix_web::test]
async fn two_clients_hammering_the_same_keys_never_see_each_other() {
    let app = spawn_app_with(&fresh_database().await, &["--shards", "2"]).await;
    let b_key = app.other_client().await;
    let a_key = app.api_key.clone();
    let keys: Vec<String> = (0..20).map(|_| new_key()).collect();
    let body_of = |amount: i64| json!({"amount": amount, "currency": "EUR", "source_account": "s", "destination_account": "d"});

    let per_key = keys.iter().map(|key| {
        let (a_key, b_key) = (a_key.clone(), b_key.clone());
        let app = &app;
        async move {
            let (a_body, b_body) = (body_of(100), body_of(200));
            let (a, b) = futures::join!(
                attempts(app, &a_key, key, &a_body, 5),
                attempts(app, &b_key, key, &b_body, 5),
            );
            (key.clone(), a, b)
        }
    });
    let mut a_ids = HashSet::new();
    let mut b_ids = HashSet::new();
    for (key, a, b) in futures::future::join_all(per_key).await {
        for (answers, amount, ids) in [(&a, 100, &mut a_ids), (&b, 200, &mut b_ids)] {
            let first = &answers[0];
            assert!(
                answers.iter().all(|x| x == first),
                "one answer per client and key"
            );
            assert_eq!(first["amount"], amount, "a client only sees its own body");
            assert_eq!(first["idempotency_key"], key.as_str());
            ids.insert(first["id"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(a_ids.len(), 20);
    assert_eq!(b_ids.len(), 20);
    assert!(a_ids.is_disjoint(&b_ids));
    assert_eq!(app.count("transfers").await, 40);

    for id in a_ids.iter().take(5) {
        let res = app.get_as(&b_key, &format!("/transfers/{id}")).await;
        assert_problem(res, StatusCode::NOT_FOUND, "not-found").await;
    }
    let page: Value = app
        .get_as(&b_key, "/transfers?limit=100")
        .await
        .json()
        .await
        .unwrap();
    let listed: HashSet<String> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, b_ids, "a list shows only the caller's transfers");
}

fn payrail(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_payrail"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("payrail runs")
}

fn payrail_with_stdin(args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_payrail"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("payrail runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[actix_web::test]
async fn api_keys_never_reach_the_logs_and_a_revoked_key_is_refused_at_once() {
    let db = fresh_database().await;
    let created = payrail(&[
        "client",
        "create",
        "--name",
        "mobile",
        "--database-url",
        &db,
    ]);
    assert!(created.status.success());
    let line: HashMap<String, String> = serde_json::from_slice(&created.stdout).unwrap();
    let api_key = line["api_key"].clone();
    let hash = hex_sha256(&api_key);

    let log_path = std::env::temp_dir().join(format!("payrail-log-{}", new_key()));
    let mut server = ServeProcess::start(&db, &[], "trace", &log_path).await;
    let base = server.base.clone();
    let http = reqwest::Client::new();

    let post = |key: &str| {
        http.post(format!("{base}/transfers"))
            .bearer_auth(key)
            .header("Idempotency-Key", new_key())
            .json(&transfer_body())
    };
    assert_eq!(
        post(&api_key).send().await.unwrap().status(),
        StatusCode::CREATED
    );
    let unknown = format!("prk_{}", "ab".repeat(32));
    assert_eq!(
        post(&unknown).send().await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );

    // The key never goes on a command line (process lists, shell history):
    // as an argument it is refused, and the key keeps working.
    let refused = payrail(&["client", "revoke", &api_key, "--database-url", &db]);
    assert!(!refused.status.success());
    assert_eq!(
        post(&api_key).send().await.unwrap().status(),
        StatusCode::CREATED
    );
    let revoked = payrail_with_stdin(
        &["client", "revoke", "--database-url", &db],
        &format!("{api_key}\n"),
    );
    assert!(revoked.status.success(), "{revoked:?}");
    assert!(String::from_utf8_lossy(&revoked.stderr).contains("revoked"));
    let res = post(&api_key).send().await.unwrap();
    assert_eq!(
        res.status(),
        StatusCode::UNAUTHORIZED,
        "refused right after revocation"
    );
    assert_eq!(res.headers()["www-authenticate"], "Bearer");
    let echoed = res.text().await.unwrap();
    assert!(!echoed.contains(&api_key), "never echoed");

    server.kill();
    let logs = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_file(&log_path);
    assert!(logs.contains("/transfers"), "the run did log its requests");
    // The hash as the Postgres driver would print a bytea parameter.
    let hash_bytes = format!("{:?}", hex::decode(&hash).unwrap());
    for secret in [&api_key, &unknown, &hash, &hash_bytes] {
        assert!(
            !logs.contains(secret.as_str()),
            "a key or its hash reached the logs"
        );
    }
}

fn hex_sha256(s: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(s.as_bytes()))
}
