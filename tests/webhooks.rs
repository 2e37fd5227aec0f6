//! Webhooks end to end: real Postgres, real provider-sim, a receiver
//! written here (with its own signature check), real HTTP.

mod common;

use std::time::Duration;

use common::receiver::{signature_is_valid, Mode, Receiver};
use common::{
    assert_problem, create_via, fresh_database, new_client_key, new_key, relay_flags,
    spawn_app_with, spawn_sim, transfer_body, wait_for, ServeProcess, TestApp,
};
use payrail::sim::SimArgs;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Fast relay and a schedule scaled down 10 000 times (5 s becomes 0.5 ms,
/// the whole schedule about 10 s).
fn webhook_flags(provider_url: &str, timeout: &str, lease: &str) -> Vec<String> {
    let mut flags = relay_flags(provider_url);
    flags.extend(
        [
            "--webhook-allow-private",
            "--webhook-retry-scale",
            "0.0001",
            "--webhook-poll",
            "100ms",
            "--webhook-timeout",
            timeout,
            "--db-timeout",
            "2s",
            "--webhook-lease",
            lease,
        ]
        .map(String::from),
    );
    flags
}

async fn spawn(provider_url: &str, extra: &[&str]) -> TestApp {
    let mut flags = webhook_flags(provider_url, "300ms", "7s");
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    spawn_app_with(&fresh_database().await, &flags).await
}

async fn post_json(app: &TestApp, path: &str, body: &Value) -> reqwest::Response {
    app.http
        .post(format!("{}{path}", app.address))
        .bearer_auth(&app.api_key)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Registers `url`; returns (endpoint id, secret).
async fn register(app: &TestApp, url: &str) -> (String, String) {
    let res = post_json(app, "/webhook_endpoints", &json!({"url": url})).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let body: Value = res.json().await.unwrap();
    (
        body["id"].as_str().unwrap().to_owned(),
        body["secret"].as_str().unwrap().to_owned(),
    )
}

async fn create_transfer(app: &TestApp, destination: &str) -> String {
    let mut body = transfer_body();
    body["destination_account"] = json!(destination);
    let res = app.post_transfer(&new_key(), &body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    res.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn events(app: &TestApp, query: &str) -> Vec<Value> {
    let res = app.get(&format!("/events{query}")).await;
    assert_eq!(res.status(), StatusCode::OK);
    let body: Value = res.json().await.unwrap();
    body["data"].as_array().unwrap().clone()
}

#[actix_web::test]
async fn endpoint_urls_are_checked_and_endpoints_belong_to_their_client() {
    // Without --webhook-allow-private, as in production.
    let app = spawn_app_with(&fresh_database().await, &[]).await;
    for url in [
        "http://127.0.0.1:9/hooks",
        "http://localhost/hooks",
        "http://10.0.0.8/hooks",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hooks",
        "ftp://example.com/hooks",
        "example.com/hooks",
        "https://user:secret@example.com/hooks",
    ] {
        let res = post_json(&app, "/webhook_endpoints", &json!({ "url": url })).await;
        let problem =
            assert_problem(res, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
        assert_eq!(problem["errors"][0]["field"], "url", "{url}: {problem}");
    }
    let res = post_json(&app, "/webhook_endpoints", &json!({"url": 7, "extra": 1})).await;
    let problem = assert_problem(res, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
    let fields: Vec<&str> = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert!(
        fields.contains(&"url") && fields.contains(&"extra"),
        "{problem}"
    );

    let res = post_json(
        &app,
        "/webhook_endpoints",
        &json!({"url": "https://hooks.example.com/payrail", "description": "ledger"}),
    )
    .await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let created: Value = res.json().await.unwrap();
    let secret = created["secret"].as_str().unwrap();
    assert!(
        secret.starts_with("whsec_") && secret.len() == 6 + 44,
        "{secret}"
    );
    assert_eq!(created["description"], "ledger");

    // The list never shows a secret.
    let list: Value = app.get("/webhook_endpoints").await.json().await.unwrap();
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert!(list["data"][0].get("secret").is_none(), "{list}");

    // Ten at most.
    for i in 1..10 {
        let res = post_json(
            &app,
            "/webhook_endpoints",
            &json!({ "url": format!("https://hooks.example.com/{i}") }),
        )
        .await;
        assert_eq!(res.status(), StatusCode::CREATED);
    }
    let res = post_json(
        &app,
        "/webhook_endpoints",
        &json!({"url": "https://hooks.example.com/eleven"}),
    )
    .await;
    assert_problem(
        res,
        StatusCode::UNPROCESSABLE_ENTITY,
        "webhook-endpoint-limit",
    )
    .await;

    // Another client's endpoint is not found, for every verb.
    let id = created["id"].as_str().unwrap();
    let other = app.other_client().await;
    let res = app
        .http
        .delete(format!("{}/webhook_endpoints/{id}", app.address))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap();
    assert_problem(res, StatusCode::NOT_FOUND, "not-found").await;
    let res = app
        .http
        .post(format!(
            "{}/webhook_endpoints/{id}/rotate_secret",
            app.address
        ))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap();
    assert_problem(res, StatusCode::NOT_FOUND, "not-found").await;
    let theirs: Value = app
        .get_as(&other, "/webhook_endpoints")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(theirs["data"], json!([]));

    // Deleting frees a place.
    let res = app
        .http
        .delete(format!("{}/webhook_endpoints/{id}", app.address))
        .bearer_auth(&app.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let list: Value = app.get("/webhook_endpoints").await.json().await.unwrap();
    assert_eq!(list["data"].as_array().unwrap().len(), 9);
}

#[actix_web::test]
async fn a_failing_receiver_gets_the_same_signed_event_until_it_accepts_it() {
    let sim = spawn_sim(SimArgs::default()).await;
    let app = spawn(&sim.url(), &[]).await;
    let receiver = Receiver::start(Mode::FailFirst(3), Duration::ZERO).await;
    let (endpoint_id, secret) = register(&app, &receiver.url).await;

    let transfer_id = create_transfer(&app, "acc_bob").await;
    wait_for("the delivery", Duration::from_secs(20), || async {
        !receiver.accepted().is_empty()
    })
    .await;

    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), 4, "three failures, then the delivery");
    for a in &arrivals {
        assert!(signature_is_valid(&secret, a), "signature of {a:?}");
        assert_eq!(a.id, arrivals[0].id, "the same webhook-id every attempt");
        assert_eq!(a.body, arrivals[0].body, "the same body every attempt");
    }
    let event: Value = serde_json::from_slice(&arrivals[0].body).unwrap();
    assert_eq!(event["id"], arrivals[0].id.as_str());
    assert!(arrivals[0].id.starts_with("evt_"));
    assert_eq!(event["type"], "transfer.succeeded");
    assert_eq!(event["data"]["object"]["id"], transfer_id.as_str());
    assert_eq!(event["data"]["object"]["status"], "succeeded");

    // A tampered body or another secret does not verify.
    let mut tampered = arrivals[3].clone();
    tampered.body = tampered.body.replace_first(b"succeeded", b"failed____");
    assert!(!signature_is_valid(&secret, &tampered));
    let other = "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    assert!(!signature_is_valid(other, &arrivals[3]));

    // The event's record says so.
    wait_for(
        "the delivery to be recorded",
        Duration::from_secs(5),
        || async { events(&app, "?delivery=delivered").await.len() == 1 },
    )
    .await;
    let listed = events(&app, "").await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], arrivals[0].id.as_str());
    assert_eq!(listed[0]["data"]["object"]["id"], transfer_id.as_str());
    let delivery = &listed[0]["deliveries"][0];
    assert_eq!(delivery["endpoint_id"], endpoint_id.as_str());
    assert_eq!(delivery["attempts"], 4);
    assert_eq!(delivery["last_status"], 204);
    assert!(delivery["delivered_at"].is_string() && delivery["next_attempt_at"].is_null());
    assert!(events(&app, "?delivery=pending").await.is_empty());
    assert!(events(&app, "?type=transfer.failed").await.is_empty());
    let res = app.get("/events?type=transfer.pending").await;
    assert_problem(res, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;

    // /metrics counts the outcomes and shows the backlog (the recorder is
    // shared by every test of this process, so no exact counts).
    let metrics = app.get("/metrics").await.text().await.unwrap();
    for needle in [
        "payrail_webhook_deliveries_total{outcome=\"retry\"}",
        "payrail_webhook_deliveries_total{outcome=\"delivered\"}",
        "payrail_webhook_delivery_seconds",
        "payrail_webhook_backlog",
        "payrail_webhook_dead",
        "payrail_webhook_oldest_due_age_seconds",
    ] {
        assert!(metrics.contains(needle), "{needle} missing from /metrics");
    }

    // Another client sees none of it.
    let other_key = app.other_client().await;
    let theirs: Value = app
        .get_as(&other_key, "/events")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(theirs["data"], json!([]));
    let res = app
        .http
        .post(format!(
            "{}/events/{}/redeliver",
            app.address, arrivals[0].id
        ))
        .bearer_auth(&other_key)
        .send()
        .await
        .unwrap();
    assert_problem(res, StatusCode::NOT_FOUND, "not-found").await;
}

/// Helper: `replace_first` on byte vectors, for tampering.
trait ReplaceFirst {
    fn replace_first(&self, from: &[u8], to: &[u8]) -> Vec<u8>;
}

impl ReplaceFirst for Vec<u8> {
    fn replace_first(&self, from: &[u8], to: &[u8]) -> Vec<u8> {
        let at = self
            .windows(from.len())
            .position(|w| w == from)
            .expect("pattern present");
        [&self[..at], to, &self[at + from.len()..]].concat()
    }
}

#[actix_web::test]
async fn gone_disables_the_endpoint_and_failed_transfers_are_announced_too() {
    let sim = spawn_sim(SimArgs::default()).await;
    let app = spawn(&sim.url(), &[]).await;
    let receiver = Receiver::start(Mode::Status(410), Duration::ZERO).await;
    register(&app, &receiver.url).await;

    // provider-sim declines destinations starting with "decline".
    let failed = create_transfer(&app, "decline_me").await;
    wait_for("the 410", Duration::from_secs(20), || async {
        !receiver.arrivals().is_empty()
    })
    .await;
    let event: Value = serde_json::from_slice(&receiver.arrivals()[0].body).unwrap();
    assert_eq!(event["type"], "transfer.failed");
    assert_eq!(event["data"]["object"]["id"], failed.as_str());

    wait_for(
        "the endpoint to be disabled",
        Duration::from_secs(5),
        || async {
            let list: Value = app.get("/webhook_endpoints").await.json().await.unwrap();
            list["data"][0]["disabled_at"].is_string()
        },
    )
    .await;
    let dead = events(&app, "?delivery=dead").await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["deliveries"][0]["last_status"], 410);

    // A later event has no delivery to the disabled endpoint.
    create_transfer(&app, "acc_bob").await;
    wait_for("the second event", Duration::from_secs(20), || async {
        events(&app, "").await.len() == 2
    })
    .await;
    let newest = &events(&app, "?type=transfer.succeeded").await[0];
    assert_eq!(newest["deliveries"], json!([]));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.arrivals().len(), 1, "nothing more was sent");
}

#[actix_web::test]
async fn a_receiver_that_never_answers_exhausts_the_schedule_and_redeliver_delivers() {
    let sim = spawn_sim(SimArgs::default()).await;
    let app = spawn(&sim.url(), &[]).await;
    let receiver = Receiver::start(Mode::Hang, Duration::ZERO).await;
    let (_, secret) = register(&app, &receiver.url).await;
    create_transfer(&app, "acc_bob").await;

    wait_for("the delivery to die", Duration::from_secs(60), || async {
        events(&app, "?delivery=dead").await.len() == 1
    })
    .await;
    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), 8, "the first attempt and seven retries");
    let event = &events(&app, "?delivery=dead").await[0];
    let delivery = &event["deliveries"][0];
    assert_eq!(delivery["attempts"], 8);
    assert!(delivery["last_status"].is_null(), "{delivery}");
    assert!(
        delivery["last_error"].as_str().unwrap().contains("timeout"),
        "{delivery}"
    );

    receiver.set_mode(Mode::Status(200));
    let id = event["id"].as_str().unwrap();
    let res = app
        .http
        .post(format!("{}/events/{id}/redeliver", app.address))
        .bearer_auth(&app.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["deliveries_due"], 1);
    wait_for("the redelivery", Duration::from_secs(10), || async {
        !receiver.accepted().is_empty()
    })
    .await;
    let accepted = receiver.accepted();
    assert_eq!(accepted.len(), 1);
    assert_eq!(accepted[0].id, id);
    assert!(signature_is_valid(&secret, &accepted[0]));
    wait_for("the record", Duration::from_secs(5), || async {
        events(&app, "?delivery=delivered").await.len() == 1
    })
    .await;
}

