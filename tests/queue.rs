//! The leased queue's rules against a real Postgres: a row taken over after
//! its lease is ambiguous, a holder whose lease ran out is fenced out of
//! every write (a final outcome included), and rows given back by a drain
//! are neither ambiguous nor charged to the retry budget.

mod common;

use std::time::Duration;

use common::{spawn_app, transfer_body, TestApp};
use payrail::domain::{ProviderText, TransferStatus};
use payrail::store::outbox::{ClaimedRow, Settlement};

const LEASE: Duration = Duration::from_secs(30);

/// One pending transfer, written by an engine without a relay, so its
/// outbox row waits unclaimed.
async fn one_pending() -> (TestApp, String) {
    let app = spawn_app().await;
    let id = app.create_transfers(1, &transfer_body()).await.remove(0);
    (app, id)
}

/// Ends every lease now, as if the holder had stalled past it.
async fn expire_leases(app: &TestApp) {
    app.db()
        .await
        .execute("UPDATE outbox SET locked_until = now() - interval '1 second' WHERE locked_until IS NOT NULL", &[])
        .await
        .unwrap();
}

async fn status(app: &TestApp, id: &str) -> String {
    app.get(&format!("/transfers/{id}"))
        .await
        .json::<serde_json::Value>()
        .await
        .unwrap()["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn final_as(status: TransferStatus) -> Settlement {
    Settlement::Final {
        status,
        provider_reference: (status == TransferStatus::Succeeded)
            .then(|| ProviderText::clean("ref")),
        failure_reason: (status == TransferStatus::Failed).then(|| ProviderText::clean("HTTP 403")),
    }
}

async fn nothing_due(app: &TestApp) -> bool {
    app.store
        .outbox()
        .claim(10, LEASE)
        .await
        .unwrap()
        .is_empty()
}

async fn claim_one(app: &TestApp) -> ClaimedRow {
    let mut rows = app.store.outbox().claim(10, LEASE).await.unwrap();
    assert_eq!(rows.len(), 1, "one row is due");
    rows.remove(0)
}

#[actix_web::test]
async fn a_row_taken_over_after_its_lease_is_ambiguous_and_its_old_holder_is_fenced_out() {
    let (app, id) = one_pending().await;
    let first = claim_one(&app).await;
    assert_eq!(
        (first.attempt, first.budget_used, first.ambiguous),
        (1, 1, false)
    );
    assert!(nothing_due(&app).await, "held rows are not claimed twice");

    // The holder vanished without recording anything; its lease ran out.
    expire_leases(&app).await;
    let second = claim_one(&app).await;
    assert_eq!(second.attempt, 2, "the fencing token grows");
    assert!(
        second.ambiguous,
        "the vanished holder may have called the provider"
    );
    let listed = app.store.outbox().entries(false, 10).await.unwrap();
    assert!(
        listed[0].ambiguous,
        "outbox list shows the row is ambiguous"
    );

    // The old holder comes back with a final outcome: it writes nothing.
    let stale = app
        .store
        .outbox()
        .settle(
            &[(first, final_as(TransferStatus::Failed))],
            std::time::Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!(stale.held, vec![false]);
    assert!(stale.changed.is_empty());
    assert_eq!(status(&app, &id).await, "pending");

    let live = app
        .store
        .outbox()
        .settle(
            &[(second, final_as(TransferStatus::Succeeded))],
            std::time::Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!(live.held, vec![true]);
    assert_eq!(status(&app, &id).await, "succeeded");
    assert_eq!(app.count("outbox").await, 0);
}

#[actix_web::test]
async fn ambiguity_survives_a_retry_and_an_operator_retry_keeps_the_token_growing() {
    let (app, _id) = one_pending().await;
    let first = claim_one(&app).await;
    let dead = Settlement::Dead {
        error: ProviderText::clean("parked: HTTP 404"),
        ambiguous: true,
    };
    app.store
        .outbox()
        .settle(&[(first.clone(), dead)], std::time::Duration::from_secs(60))
        .await
        .unwrap();
    assert!(nothing_due(&app).await, "dead rows wait");
    assert!(app
        .store
        .outbox()
        .retry(first.payout.transfer_id)
        .await
        .unwrap());
    let again = claim_one(&app).await;
    assert_eq!(again.attempt, 2, "never lowered by a retry");
    assert_eq!(again.budget_used, 1, "a retry starts a new budget");
    assert!(
        again.ambiguous,
        "a retried ambiguous row is looked up first"
    );
    // A plain retry never clears ambiguity.
    let retry = Settlement::Retry {
        delay: Duration::ZERO,
        error: ProviderText::clean("HTTP 503"),
        ambiguous: false,
    };
    app.store
        .outbox()
        .settle(&[(again, retry)], std::time::Duration::from_secs(60))
        .await
        .unwrap();
    assert!(claim_one(&app).await.ambiguous);
}

#[actix_web::test]
async fn rows_given_back_by_a_drain_are_not_ambiguous_nor_charged() {
    let (app, _id) = one_pending().await;
    let first = claim_one(&app).await;
    let n = app
        .store
        .outbox()
        .release(&[(first.payout.transfer_id, first.attempt)])
        .await
        .unwrap();
    assert_eq!(n, 1);
    let again = claim_one(&app).await;
    assert_eq!(again.attempt, 2);
    assert_eq!(again.budget_used, 1, "the uncalled claim is not charged");
    assert!(!again.ambiguous, "no call went out for it");
    // A give-back under an outdated claim writes nothing.
    let stale = app
        .store
        .outbox()
        .release(&[(first.payout.transfer_id, first.attempt)])
        .await
        .unwrap();
    assert_eq!(stale, 0);
}
