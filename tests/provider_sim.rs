//! provider-sim and HttpProvider against each other over real HTTP (docs/ARCHITECTURE.md).

use std::time::Duration;

use payrail::provider::http::HttpProvider;
use payrail::provider::{Payout, Provider, ProviderError, ProviderOutcome};
use payrail::sim::wire::{PayoutRecord, Stats};
use payrail::sim::{self, SimArgs, SimServer};
use uuid::Uuid;

const TIMEOUT: Duration = Duration::from_secs(5);

async fn sim_with(args: SimArgs) -> SimServer {
    sim::start(SimArgs {
        listen: "127.0.0.1:0".into(),
        workers: Some(1),
        seed: Some(1),
        ..args
    })
    .await
    .expect("sim starts")
}

async fn sim() -> SimServer {
    sim_with(SimArgs::default()).await
}

fn provider(sim: &SimServer) -> HttpProvider {
    HttpProvider::new(&sim.url(), TIMEOUT).unwrap()
}

fn payout(destination: &str) -> Payout {
    Payout {
        transfer_id: Uuid::new_v4(),
        account_owner: Uuid::from_u128(1),
        amount: 1500,
        currency: "JPY".into(),
        source_account: "acc_src".into(),
        destination_account: destination.into(),
    }
}

async fn stats(sim: &SimServer) -> Stats {
    reqwest::get(format!("{}/stats", sim.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn record(sim: &SimServer, id: Uuid) -> reqwest::Response {
    reqwest::get(format!("{}/payouts/{id}", sim.url()))
        .await
        .unwrap()
}

fn reference(outcome: Result<ProviderOutcome, ProviderError>) -> String {
    match outcome {
        Ok(ProviderOutcome::Succeeded { reference }) => reference,
        other => panic!("expected success, got {other:?}"),
    }
}

#[actix_web::test]
async fn succeeded_and_recorded() {
    let sim = sim().await;
    let p = payout("acc_dst");
    let r = reference(provider(&sim).execute(p.clone()).await);
    assert!(r.starts_with("sim_"), "{r}");

    let rec: PayoutRecord = record(&sim, p.transfer_id).await.json().await.unwrap();
    assert_eq!(rec.request.amount, 1500);
    assert_eq!(rec.request.destination_account, "acc_dst");
    assert!(!rec.ambiguous);
    assert_eq!(
        record(&sim, Uuid::new_v4()).await.status(),
        reqwest::StatusCode::NOT_FOUND
    );
    let s = stats(&sim).await;
    assert_eq!(
        (s.requests, s.executions, s.replays, s.distinct_ids),
        (1, 1, 0, 1)
    );
    sim.stop().await.unwrap();
}

#[actix_web::test]
async fn decline_prefix_is_declined() {
    let sim = sim().await;
    let outcome = provider(&sim).execute(payout("decline_42")).await;
    assert_eq!(
        outcome,
        Ok(ProviderOutcome::Declined {
            reason: "insufficient_funds".into()
        })
    );
    assert_eq!(stats(&sim).await.executions, 1);
}

#[actix_web::test]
async fn decline_rate_one_declines_everything() {
    let sim = sim_with(SimArgs {
        decline_rate: 1.0,
        ..SimArgs::default()
    })
    .await;
    let outcome = provider(&sim).execute(payout("acc_dst")).await;
    assert!(
        matches!(outcome, Ok(ProviderOutcome::Declined { .. })),
        "{outcome:?}"
    );
}

#[actix_web::test]
async fn replay_returns_same_reference_without_executing() {
    let sim = sim().await;
    let provider = provider(&sim);
    let p = payout("acc_dst");
    let first = reference(provider.execute(p.clone()).await);
    let second = reference(provider.execute(p.clone()).await);
    assert_eq!(first, second);
    let s = stats(&sim).await;
    assert_eq!(
        (s.requests, s.executions, s.replays, s.distinct_ids),
        (2, 1, 1, 1)
    );
}

#[actix_web::test]
async fn replay_is_byte_identical_and_marked() {
    let sim = sim().await;
    let p = payout("acc_dst");
    let client = reqwest::Client::new();
    let send = |body: String| {
        client
            .post(format!("{}/payouts", sim.url()))
            .header("Idempotency-Key", p.transfer_id.to_string())
            .header("Content-Type", "application/json")
            .body(body)
            .send()
    };
    let body = format!(
        r#"{{"transfer_id":"{}","account_owner":"00000000-0000-0000-0000-000000000001","amount":1500,"currency":"JPY","source_account":"acc_src","destination_account":"acc_dst"}}"#,
        p.transfer_id
    );
    // Same fields, different key order and whitespace: still the same body.
    let reordered = format!(
        r#"{{ "destination_account": "acc_dst", "source_account": "acc_src", "currency": "JPY", "amount": 1500, "account_owner": "00000000-0000-0000-0000-000000000001", "transfer_id": "{}" }}"#,
        p.transfer_id
    );
    let a = send(body).await.unwrap();
    assert_eq!(a.status(), 200);
    assert!(a.headers().get("idempotent-replayed").is_none());
    let a = a.bytes().await.unwrap();
    let b = send(reordered).await.unwrap();
    assert_eq!(b.status(), 200);
    assert_eq!(b.headers()["idempotent-replayed"], "true");
    assert_eq!(a, b.bytes().await.unwrap());
}

#[actix_web::test]
async fn different_body_same_key_is_permanent() {
    let sim = sim().await;
    let provider = provider(&sim);
    let p = payout("acc_dst");
    reference(provider.execute(p.clone()).await);
    let changed = Payout {
        amount: p.amount + 1,
        ..p.clone()
    };
    match provider.execute(changed).await {
        Err(ProviderError::Permanent { reason }) => {
            assert!(reason.contains("422"), "{reason}");
            assert!(reason.contains("idempotency_key_reused"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let s = stats(&sim).await;
    assert_eq!((s.executions, s.replays), (1, 0));
}

#[actix_web::test]
async fn fail_rate_one_is_transient_with_retry_after_and_never_executes() {
    let sim = sim_with(SimArgs {
        fail_rate: 1.0,
        ..SimArgs::default()
    })
    .await;
    let provider = provider(&sim);
    for _ in 0..3 {
        match provider.execute(payout("acc_dst")).await {
            Err(ProviderError::Transient {
                retry_after,
                reason,
                ambiguous,
            }) => {
                assert!(ambiguous, "a 503 may hide an execution");
                assert_eq!(retry_after, Some(Duration::from_secs(1)));
                assert!(reason.contains("503"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
    let s = stats(&sim).await;
    assert_eq!(
        (
            s.requests,
            s.executions,
            s.distinct_ids,
            s.injected_failures
        ),
        (3, 0, 0, 3)
    );
}

#[actix_web::test]
async fn ambiguous_drop_executes_then_retry_learns_the_outcome() {
    let sim = sim_with(SimArgs {
        ambiguous_rate: 1.0,
        ..SimArgs::default()
    })
    .await;
    let provider = provider(&sim);
    let p = payout("acc_dst");

    match provider.execute(p.clone()).await {
        Err(ProviderError::Transient { retry_after, .. }) => assert_eq!(retry_after, None),
        other => panic!("{other:?}"),
    }
    let s = stats(&sim).await;
    assert_eq!((s.executions, s.distinct_ids, s.ambiguous_drops), (1, 1, 1));
    let rec: PayoutRecord = record(&sim, p.transfer_id).await.json().await.unwrap();
    assert!(rec.ambiguous);

    // The retry is a replay, which is always answered: the engine learns the
    // outcome of the payout that executed behind the dropped connection.
    let r = reference(provider.execute(p.clone()).await);
    match rec.answer {
        payrail::sim::wire::Answer::Succeeded { reference, .. } => assert_eq!(reference, r),
        other => panic!("{other:?}"),
    }
    let s = stats(&sim).await;
    assert_eq!((s.requests, s.executions, s.replays), (2, 1, 1));
}

#[actix_web::test]
async fn ambiguous_drop_is_an_error_not_a_2xx_for_a_plain_client() {
    let sim = sim_with(SimArgs {
        ambiguous_rate: 1.0,
        ..SimArgs::default()
    })
    .await;
    let p = payout("acc_dst");
    let result = reqwest::Client::new()
        .post(format!("{}/payouts", sim.url()))
        .header("Idempotency-Key", p.transfer_id.to_string())
        .json(&serde_json::json!({
            "transfer_id": p.transfer_id, "amount": 1, "currency": "JPY",
            "source_account": "a", "destination_account": "b", "account_owner": uuid::Uuid::nil(),
        }))
        .send()
        .await;
    // Not even a status line arrives: send() itself fails.
    let err = result.expect_err("the connection must be dropped before any response head");
    assert!(!err.is_timeout());
    assert_eq!(stats(&sim).await.executions, 1);
}

#[actix_web::test]
async fn timeout_is_transient_and_the_payout_still_executed() {
    let sim = sim_with(SimArgs {
        latency_ms: 1_000,
        ..SimArgs::default()
    })
    .await;
    let provider = HttpProvider::new(&sim.url(), Duration::from_millis(200)).unwrap();
    let p = payout("acc_dst");
    match provider.execute(p.clone()).await {
        Err(ProviderError::Transient { reason, .. }) => {
            assert!(reason.contains("timeout"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // Latency is spent after the decision, so the timed-out call executed.
    assert_eq!(stats(&sim).await.executions, 1);
}

#[actix_web::test]
async fn connection_refused_is_transient() {
    // Bind then release a port so nothing listens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let provider = HttpProvider::new(&format!("http://127.0.0.1:{port}"), TIMEOUT).unwrap();
    match provider.execute(payout("acc_dst")).await {
        Err(ProviderError::Transient {
            reason,
            retry_after,
            ambiguous,
        }) => {
            assert!(reason.contains("connection"), "{reason}");
            assert!(!ambiguous, "a refused connection carried no request");
            assert_eq!(retry_after, None);
        }
        other => panic!("{other:?}"),
    }
}

#[actix_web::test]
async fn fifty_concurrent_identical_requests_execute_once() {
    let sim = sim_with(SimArgs {
        // Several workers and some latency so the requests truly overlap.
        workers: Some(2),
        latency_ms: 20,
        ..SimArgs::default()
    })
    .await;
    let provider = provider(&sim);
    let p = payout("acc_dst");
    let calls = (0..50).map(|_| provider.execute(p.clone()));
    let refs: Vec<String> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(reference)
        .collect();
    assert!(refs.iter().all(|r| *r == refs[0]));
    let s = stats(&sim).await;
    assert_eq!(
        (s.requests, s.executions, s.replays, s.distinct_ids),
        (50, 1, 49, 1)
    );
}

#[actix_web::test]
async fn bad_requests_are_rejected_and_store_nothing() {
    let sim = sim().await;
    let client = reqwest::Client::new();
    let url = format!("{}/payouts", sim.url());
    let id = Uuid::new_v4();
    let good = serde_json::json!({
        "transfer_id": id, "amount": 1, "currency": "JPY",
        "source_account": "a", "destination_account": "b", "account_owner": uuid::Uuid::nil(),
    });
    let post = |key: Option<String>, body: serde_json::Value| {
        let mut r = client.post(&url).json(&body);
        if let Some(k) = key {
            r = r.header("Idempotency-Key", k);
        }
        r.send()
    };
    let cases: Vec<(Option<String>, serde_json::Value, u16)> = vec![
        (None, good.clone(), 400),
        (Some("not-a-uuid".into()), good.clone(), 400),
        (Some(Uuid::new_v4().to_string()), good.clone(), 422), // key != transfer_id
        (
            Some(id.to_string()),
            serde_json::json!({"transfer_id": id}),
            422,
        ),
        (
            Some(id.to_string()),
            serde_json::json!({"transfer_id": id, "amount": 0, "currency": "JPY",
                "source_account": "a", "destination_account": "b", "account_owner": uuid::Uuid::nil()}),
            422,
        ),
        (
            Some(id.to_string()),
            serde_json::json!({"transfer_id": id, "amount": 1, "currency": "JPY",
                "source_account": "a", "destination_account": "b", "account_owner": uuid::Uuid::nil(), "extra": 1}),
            422,
        ),
    ];
    for (key, body, want) in cases {
        let resp = post(key.clone(), body.clone()).await.unwrap();
        assert_eq!(resp.status().as_u16(), want, "{key:?} {body}");
    }
    let resp = client
        .post(&url)
        .header("Idempotency-Key", id.to_string())
        .header("Content-Type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);

    let s = stats(&sim).await;
    assert_eq!((s.requests, s.executions, s.distinct_ids), (7, 0, 0));
    // Rejections stored nothing: the key now works with a valid body.
    assert_eq!(
        post(Some(id.to_string()), good).await.unwrap().status(),
        200
    );
}

#[actix_web::test]
async fn max_payouts_bounds_the_store() {
    let sim = sim_with(SimArgs {
        max_payouts: 1,
        ..SimArgs::default()
    })
    .await;
    let provider = provider(&sim);
    let p = payout("acc_dst");
    reference(provider.execute(p.clone()).await);
    match provider.execute(payout("acc_dst")).await {
        Err(ProviderError::Transient { reason, .. }) => assert!(reason.contains("507"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // Stored ids keep replaying.
    reference(provider.execute(p).await);
    assert_eq!(stats(&sim).await.distinct_ids, 1);
}

#[actix_web::test]
async fn healthz_and_unknown_routes() {
    let sim = sim().await;
    assert_eq!(
        reqwest::get(format!("{}/healthz", sim.url()))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        reqwest::get(format!("{}/nope", sim.url()))
            .await
            .unwrap()
            .status(),
        404
    );
}

/// The sim must also run outside an actix System, e.g. under `#[tokio::main]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_under_plain_tokio() {
    let sim = sim().await;
    reference(provider(&sim).execute(payout("acc_dst")).await);
    sim.stop().await.unwrap();
}