#[actix_web::test]
async fn a_rotated_secret_signs_alongside_the_old_one() {
    let sim = spawn_sim(SimArgs::default()).await;
    let app = spawn(&sim.url(), &[]).await;
    let receiver = Receiver::start(Mode::Status(204), Duration::ZERO).await;
    let (endpoint_id, old) = register(&app, &receiver.url).await;
    let res = app
        .http
        .post(format!(
            "{}/webhook_endpoints/{endpoint_id}/rotate_secret",
            app.address
        ))
        .bearer_auth(&app.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let new = res.json::<Value>().await.unwrap()["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(new, old);
    create_transfer(&app, "acc_bob").await;
    wait_for("the delivery", Duration::from_secs(20), || async {
        !receiver.accepted().is_empty()
    })
    .await;
    let arrival = &receiver.accepted()[0];
    assert_eq!(
        arrival.signature.split(' ').count(),
        2,
        "{}",
        arrival.signature
    );
    assert!(signature_is_valid(&new, arrival));
    assert!(signature_is_valid(&old, arrival));
}

/// Starts `serve` processes on one database with a receiver registered.
async fn processes(db: &str, provider: &str, n: usize, tag: &str) -> Vec<ServeProcess> {
    let flags = webhook_flags(provider, "1s", "8s");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut started = Vec::new();
    for i in 0..n {
        let log = std::env::temp_dir().join(format!("payrail-webhooks-{tag}-{i}.log"));
        started.push(ServeProcess::start(db, &flags, "warn", &log).await);
    }
    started
}

async fn client_and_endpoint(db: &str, base: &str, url: &str) -> (String, String) {
    let key = new_client_key(db).await;
    let res = reqwest::Client::new()
        .post(format!("{base}/webhook_endpoints"))
        .bearer_auth(&key)
        .json(&json!({ "url": url }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let secret = res.json::<Value>().await.unwrap()["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    (key, secret)
}

#[actix_web::test]
async fn an_event_settled_before_a_sigkill_is_delivered_after_the_restart() {
    let sim = spawn_sim(SimArgs::default()).await;
    let db = fresh_database().await;
    let receiver = Receiver::start(Mode::Hang, Duration::ZERO).await;
    let mut serve = processes(&db, &sim.url(), 1, "kill").await.remove(0);
    let (key, secret) = client_and_endpoint(&db, &serve.base, &receiver.url).await;
    let transfer_id = create_via(&serve.base, &key).await;

    // The settlement committed and an attempt is in flight: kill it there.
    wait_for("the first attempt", Duration::from_secs(20), || async {
        !receiver.arrivals().is_empty()
    })
    .await;
    serve.kill();
    receiver.set_mode(Mode::Status(204));

    let serve = processes(&db, &sim.url(), 1, "kill-again").await.remove(0);
    wait_for(
        "the delivery after the restart",
        Duration::from_secs(30),
        || async { !receiver.accepted().is_empty() },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let accepted = receiver.accepted();
    assert_eq!(accepted.len(), 1, "delivered once");
    assert!(signature_is_valid(&secret, &accepted[0]));
    let event: Value = serde_json::from_slice(&accepted[0].body).unwrap();
    assert_eq!(event["data"]["object"]["id"], transfer_id.as_str());
    let distinct: std::collections::HashSet<String> =
        receiver.arrivals().into_iter().map(|a| a.id).collect();
    assert_eq!(distinct.len(), 1, "one event id for one transfer");
    drop(serve);
}

#[actix_web::test]
async fn two_processes_never_send_one_delivery_at_once() {
    const TRANSFERS: usize = 30;
    let sim = spawn_sim(SimArgs::default()).await;
    let db = fresh_database().await;
    // Slow answers keep attempts in flight long enough to overlap if two
    // processes held one delivery; the first half of the arrivals fail, so
    // deliveries are claimed again and again.
    let receiver =
        Receiver::start(Mode::FailFirst(TRANSFERS / 2), Duration::from_millis(150)).await;
    let serves = processes(&db, &sim.url(), 2, "pair").await;
    let (key, secret) = client_and_endpoint(&db, &serves[0].base, &receiver.url).await;
    let mut ids = Vec::new();
    for i in 0..TRANSFERS {
        ids.push(create_via(&serves[i % 2].base, &key).await);
    }
    wait_for("every delivery", Duration::from_secs(60), || async {
        let distinct: std::collections::HashSet<String> =
            receiver.accepted().into_iter().map(|a| a.id).collect();
        distinct.len() == TRANSFERS
    })
    .await;
    assert_eq!(
        receiver.overlapping(),
        0,
        "no delivery was sent twice at once"
    );
    let mut announced = std::collections::HashSet::new();
    for a in receiver.accepted() {
        assert!(signature_is_valid(&secret, &a));
        let event: Value = serde_json::from_slice(&a.body).unwrap();
        announced.insert(event["data"]["object"]["id"].as_str().unwrap().to_owned());
    }
    let expected: std::collections::HashSet<String> = ids.into_iter().collect();
    assert_eq!(announced, expected, "one event per transfer, all delivered");
    drop(serves);
}

#[actix_web::test]
async fn finished_events_past_retention_are_reaped_and_pending_ones_kept() {
    let sim = spawn_sim(SimArgs::default()).await;
    // A schedule scaled to 1/100: after its first failure a delivery waits
    // about 50 ms, then minutes, so it is still pending when the reaper runs.
    let mut flags = webhook_flags(&sim.url(), "300ms", "7s");
    let scale = flags
        .iter()
        .position(|f| f == "--webhook-retry-scale")
        .unwrap();
    flags[scale + 1] = "0.01".into();
    flags.extend(["--event-retention", "1s"].map(String::from));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let app = spawn_app_with(&fresh_database().await, &flags).await;
    let receiver = Receiver::start(Mode::Status(204), Duration::ZERO).await;
    register(&app, &receiver.url).await;

    create_transfer(&app, "acc_bob").await;
    wait_for("the first delivery", Duration::from_secs(20), || async {
        events(&app, "?delivery=delivered").await.len() == 1
    })
    .await;
    let delivered = events(&app, "").await[0]["id"].as_str().unwrap().to_owned();

    receiver.set_mode(Mode::Status(500));
    create_transfer(&app, "acc_carol").await;
    wait_for("two failed attempts", Duration::from_secs(20), || async {
        receiver.arrivals().len() >= 3
    })
    .await;
    let pending = events(&app, "?delivery=pending").await;
    assert_eq!(
        pending.len(),
        1,
        "the second event still has a delivery to make"
    );
    let pending = pending[0]["id"].as_str().unwrap().to_owned();

    // Both are now older than --event-retention; only the finished one goes.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    app.reaper.send(payrail::reaper::ReapNow).await.unwrap();
    wait_for(
        "the finished event to be reaped",
        Duration::from_secs(10),
        || async { events(&app, "").await.len() == 1 },
    )
    .await;
    let left = events(&app, "").await;
    assert_eq!(left[0]["id"], pending.as_str());
    assert_eq!(app.count("webhook_events").await, 1);
    assert_eq!(
        app.count("webhook_deliveries").await,
        1,
        "the reaped event's delivery record went with it"
    );
    let res = app
        .http
        .post(format!("{}/events/{delivered}/redeliver", app.address))
        .bearer_auth(&app.api_key)
        .send()
        .await
        .unwrap();
    assert_problem(res, StatusCode::NOT_FOUND, "not-found").await;
    assert_eq!(app.count("transfers").await, 2, "transfers are kept");
}

/// An engine with small delivery shares, so that a few hanging attempts
/// fill them: 16 slots, 2 per endpoint, 8 per client.
async fn small_shares_app(provider_url: &str) -> TestApp {
    let mut flags = webhook_flags(provider_url, "10s", "30s");
    flags.extend(
        [
            "--webhook-concurrency",
            "16",
            "--webhook-endpoint-in-flight-max",
            "2",
            "--webhook-client-in-flight-max",
            "8",
        ]
        .map(String::from),
    );
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    spawn_app_with(&fresh_database().await, &flags).await
}

/// A new client of `app` with one webhook endpoint at `url`; its API key.
async fn other_client_with_endpoint(app: &TestApp, url: &str) -> String {
    let key = app.other_client().await;
    let res = app
        .http
        .post(format!("{}/webhook_endpoints", app.address))
        .bearer_auth(&key)
        .json(&json!({ "url": url }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    key
}

#[actix_web::test]
async fn one_clients_hanging_receivers_never_hold_up_another_clients_deliveries() {
    let sim = spawn_sim(SimArgs::default()).await;
    let hanging = Receiver::start(Mode::Hang, Duration::ZERO).await;
    let healthy = Receiver::start(Mode::Status(204), Duration::ZERO).await;
    let a = small_shares_app(&sim.url()).await;
    // Client A: ten endpoints that accept the connection and never answer.
    for i in 0..10 {
        register(&a, &format!("{}/{i}", hanging.url)).await;
    }
    a.create_transfers(60, &transfer_body()).await;
    wait_for("A's attempts to hang", Duration::from_secs(20), || async {
        hanging.arrivals().len() >= 8
    })
    .await;

    // Client B, one healthy endpoint, created after A's 600 deliveries.
    let b_key = other_client_with_endpoint(&a, &healthy.url).await;
    for _ in 0..5 {
        create_via(&a.address, &b_key).await;
    }
    wait_for(
        "B's events while A's receivers hang",
        Duration::from_secs(8),
        || async {
            let ids: std::collections::HashSet<String> =
                healthy.accepted().into_iter().map(|x| x.id).collect();
            ids.len() == 5
        },
    )
    .await;
    assert!(
        hanging.arrivals().len() <= 8,
        "A never held more than its share: {} attempts hang",
        hanging.arrivals().len()
    );
}

#[actix_web::test]
async fn a_deleted_endpoint_is_purged_once_its_events_are_past_retention() {
    let sim = spawn_sim(SimArgs::default()).await;
    let mut flags = webhook_flags(&sim.url(), "300ms", "7s");
    flags.extend(["--event-retention", "1s"].map(String::from));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let app = spawn_app_with(&fresh_database().await, &flags).await;
    let receiver = Receiver::start(Mode::Status(204), Duration::ZERO).await;
    let (gone, _) = register(&app, &receiver.url).await;
    let (kept, _) = register(&app, &receiver.url).await;
    create_transfer(&app, "acc_bob").await;
    wait_for("both deliveries", Duration::from_secs(20), || async {
        receiver.accepted().len() == 2
    })
    .await;
    let res = app
        .http
        .delete(format!("{}/webhook_endpoints/{gone}", app.address))
        .bearer_auth(&app.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        app.count("webhook_endpoints").await,
        2,
        "kept until its events go"
    );

    tokio::time::sleep(Duration::from_millis(1100)).await;
    app.reaper.send(payrail::reaper::ReapNow).await.unwrap();
    wait_for(
        "the deleted endpoint to be purged",
        Duration::from_secs(10),
        || async { app.count("webhook_endpoints").await == 1 },
    )
    .await;
    let left: uuid::Uuid = app
        .db()
        .await
        .query_one("SELECT id FROM webhook_endpoints", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left.to_string(), kept);
}

#[actix_web::test]
async fn a_million_due_deliveries_behind_a_hanging_receiver_delay_no_other_client() {
    let sim = spawn_sim(SimArgs::default()).await;
    let hanging = Receiver::start(Mode::Hang, Duration::ZERO).await;
    let healthy = Receiver::start(Mode::Status(204), Duration::ZERO).await;
    let a = small_shares_app(&sim.url()).await;
    // Client A: one endpoint that never answers, and a million events due
    // to it, older than anything of B's.
    let (endpoint, _) = register(&a, &hanging.url).await;
    let endpoint: uuid::Uuid = endpoint.parse().unwrap();
    let db = a.db().await;
    db.batch_execute("SET jit = off").await.unwrap();
    db.execute(
        "WITH e AS (
            INSERT INTO webhook_events (client_id, id, transfer_id, type, body, created_at)
            SELECT $1, gen_random_uuid(), gen_random_uuid(), 'transfer.succeeded', '{}',
                   now() - interval '1 hour'
            FROM generate_series(1, 1000000)
            RETURNING id, client_id
         )
         INSERT INTO webhook_deliveries (event_id, endpoint_id, client_id, next_attempt_at)
         SELECT id, $2, client_id, now() - interval '1 hour' FROM e",
        &[&a.client_id, &endpoint],
    )
    .await
    .unwrap();
    db.batch_execute("VACUUM ANALYZE webhook_deliveries")
        .await
        .unwrap();
    wait_for("A's attempts to hang", Duration::from_secs(20), || async {
        hanging.arrivals().len() >= 2
    })
    .await;

    // Client B, one healthy endpoint: each of its events is delivered
    // within 10 s, while A's million wait behind A's full endpoint.
    let b_key = other_client_with_endpoint(&a, &healthy.url).await;
    for n in 1..=5 {
        create_via(&a.address, &b_key).await;
        wait_for(
            "B's event while a million of A's wait",
            Duration::from_secs(10),
            || async { healthy.accepted().len() >= n },
        )
        .await;
    }
    assert!(
        hanging.arrivals().len() <= 2,
        "A never held more than its endpoint's share: {} attempts hang",
        hanging.arrivals().len()
    );
}
