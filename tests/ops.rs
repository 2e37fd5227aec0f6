//! health, readiness, metrics and the OpenAPI document.

mod common;

use common::{assert_every_metric_described, new_key, spawn_app, transfer_body};
use reqwest::StatusCode;
use serde_json::Value;

#[actix_web::test]
async fn health_and_readiness() {
    let app = spawn_app().await;
    let res = app
        .http
        .get(format!("{}/healthz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let res = app
        .http
        .get(format!("{}/readyz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.headers().contains_key("x-request-id"));
}

#[actix_web::test]
async fn metrics_count_requests_batches_and_cache_hits() {
    let app = spawn_app().await;
    let key = new_key();
    app.post_transfer(&key, &transfer_body()).await;
    app.post_transfer(&key, &transfer_body()).await;
    let text = app
        .http
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "payrail_http_requests_total{route=\"/transfers\",method=\"POST\",status=\"201\"}",
        "payrail_http_request_duration_seconds_bucket",
        "payrail_shard_queue_depth",
        "payrail_shard_batch_size_bucket",
        "payrail_replay_cache_hits_total",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics");
    }
    // Every metric says what it measures.
    assert_every_metric_described(&text);
}

#[actix_web::test]
async fn the_openapi_document_describes_the_api() {
    let app = spawn_app().await;
    let doc: Value = app
        .http
        .get(format!("{}/openapi.json", app.address))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    for path in [
        "/transfers",
        "/transfers/{id}",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(doc["paths"][path].is_object(), "{path}");
    }
    let post = &doc["paths"]["/transfers"]["post"];
    for status in ["201", "400", "401", "409", "413", "415", "422", "503"] {
        assert!(
            post["responses"][status].is_object(),
            "POST /transfers {status}"
        );
    }
    // Every authenticated operation documents the answers they all share,
    // with the headers that come with them.
    let mut authenticated = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if op.get("security").is_none() {
                continue;
            }
            authenticated += 1;
            let r = &op["responses"];
            assert!(
                r["401"]["headers"]["WWW-Authenticate"]["required"] == true,
                "{method} {path} 401"
            );
            assert!(
                r["429"]["headers"]["Retry-After"]["required"] == true,
                "{method} {path} 429"
            );
            assert!(
                r["503"]["headers"]["Retry-After"]["required"] == true,
                "{method} {path} 503"
            );
            assert!(
                r["401"]["content"]["application/problem+json"].is_object(),
                "{method} {path}"
            );
        }
    }
    assert_eq!(authenticated, 9, "nine operations need an API key");
    let schema = &doc["components"]["schemas"]["TransferView"]["properties"];
    for field in [
        "id",
        "status",
        "amount",
        "currency",
        "idempotency_key",
        "provider_reference",
        "failure_reason",
    ] {
        assert!(schema[field].is_object(), "{field}");
    }
    assert_eq!(
        doc["components"]["schemas"]["CreateTransfer"]["additionalProperties"],
        false
    );
}

#[actix_web::test]
async fn a_known_path_with_the_wrong_method_is_405_with_allow() {
    let app = spawn_app().await;
    for (path, allow) in [
        ("/healthz", "GET"),
        ("/readyz", "GET"),
        ("/metrics", "GET"),
        ("/openapi.json", "GET"),
        ("/transfers/01a239ac-4673-7598-a53b-351a7b7f906f", "GET"),
        ("/transfers", "GET, POST"),
    ] {
        let res = app
            .http
            .delete(format!("{}{path}", app.address))
            .send()
            .await
            .unwrap();
        assert_eq!(res.headers()["allow"], allow, "{path}");
        common::assert_problem(res, StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed").await;
    }
}

async fn readyz(app: &common::TestApp) -> StatusCode {
    app.http
        .get(format!("{}/readyz", app.address))
        .send()
        .await
        .unwrap()
        .status()
}

#[actix_web::test]
async fn readiness_and_console_sessions_stay_up_while_unknown_keys_hold_every_authentication_connection(
) {
    let db = common::fresh_database().await;
    let app = common::spawn_app_with(
        &db,
        &[
            "--readyz-cache-ttl",
            "0s",
            "--db-timeout",
            "3s",
            "--auth-negative-cache-ttl",
            "0s",
        ],
    )
    .await;
    // Every key lookup now waits on this lock, holding its connection.
    let mut locker = app.db().await;
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute("LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let flood: Vec<_> = (0..8)
        .map(|i| {
            let http = app.http.clone();
            let url = format!("{}/transfers", app.address);
            actix_web::rt::spawn(async move {
                http.get(url)
                    .bearer_auth(format!("pr_unknown_{i}"))
                    .send()
                    .await
                    .map(|r| r.status())
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        readyz(&app).await,
        StatusCode::OK,
        "readiness has a connection of its own"
    );
    // A console session is checked on the main pool, not behind the keys.
    let started = std::time::Instant::now();
    let session = app
        .store
        .console()
        .session(&payrail::domain::ConsoleSecretHash([7; 32]))
        .await;
    assert!(
        matches!(session, Ok(None)) && started.elapsed() < std::time::Duration::from_secs(1),
        "a session check waited for the authentication pool: {session:?} after {:?}",
        started.elapsed()
    );
    tx.rollback().await.unwrap();
    for f in flood {
        let _ = f.await;
    }
}

#[actix_web::test]
async fn an_engine_stays_ready_on_a_newer_schema_and_not_on_an_older_one() {
    let db = common::fresh_database().await;
    let app = common::spawn_app_with(&db, &["--readyz-cache-ttl", "0s"]).await;
    assert_eq!(readyz(&app).await, StatusCode::OK);
    let conn = app.db().await;
    // A newer engine migrated first, as in a rolling deploy.
    conn.execute(
        "INSERT INTO refinery_schema_history (version, name, applied_on, checksum) \
         VALUES (9999, 'from_a_newer_build', now()::text, '0')",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(readyz(&app).await, StatusCode::OK);
    // The database was restored from before this build's migrations.
    conn.execute(
        "DELETE FROM refinery_schema_history WHERE version >= (SELECT max(version) FROM refinery_schema_history WHERE version < 9999)",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(readyz(&app).await, StatusCode::SERVICE_UNAVAILABLE);
}
