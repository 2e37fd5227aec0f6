//! Hostile and broken clients (raw TCP where an HTTP client would refuse to
//! send the bytes): each gets a 4xx or a closed connection, nothing is
//! stored, and the server keeps answering everyone else.

mod common;

use std::time::{Duration, Instant};

use common::{
    assert_problem, fresh_database, new_key, spawn_app_with, transfer_body, ServeProcess, TestApp,
};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `request` as it is and returns what came back before the server
/// closed the connection (or `wait` ran out).
async fn raw(app: &TestApp, request: &[u8], wait: Duration) -> String {
    let mut stream = TcpStream::connect(app.address.trim_start_matches("http://"))
        .await
        .unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(wait, stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

fn post(app: &TestApp, key: &[u8], content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut req = format!(
        "POST /transfers HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {}\r\n\
         Content-Type: {content_type}\r\nContent-Length: {}\r\nIdempotency-Key: ",
        app.api_key,
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(key);
    req.extend_from_slice(b"\r\n\r\n");
    req.extend_from_slice(body);
    req
}

fn status_and_type(answer: &str) -> (&str, Option<&str>) {
    let status = answer.split(' ').nth(1).unwrap_or("");
    let problem = answer
        .split("\"type\":\"/problems/")
        .nth(1)
        .and_then(|rest| rest.split('"').next());
    (status, problem)
}

async fn still_serving(app: &TestApp) {
    let res = app.post_transfer(&new_key(), &transfer_body()).await;
    assert_eq!(
        res.status(),
        StatusCode::CREATED,
        "the server still serves others"
    );
}

#[actix_web::test]
async fn broken_bytes_get_problems_and_store_nothing() {
    let app = spawn_app_with(&fresh_database().await, &[]).await;
    let body = transfer_body().to_string();
    let wait = Duration::from_secs(5);

    let non_utf8_key = raw(
        &app,
        &post(&app, b"k\xff\xfe", "application/json", body.as_bytes()),
        wait,
    )
    .await;
    assert_eq!(
        status_and_type(&non_utf8_key),
        ("400", Some("idempotency-key-invalid"))
    );

    let non_utf8_body = raw(
        &app,
        &post(
            &app,
            b"k1",
            "application/json",
            b"{\"amount\": \"\xff\xfe\"}",
        ),
        wait,
    )
    .await;
    assert_eq!(
        status_and_type(&non_utf8_body),
        ("400", Some("malformed-json"))
    );

    let deep = format!("{}{}", "[".repeat(30_000), "]".repeat(30_000));
    let nested = raw(
        &app,
        &post(&app, b"k2", "application/json", deep.as_bytes()),
        wait,
    )
    .await;
    assert_eq!(status_and_type(&nested), ("400", Some("malformed-json")));

    let twice = br#"{"amount": 1, "amount": 900000, "currency": "USD", "source_account": "a", "destination_account": "b"}"#;
    let duplicate = raw(&app, &post(&app, b"k3", "application/json", twice), wait).await;
    assert_eq!(status_and_type(&duplicate), ("400", Some("malformed-json")));

    assert_eq!(app.count("idempotency_keys").await, 0);
    assert_eq!(app.count("transfers").await, 0);
    // Each key is still free for a well-formed request.
    for key in ["k1", "k2", "k3"] {
        assert_eq!(
            app.post_transfer(key, &transfer_body()).await.status(),
            StatusCode::CREATED
        );
    }
}

#[actix_web::test]
async fn oversized_headers_are_refused() {
    let app = spawn_app_with(&fresh_database().await, &[]).await;
    let huge = "x".repeat(128 * 1024);
    let request = format!(
        "GET /transfers HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Filler: {huge}\r\n\r\n"
    );
    let answer = raw(&app, request.as_bytes(), Duration::from_secs(5)).await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "refused or closed: {}",
        answer.lines().next().unwrap_or("")
    );
    let res = app
        .post_raw(Some(&"k".repeat(256)), "application/json", b"{}".to_vec())
        .await;
    assert_problem(res, StatusCode::BAD_REQUEST, "idempotency-key-invalid").await;
    still_serving(&app).await;
}

#[actix_web::test]
async fn slow_clients_are_cut_off_at_the_request_timeout() {
    let app = spawn_app_with(&fresh_database().await, &["--client-request-timeout", "1s"]).await;

    // Slow-loris head: a request line and one header, then nothing.
    let started = Instant::now();
    let head = raw(
        &app,
        b"POST /transfers HTTP/1.1\r\nHost: x\r\n",
        Duration::from_secs(10),
    )
    .await;
    let head_cut = started.elapsed();
    assert!(
        head_cut < Duration::from_secs(4),
        "head cut after {head_cut:?}"
    );
    assert!(
        head.is_empty() || head.starts_with("HTTP/1.1 408"),
        "{head}"
    );

    // Slow body: a complete head announcing 200 bytes, then 10 of them.
    let mut request = post(&app, new_key().as_bytes(), "application/json", &[b' '; 200]);
    request.truncate(request.len() - 190);
    let started = Instant::now();
    let body = raw(&app, &request, Duration::from_secs(10)).await;
    let body_cut = started.elapsed();
    assert!(
        body_cut < Duration::from_secs(4),
        "body cut after {body_cut:?}"
    );
    assert_eq!(
        status_and_type(&body),
        ("408", Some("request-timeout")),
        "{body}"
    );

    still_serving(&app).await;
    assert_eq!(app.count("transfers").await, 1);
}

/// Idle connections held open at once against a `serve` process of its own
/// (each side needs a file descriptor per connection; the limit here is 20 000).
const IDLE_CONNECTIONS: usize = 10_000;

#[actix_web::test]
async fn ten_thousand_idle_connections_neither_starve_real_clients_nor_grow_memory() {
    let app = spawn_app_with(&fresh_database().await, &[]).await;
    let log = std::env::temp_dir().join(format!("payrail-idle-{}", new_key()));
    let server = ServeProcess::start(
        &app.database_url,
        &["--client-request-timeout", "3s"],
        "warn",
        &log,
    )
    .await;
    let rss_before = server.rss_kib();
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut idle = Vec::with_capacity(IDLE_CONNECTIONS);
    for _ in 0..IDLE_CONNECTIONS {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }

    let started = Instant::now();
    common::create_via(&server.base, &app.api_key).await;
    let served_in = started.elapsed();
    assert!(
        served_in < Duration::from_secs(2),
        "served in {served_in:?}"
    );
    let grown_kib = server.rss_kib().saturating_sub(rss_before);
    // actix keeps a read buffer of about 8 KiB per connection (6-10 KiB of
    // RSS each, measured); the bound is that and no more, and
    // --http-connections-max caps their count.
    let per_connection_max_kib = 16;
    assert!(
        grown_kib < per_connection_max_kib * IDLE_CONNECTIONS as u64,
        "RSS grew by {grown_kib} KiB for {IDLE_CONNECTIONS} idle connections"
    );

    // The server drops them once their request timeout passes.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut closed = 0;
    for stream in &mut idle {
        // A 408 and then end of stream, or just the end of stream.
        let mut answer = Vec::new();
        let read = stream.read_to_end(&mut answer);
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(20), read).await {
            closed += 1;
        }
    }
    let _ = std::fs::remove_file(&log);
    assert!(
        closed >= IDLE_CONNECTIONS * 99 / 100,
        "only {closed} of {IDLE_CONNECTIONS} idle connections were closed"
    );
}
