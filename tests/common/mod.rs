//! Shared test helpers: a fresh database per test on the suite's private
//! cluster (started by `scripts/test`), the real app on a random port, and
//! typed calls so that tests read like rows of docs/API.md.
#![allow(dead_code)]

pub mod receiver;

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
    spawn_app_listening(database_url, "127.0.0.1:0", extra).await
}

/// A port nobody listens on now (for a process that must know its
/// address before it starts, as a provider sending notifications does).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The engine on `database_url`, listening on `listen`, with extra flags.
pub async fn spawn_app_listening(database_url: &str, listen: &str, extra: &[&str]) -> TestApp {
    let mut args = vec![
        "--database-url",
        database_url,
        "--listen",
        listen,
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
    /// This app, acting as `other`'s client (for apps sharing a database).
    pub fn acting_for(mut self, other: &TestApp) -> TestApp {
        self.api_key = other.api_key.clone();
        self.client_id = other.client_id;
        self
    }

    /// A second API key, of a new client.
    pub async fn other_client(&self) -> String {
        let (_, key) = self.store.create_client("other").await.unwrap();
        key.expose_secret().to_owned()
    }

    /// `POST /transfers` as this app's client.
    pub async fn post_transfer(&self, key: &str, body: &Value) -> Response {
        self.post_transfer_as(&self.api_key, key, body).await
    }

    /// `POST /transfers` as this app's client, owning its inputs (for
    /// building many concurrent requests); returns the status.
    pub async fn post_transfer_owned(&self, key: String, body: Value) -> StatusCode {
        self.post_transfer(&key, &body).await.status()
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

/// Every metric in a `/metrics` text has its `# HELP` line: a metric
/// registered without a description would go out unexplained.
pub fn assert_every_metric_described(text: &str) {
    let typed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(typed.len() >= 5, "{text}");
    for name in typed {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("# HELP {name} "))),
            "no # HELP line for {name}"
        );
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

/// provider-sim on a random port, one worker, seeded.
pub async fn spawn_sim(args: payrail::sim::SimArgs) -> payrail::sim::SimServer {
    payrail::sim::start(payrail::sim::SimArgs {
        listen: "127.0.0.1:0".into(),
        workers: Some(1),
        seed: Some(7),
        ..args
    })
    .await
    .expect("provider-sim starts")
}

/// provider-sim's `/stats`.
pub async fn sim_stats(sim: &payrail::sim::SimServer) -> payrail::sim::wire::Stats {
    reqwest::get(format!("{}/stats", sim.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Polls `check` every 50 ms until it holds; panics after `timeout`.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + timeout;
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl TestApp {
    /// Transfers in `status`.
    pub async fn count_status(&self, status: &str) -> i64 {
        self.db()
            .await
            .query_one(
                "SELECT count(*) FROM transfers WHERE status = $1",
                &[&status],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// Creates `n` transfers, ten at a time, and returns their ids.
    pub async fn create_transfers(&self, n: usize, body: &Value) -> Vec<String> {
        let mut ids = Vec::with_capacity(n);
        for chunk in (0..n).collect::<Vec<_>>().chunks(10) {
            let sends = chunk.iter().map(|_| async {
                let res = self.post_transfer(&new_key(), body).await;
                assert_eq!(res.status(), StatusCode::CREATED);
                res.json::<Value>().await.unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            });
            ids.extend(futures::future::join_all(sends).await);
        }
        ids
    }
}

/// `payrail serve` as a process of its own (for SIGKILLs, its own logs, its
/// own file-descriptor limit and RSS), on a port that was free a moment ago.
pub struct ServeProcess {
    pub child: std::process::Child,
    pub base: String,
}

impl ServeProcess {
    /// Starts it with `extra` flags and `RUST_LOG=rust_log`, stdout and
    /// stderr to `log`, and waits until `/readyz` answers.
    pub async fn start(
        database_url: &str,
        extra: &[&str],
        rust_log: &str,
        log: &std::path::Path,
    ) -> ServeProcess {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen = format!("127.0.0.1:{port}");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_payrail"))
            .args(["serve", "--database-url", database_url, "--listen", &listen])
            .args(extra)
            .env("RUST_LOG", rust_log)
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(log).unwrap())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let base = format!("http://{listen}");
        let http = reqwest::Client::new();
        wait_for("serve to answer", Duration::from_secs(20), || async {
            http.get(format!("{base}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        ServeProcess { child, base }
    }

    /// Resident memory of the process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// SIGKILL, and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Relay flags that keep tests quick: short polls and backoff.
pub fn relay_flags(provider_url: &str) -> Vec<String> {
    [
        "--provider-url",
        provider_url,
        "--relay-poll",
        "200ms",
        "--provider-poll-scan-interval",
        "200ms",
        "--relay-retry-base",
        "20ms",
        "--relay-retry-cap",
        "500ms",
        "--provider-timeout",
        "2s",
    ]
    .map(String::from)
    .to_vec()
}

/// The engine on `db` relaying to `provider_url`, with `extra` flags.
pub async fn spawn_relaying(db: &str, provider_url: &str, extra: &[&str]) -> TestApp {
    let mut flags = relay_flags(provider_url);
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    spawn_app_with(db, &flags).await
}

impl TestApp {
    /// `GET /transfers/{id}`.
    pub async fn transfer(&self, id: &str) -> Value {
        self.get(&format!("/transfers/{id}"))
            .await
            .json()
            .await
            .unwrap()
    }

    /// The transfer once the provider decided it: no longer `pending` or
    /// `processing` (20 s at most).
    pub async fn wait_final(&self, id: &str) -> Value {
        wait_for("a final status", Duration::from_secs(20), || async {
            !matches!(
                self.transfer(id).await["status"].as_str(),
                Some("pending" | "processing")
            )
        })
        .await;
        self.transfer(id).await
    }
}

/// A server of the test's own that answers every request with `status`,
/// `content_type` and `body`, over real HTTP: a provider that misbehaves
/// in ways provider-sim cannot, or a gateway in front of nothing.
pub async fn answering(
    status: u16,
    content_type: &'static str,
    body: &'static str,
) -> (String, actix_web::dev::ServerHandle) {
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new().default_service(actix_web::web::to(move || async move {
            actix_web::HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap())
                .content_type(content_type)
                .body(body)
        }))
    })
    .workers(1)
    .disable_signals()
    .bind("127.0.0.1:0")
    .unwrap();
    let url = format!("http://{}", server.addrs()[0]);
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    (url, handle)
}

/// A new client on `db`, and its API key.
pub async fn new_client_key(db: &str) -> String {
    let store = Store::connect(
        &payrail::cli::serve_config(["--database-url", db])
            .unwrap()
            .database,
    )
    .unwrap();
    let (_, key) = store.create_client("test").await.unwrap();
    key.expose_secret().to_owned()
}

/// `POST /transfers` to `base` as `key` with a new idempotency key; the id.
pub async fn create_via(base: &str, key: &str) -> String {
    let res = reqwest::Client::new()
        .post(format!("{base}/transfers"))
        .bearer_auth(key)
        .header("Idempotency-Key", new_key())
        .json(&transfer_body())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    res.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}
