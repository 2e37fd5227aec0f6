//! Asynchronous payouts over real HTTP: provider-sim answers `processing`,
//! decides later and tells the engine by signed notifications (some lost,
//! some twice, some late); the engine applies them, looks up what it was
//! not told, and never moves a transfer backwards.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{
    assert_every_metric_described, free_port, fresh_database, relay_flags, sim_stats,
    spawn_app_listening, spawn_relaying, spawn_sim, transfer_body, wait_for, TestApp,
};
use payrail::domain::webhook::WebhookSecret;
use payrail::sim::SimArgs;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// An engine on a port chosen in advance, relaying to a sim that answers
/// `processing` and notifies that engine, signed with a shared secret.
async fn async_pair(sim: SimArgs, extra: &[&str]) -> (TestApp, payrail::sim::SimServer) {
    let secret = WebhookSecret::generate();
    let port = free_port();
    let sim = spawn_sim(SimArgs {
        async_rate: 1.0,
        notify_url: Some(format!("http://127.0.0.1:{port}/provider/notifications")),
        notify_secret: Some(secret.clone()),
        ..sim
    })
    .await;
    let mut flags = relay_flags(&sim.url());
    flags.extend(
        [
            "--provider-notification-secret",
            &secret.encode(),
            "--webhook-allow-private",
        ]
        .map(String::from),
    );
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let app = spawn_app_listening(
        &fresh_database().await,
        &format!("127.0.0.1:{port}"),
        &flags,
    )
    .await;
    (app, sim)
}

/// The types and sequence numbers of a transfer's events, by sequence.
async fn events_of(app: &TestApp, transfer_id: &str) -> Vec<(String, i64)> {
    let page: Value = app.get("/events?limit=100").await.json().await.unwrap();
    let mut found: Vec<(String, i64)> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["data"]["object"]["id"] == transfer_id)
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["data"]["sequence"].as_i64().unwrap(),
            )
        })
        .collect();
    found.sort_by_key(|(_, n)| *n);
    found
}

#[actix_web::test]
async fn an_accepted_payout_ends_by_notification_and_a_return_comes_back_later() {
    let (app, sim) = async_pair(
        SimArgs {
            settle_after_ms: (50, 150),
            return_rate: 1.0,
            notify_duplicate_rate: 0.5,
            notify_reorder_rate: 0.3,
            ..SimArgs::default()
        },
        &[],
    )
    .await;
    let ids = app.create_transfers(12, &transfer_body()).await;
    for id in &ids {
        wait_for("the transfer returned", Duration::from_secs(20), || async {
            app.transfer(id).await["status"] == "returned"
        })
        .await;
    }
    let t = app.transfer(&ids[0]).await;
    assert!(t["provider_reference"]
        .as_str()
        .unwrap()
        .starts_with("sim_"));
    assert!(
        t["return_reason"].is_string() && t["returned_at"].is_string(),
        "{t}"
    );
    assert_eq!(t["anomalies"], json!([]));
    // Every change announced once, in order.
    for id in &ids {
        assert_eq!(
            events_of(&app, id).await,
            [
                ("transfer.processing".to_owned(), 1),
                ("transfer.succeeded".to_owned(), 2),
                ("transfer.returned".to_owned(), 3)
            ],
            "{id}"
        );
    }
    let stats = sim_stats(&sim).await;
    assert_eq!((stats.executions, stats.returned), (12, 12));
    assert!(stats.notifications_sent >= 24, "{stats:?}");
    // Nothing left to call or to ask about.
    assert_eq!(app.count("outbox").await, 0);
    assert_eq!(app.count("provider_polls").await, 0);
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("payrail_provider_notifications_total{outcome=\"applied\"}"),
        "{metrics}"
    );
}

