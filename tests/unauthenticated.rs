//! Nothing an unauthenticated caller sends grows memory or takes the
//! connections that write transfers.

mod common;

use std::time::{Duration, Instant};

use common::{fresh_database, new_key, spawn_app_with, transfer_body};
use reqwest::StatusCode;

#[actix_web::test]
async fn invented_methods_and_paths_add_no_metric_series() {
    let app = spawn_app_with(&fresh_database().await, &[]).await;
    let metrics = || async {
        app.http
            .get(format!("{}/metrics", app.address))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let http_series = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with("payrail_http_requests_total{"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let before = http_series(&metrics().await).len();
    for i in 0..300 {
        let method = reqwest::Method::from_bytes(format!("X{i}").as_bytes()).unwrap();
        let _ = app
            .http
            .request(method, format!("{}/made-up/{i}", app.address))
            .send()
            .await
            .unwrap();
    }
    let after = http_series(&metrics().await);
    assert!(
        after.len() <= before + 4,
        "300 invented requests added {} series: {after:?}",
        after.len() - before
    );
    for line in &after {
        assert!(!line.contains("method=\"X"), "{line}");
        assert!(!line.contains("made-up"), "{line}");
    }
    assert!(after
        .iter()
        .any(|l| l.contains(r#"method="other""#) && l.contains(r#"route="other""#)));
}

/// Postgres connections `serve` holds open for this database.
async fn payrail_connections(app: &common::TestApp) -> i64 {
    let name = app.database_url.rsplit('/').next().unwrap().to_owned();
    app.db()
        .await
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'payrail'",
            &[&name],
        )
        .await
        .unwrap()
        .get(0)
}

#[actix_web::test]
async fn a_flood_of_unknown_api_keys_takes_no_connection_that_writes_transfers() {
    let app = spawn_app_with(
        &fresh_database().await,
        &["--db-pool-size", "8", "--auth-db-pool-size", "1"],
    )
    .await;
    // The caller's own key is cached once it was used.
    assert_eq!(
        app.post_transfer(&new_key(), &transfer_body())
            .await
            .status(),
        StatusCode::CREATED
    );
    let before = payrail_connections(&app).await;

    // 64 callers with ever new made-up keys for two seconds, while a real
    // client keeps creating transfers.
    let deadline = Instant::now() + Duration::from_secs(2);
    let flood = (0..64).map(|_| {
        let app = &app;
        async move {
            let mut sent = 0u32;
            while Instant::now() < deadline {
                let res = app
                    .post_transfer_as(
                        &format!("prk_{}", uuid::Uuid::new_v4().simple()),
                        &new_key(),
                        &transfer_body(),
                    )
                    .await;
                assert!(
                    [StatusCode::UNAUTHORIZED, StatusCode::SERVICE_UNAVAILABLE]
                        .contains(&res.status()),
                    "{}",
                    res.status()
                );
                sent += 1;
            }
            sent
        }
    });
    let creates = async {
        let mut latencies = Vec::new();
        while Instant::now() < deadline {
            let started = Instant::now();
            let res = app.post_transfer(&new_key(), &transfer_body()).await;
            assert_eq!(
                res.status(),
                StatusCode::CREATED,
                "a create failed during the flood"
            );
            latencies.push(started.elapsed());
        }
        latencies
    };
    let (sent, latencies) = futures::join!(futures::future::join_all(flood), creates);
    let sent: u32 = sent.iter().sum();
    assert!(sent > 500, "the flood was real: {sent} requests");
    assert!(
        latencies.len() > 10,
        "creates kept flowing: {}",
        latencies.len()
    );
    let slowest = latencies.iter().max().unwrap();
    assert!(
        *slowest < Duration::from_secs(1),
        "slowest create {slowest:?}"
    );

    // The unknown keys were looked up on the authentication pool (1
    // connection) only; the write pool did not grow to serve them. Two
    // more are the background's: the webhook worker may claim and read its
    // backlog at the same moment (64 callers on the write pool would have
    // opened all 8).
    let after = payrail_connections(&app).await;
    assert!(
        after <= before + 2,
        "connections grew from {before} to {after}"
    );
}
