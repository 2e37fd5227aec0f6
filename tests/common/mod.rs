//! Shared test helpers: a fresh database per test on the suite's private
//! cluster (started by `scripts/test`), the real app on a random port, and
//! typed calls so that tests read like rows of SPEC.md.
#![allow(dead_code)]

use std::time::Duration;

use actix_web::dev::ServerHandle;
use payrail::startup::Application;
use payrail::store::Store;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::NoTls;
use uuid::Uuid;

/// Admin URL of the suite's cluster; `scripts/test` sets it.
pub fn admin_url() -> String {
    std::env::var("PAYRAIL_TEST_PG_ADMIN_URL").expect(
        "PAYRAIL_TEST_PG_ADMIN_URL is not set: run the suite with scripts/test, \
         which starts a private PostgreSQL cluster for it",
    )
}

/// A plain connection, for assertions on rows.
pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("connect to Postgres");
    actix_web::rt::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// Creates an empty database and returns its URL.
pub async fn fresh_database_on(admin_url: &str) -> String {
    let name = format!("payrail_test_{}", Uuid::new_v4().simple());
    let admin = connect(admin_url).await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    match admin_url.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{name}"),
        None => panic!("admin URL without database: {admin_url}"),
    }
}

/// A fresh database on the suite's cluster.
pub async fn fresh_database() -> String {
    fresh_database_on(&admin_url()).await
}

/// The engine running on a random port, plus a client with an API key.
pub struct TestApp {
    pub address: String,
    pub database_url: String,
    pub api_key: String,
    pub client_id: Uuid,
    pub http: reqwest::Client,
    pub store: Store,
    pub reaper: actix::Addr<payrail::reaper::Reaper>,
    handle: ServerHandle,
}

/// A valid transfer body.
pub fn transfer_body() -> Value {
    json!({
        "amount": 1500,
        "currency": "USD",
        "source_account": "acc_alice",
        "destination_account": "acc_bob",
        "description": "rent",
        "metadata": {"order": "A-17"}
    })
}

/// A key no other test uses.
pub fn new_key() -> String {
    Uuid::new_v4().to_string()
}

/// The engine on a fresh database with test-sized defaults.
pub async fn spawn_app() -> TestApp {
    spawn_app_with(&fresh_database().await, &[]).await
}

/// The engine on `database_url` with extra `serve` flags.
pub async fn spawn_app_with(database_url: &str, extra: &[&str]) -> TestApp {
    let mut args = vec![
        "--database-url",
        database_url,
        "--listen",
        "127.0.0.1:0",
        "--shards",
        "2",
        "--http-workers",
        "2",
        "--db-pool-size",
        "8",
    ];
    args.extend_from_slice(extra);
    let config = payrail::cli::serve_config(args).expect("valid test flags");
    let app = Application::build(config).await.expect("app builds");
    let address = format!("http://127.0.0.1:{}", app.port());
    let handle = app.handle();
    let store = app.store().clone();
    let reaper = app.reaper();
    let (client_id, api_key) = store.create_client("test").await.expect("create client");
    actix_web::rt::spawn(app.run_until_stopped());
    TestApp {
        address,
        database_url: database_url.to_owned(),
        api_key: api_key.expose_secret().to_owned(),
        client_id: client_id.0,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        store,
        reaper,
        handle,
    }
}

impl TestApp {
    /// A second API key, of a new client.
    pub async fn other_client(&self) -> String {
        let (_, key) = self.store.create_client("other").await.unwrap();
        key.expose_secret().to_owned()
    }

    /// `POST /transfers` as this app's client.
    pub async fn post_transfer(&self, key: &str, body: &Value) -> Response {
        self.post_transfer_as(&self.api_key, key, body).await
    }

    /// `POST /transfers` with any API key.
    pub async fn post_transfer_as(&self, api_key: &str, key: &str, body: &Value) -> Response {
        self.http
            .post(format!("{}/transfers", self.address))
            .bearer_auth(api_key)
            .header("Idempotency-Key", key)
            .json(body)
            .send()
            .await
            .expect("request sent")
    }

    /// `POST /transfers` with a raw body and content type.
    pub async fn post_raw(&self, key: Option<&str>, content_type: &str, body: Vec<u8>) -> Response {
        let mut req = self
            .http
            .post(format!("{}/transfers", self.address))
            .bearer_auth(&self.api_key)
            .header("Content-Type", content_type)
            .body(body);
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        req.send().await.expect("request sent")
    }

    /// `GET` a path as this app's client.
    pub async fn get(&self, path: &str) -> Response {
        self.get_as(&self.api_key, path).await
    }

    /// `GET` a path with any API key.
    pub async fn get_as(&self, api_key: &str, path: &str) -> Response {
        self.http
            .get(format!("{}{path}", self.address))
            .bearer_auth(api_key)
            .send()
            .await
            .expect("request sent")
    }

    /// A connection to this app's database.
    pub async fn db(&self) -> tokio_postgres::Client {
        connect(&self.database_url).await
    }

    /// `SELECT count(*)` of a table.
    pub async fn count(&self, table: &str) -> i64 {
        self.db()
            .await
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0)
    }

    /// Stops the HTTP server (its actors stop with it).
    pub async fn stop(&self) {
        self.handle.stop(false).await;
    }
}

/// Asserts a problem+json answer and returns its body.
pub async fn assert_problem(res: Response, status: StatusCode, slug: &str) -> Value {
    assert_eq!(res.status(), status, "status for {slug}");
    assert_eq!(
        res.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/problem+json")
    );
    let body: Value = res.json().await.expect("problem body");
    assert_eq!(body["type"], format!("/problems/{slug}"));
    assert_eq!(body["status"], status.as_u16());
    assert!(
        body["title"].is_string() && body["detail"].is_string(),
        "{body}"
    );
    body
}
