//! Concurrent attempts of one key, in one process and across two processes.

mod common;

use std::collections::HashSet;

use common::{fresh_database, new_key, spawn_app, spawn_app_with, transfer_body};
use reqwest::StatusCode;

#[actix_web::test]
async fn fifty_concurrent_attempts_of_one_key_make_one_transfer_and_fifty_identical_answers() {
    let app = spawn_app().await;
    let key = new_key();
    let body = transfer_body();
    let attempts = (0..50).map(|_| async {
        let res = app.post_transfer(&key, &body).await;
        let replayed = res.headers().contains_key("idempotent-replayed");
        (res.status(), replayed, res.bytes().await.unwrap())
    });
    let answers = futures::future::join_all(attempts).await;

    assert!(answers.iter().all(|(s, _, _)| *s == StatusCode::CREATED));
    let bodies: HashSet<_> = answers.iter().map(|(_, _, b)| b.clone()).collect();
    assert_eq!(bodies.len(), 1, "every answer is byte-identical");
    assert_eq!(
        answers.iter().filter(|(_, replayed, _)| !replayed).count(),
        1,
        "one creator"
    );
    assert_eq!(app.count("transfers").await, 1);
    assert_eq!(app.count("outbox").await, 1);
}

#[actix_web::test]
async fn two_serve_processes_racing_twenty_keys_create_twenty_transfers() {
    let db = fresh_database().await;
    let a = spawn_app_with(&db, &[]).await;
    let b = spawn_app_with(&db, &[]).await;
    let keys: Vec<String> = (0..20).map(|_| new_key()).collect();
    let body = transfer_body();

    // Each key is sent to both processes at once, twice each, with A's key.
    let races = keys.iter().map(|key| {
        let (a, b, body) = (&a, &b, &body);
        async move {
            let sends = [a, b, a, b].map(|app| app.post_transfer_as(&a.api_key, key, body));
            let answers = futures::future::join_all(sends).await;
            let mut ids = HashSet::new();
            for res in answers {
                assert_eq!(res.status(), StatusCode::CREATED);
                let v: serde_json::Value = res.json().await.unwrap();
                ids.insert(v["id"].as_str().unwrap().to_owned());
            }
            assert_eq!(ids.len(), 1, "both processes name one transfer for {key}");
            ids.into_iter().next().unwrap()
        }
    });
    let ids: HashSet<String> = futures::future::join_all(races).await.into_iter().collect();
    assert_eq!(ids.len(), 20);
    assert_eq!(a.count("transfers").await, 20);
    assert_eq!(a.count("outbox").await, 20);
}