#[actix_web::test]
async fn notifications_that_never_come_are_caught_by_polling() {
    let (app, sim) = async_pair(
        SimArgs {
            settle_after_ms: (50, 100),
            notify_drop_rate: 1.0,
            decline_rate: 0.5,
            ..SimArgs::default()
        },
        &[
            "--provider-poll-after",
            "300ms",
            "--provider-poll-interval-max",
            "1s",
        ],
    )
    .await;
    let ids = app.create_transfers(10, &transfer_body()).await;
    let mut statuses = Vec::new();
    for id in &ids {
        statuses.push(app.wait_final(id).await["status"].clone());
    }
    assert!(statuses.iter().all(|s| s == "succeeded" || s == "failed"));
    // The engine's view is the provider's, transfer by transfer.
    for (id, status) in ids.iter().zip(&statuses) {
        let record: Value = reqwest::get(format!("{}/payouts/{id}", sim.url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let expected = if record["status"] == "declined" {
            "failed"
        } else {
            "succeeded"
        };
        assert_eq!(status, expected, "{record}");
    }
    assert_eq!(sim_stats(&sim).await.notifications_sent, 0);
    assert_eq!(app.count("provider_polls").await, 0);
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("payrail_provider_polls_total{outcome=\"outcome\"} 10"),
        "{metrics}"
    );
    // With the relay, the poller and the notification intake running too.
    assert_every_metric_described(&metrics);
}

#[actix_web::test]
async fn a_return_whose_notifications_were_all_lost_is_found_by_looking_succeeded_transfers_up_again(
) {
    // Half the payouts come back returned 50-150 ms after their success,
    // and no return is ever told; decisions are.
    let (app, sim) = async_pair(
        SimArgs {
            settle_after_ms: (50, 150),
            return_rate: 0.5,
            notify_return_drop_rate: 1.0,
            ..SimArgs::default()
        },
        &["--return-window", "3s", "--return-lookups", "3"],
    )
    .await;
    let ids = app.create_transfers(12, &transfer_body()).await;
    for id in &ids {
        assert_eq!(app.wait_final(id).await["status"], "succeeded");
    }
    // Every watch ends: at the first lookup (1 s after the success) for a
    // returned payout, after the third (3 s) for the others.
    wait_for(
        "every return watch ended",
        Duration::from_secs(15),
        || async { app.count("return_watches").await == 0 },
    )
    .await;
    let mut returned = 0;
    for id in &ids {
        let record: Value = reqwest::get(format!("{}/payouts/{id}", sim.url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let t = app.transfer(id).await;
        assert_eq!(
            t["status"], record["status"],
            "the engine's view is the provider's: {t} {record}"
        );
        if t["status"] == "returned" {
            returned += 1;
            assert!(t["return_reason"].is_string(), "{t}");
            assert_eq!(
                events_of(&app, id).await.last().unwrap().0,
                "transfer.returned",
                "the return is announced"
            );
        }
    }
    let stats = sim_stats(&sim).await;
    assert_eq!(stats.returned, returned);
    assert!(
        returned > 0 && returned < 12,
        "the seed returns some: {returned}"
    );
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(&format!(
            "payrail_return_lookups_total{{outcome=\"changed\"}} {returned}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "payrail_return_lookups_total{{outcome=\"succeeded\"}} {}",
            (12 - returned) * 3
        )),
        "each transfer not returned was looked up three times: {metrics}"
    );
    assert_every_metric_described(&metrics);
}

/// A notification signed with `secret`, its timestamp `skew` seconds off.
async fn notify(
    app: &TestApp,
    secret: &WebhookSecret,
    id: &str,
    body: &Value,
    skew: i64,
) -> reqwest::Response {
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        + skew;
    let body = body.to_string();
    reqwest::Client::new()
        .post(format!("{}/provider/notifications", app.address))
        .header("webhook-id", id)
        .header("webhook-timestamp", at.to_string())
        .header("webhook-signature", secret.sign(id, at, body.as_bytes()))
        .body(body)
        .send()
        .await
        .unwrap()
}

fn update(transfer_id: &str, status: &str) -> Value {
    json!({"type": "payout.updated", "data": {"transfer_id": transfer_id, "status": status,
        "reference": "sim_late", "reason": if status == "succeeded" { Value::Null } else { json!("because") }}})
}

#[actix_web::test]
async fn notifications_are_authenticated_idempotent_and_never_move_a_transfer_backwards() {
    // Accepted by the provider, decided only in an hour: the test decides.
    let sim = spawn_sim(SimArgs {
        async_rate: 1.0,
        settle_after_ms: (3_600_000, 3_600_000),
        ..SimArgs::default()
    })
    .await;
    let old = WebhookSecret::generate();
    let new = WebhookSecret::generate();
    let secrets = format!("{},{}", new.encode(), old.encode());
    let app = spawn_relaying(
        &fresh_database().await,
        &sim.url(),
        &["--provider-notification-secret", &secrets],
    )
    .await;
    let [a, b]: [String; 2] = app
        .create_transfers(2, &transfer_body())
        .await
        .try_into()
        .unwrap();
    for id in [&a, &b] {
        wait_for("processing", Duration::from_secs(10), || async {
            app.transfer(id).await["status"] == "processing"
        })
        .await;
    }
    // Both accepted and undecided: `payrail transfers stuck` lists them
    // once they pass the limit (here: at once).
    let stuck = app.store.polls().stuck(Duration::ZERO, 10).await.unwrap();
    assert_eq!(stuck.len(), 2);

    // Not the provider: refused, nothing changes.
    let stranger = WebhookSecret::generate();
    let res = notify(&app, &stranger, "n0", &update(&a, "succeeded"), 0).await;
    common::assert_problem(
        res,
        StatusCode::UNAUTHORIZED,
        "notification-unauthenticated",
    )
    .await;
    let res = notify(&app, &new, "n0", &update(&a, "succeeded"), -600).await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let res = notify(&app, &new, "n0", &json!({"type": "payout.updated"}), 0).await;
    common::assert_problem(res, StatusCode::BAD_REQUEST, "notification-malformed").await;
    assert_eq!(app.transfer(&a).await["status"], "processing");

    // A return that overtook its success: the transfer passes through
    // succeeded and ends returned; the late success changes nothing.
    assert_eq!(
        notify(&app, &old, "n1", &update(&a, "returned"), 0)
            .await
            .status(),
        204
    );
    assert_eq!(
        notify(&app, &new, "n2", &update(&a, "succeeded"), 0)
            .await
            .status(),
        204
    );
    let t = app.transfer(&a).await;
    assert_eq!(
        (t["status"].as_str(), t["return_reason"].as_str()),
        (Some("returned"), Some("because"))
    );
    assert_eq!(
        events_of(&app, &a).await,
        [
            ("transfer.processing".to_owned(), 1),
            ("transfer.succeeded".to_owned(), 2),
            ("transfer.returned".to_owned(), 3)
        ]
    );
    // A decline after that contradicts it: kept as an anomaly, nothing moves.
    assert_eq!(
        notify(&app, &new, "n3", &update(&a, "declined"), 0)
            .await
            .status(),
        204
    );
    let t = app.transfer(&a).await;
    assert_eq!(t["status"], "returned");
    assert_eq!(t["anomalies"].as_array().unwrap().len(), 1, "{t}");
    assert_eq!(t["anomalies"][0]["reported"], "declined");
    assert_eq!(t["anomalies"][0]["status_then"], "returned");
    assert_eq!(t["anomalies"][0]["source"], "notification");

    // A repeat of a notification id is answered and not applied again,
    // even with another body.
    assert_eq!(
        notify(&app, &new, "n4", &update(&b, "declined"), 0)
            .await
            .status(),
        204
    );
    assert_eq!(
        notify(&app, &new, "n4", &update(&b, "declined"), 0)
            .await
            .status(),
        204
    );
    let t = app.transfer(&b).await;
    assert_eq!(
        (t["status"].as_str(), t["failure_reason"].as_str()),
        (Some("failed"), Some("because"))
    );
    assert_eq!(events_of(&app, &b).await.len(), 2);
    assert_eq!(
        notify(&app, &new, "n4", &update(&b, "succeeded"), 0)
            .await
            .status(),
        204
    );
    assert_eq!(app.transfer(&b).await["anomalies"], json!([]));

    // An unknown transfer is answered 204 (nothing for the provider to fix).
    let unknown = uuid::Uuid::now_v7().to_string();
    assert_eq!(
        notify(&app, &new, "n5", &update(&unknown, "succeeded"), 0)
            .await
            .status(),
        204
    );
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("payrail_provider_notifications_total{outcome=\"unknown_transfer\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("payrail_transfer_anomalies_total{source=\"notification\"} 1"));

    // Postgres itself refuses a change that is not allowed.
    let db = app.db().await;
    let err = db
        .execute(
            "UPDATE transfers SET status = 'pending' WHERE id = $1::text::uuid",
            &[&a],
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("may not go from returned to pending")
            || format!("{err:?}").contains("may not go from"),
        "{err:?}"
    );

    // Without a secret the endpoint does not exist.
    let plain = spawn_relaying(&fresh_database().await, &sim.url(), &[]).await;
    let res = notify(&plain, &new, "n6", &update(&a, "succeeded"), 0).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}

#[actix_web::test]
async fn a_payout_answered_succeeded_after_its_notification_said_declined_is_kept_as_an_anomaly() {
    // The provider answers the POST after a second; its notification that
    // the payout was declined arrives before that answer.
    let sim = spawn_sim(SimArgs {
        latency_ms: 1000,
        ..SimArgs::default()
    })
    .await;
    let secret = WebhookSecret::generate();
    let app = spawn_relaying(
        &fresh_database().await,
        &sim.url(),
        &["--provider-notification-secret", &secret.encode()],
    )
    .await;
    let id = app.create_transfers(1, &transfer_body()).await.remove(0);
    let res = notify(
        &app,
        &secret,
        "ntf_early_decline",
        &update(&id, "declined"),
        0,
    )
    .await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    assert_eq!(app.transfer(&id).await["status"], "failed");
    // The POST's `succeeded` comes back: the transfer stays failed (nothing
    // moves out of a final status), and the contradiction is kept.
    wait_for("the relay's answer", Duration::from_secs(10), || async {
        app.transfer(&id).await["anomalies"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    })
    .await;
    let t = app.transfer(&id).await;
    assert_eq!(t["status"], "failed");
    let anomaly = &t["anomalies"][0];
    assert_eq!(anomaly["reported"], "succeeded", "{t}");
    assert_eq!(anomaly["source"], "relay", "{t}");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("payrail_transfer_anomalies_total{source=\"relay\"} 1"),
        "{metrics}"
    );
    assert_eq!(app.count("outbox").await, 0, "the relay's work ended");
}
