//! The leased queue's rules against a real Postgres: a row taken over after
//! its lease is ambiguous, a holder whose lease ran out is fenced out of
//! every write (a final outcome included), and rows given back by a drain
//! are neither ambiguous nor charged to the retry budget.

mod common;

use std::time::Duration;

use common::{spawn_app, transfer_body, TestApp};
use payrail::domain::{ProviderReport, ProviderText, TransferStatus};
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
    Settlement::Report(match status {
        TransferStatus::Succeeded => ProviderReport::Succeeded {
            reference: Some(ProviderText::clean("ref")),
        },
        TransferStatus::Failed => ProviderReport::Declined {
            reason: ProviderText::clean("HTTP 403"),
        },
        other => panic!("not a final answer: {other:?}"),
    })
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

/// Moves a transfer to `status` as another source would have (a
/// notification), with the poll a `processing` transfer gets.
async fn moved_elsewhere(app: &TestApp, id: &str, status: &str) {
    let id: uuid::Uuid = id.parse().unwrap();
    let db = app.db().await;
    db.execute(
        "UPDATE transfers SET status = $2, status_sequence = status_sequence + 1 WHERE id = $1",
        &[&id, &status],
    )
    .await
    .unwrap();
    if status == "processing" {
        db.execute(
            "INSERT INTO provider_polls (transfer_id, next_poll_at) VALUES ($1, now() + interval '1 hour')",
            &[&id],
        )
        .await
        .unwrap();
    }
}

#[actix_web::test]
async fn the_relays_final_answer_goes_through_the_status_machine() {
    // A notification made the transfer `processing` while the relay's call
    // was in flight: the relay's `succeeded` is the next allowed change, and
    // it ends the transfer's polls and writes its event.
    let (app, id) = one_pending().await;
    let row = claim_one(&app).await;
    moved_elsewhere(&app, &id, "processing").await;
    let report = app
        .store
        .outbox()
        .settle(&[(row, final_as(TransferStatus::Succeeded))], LEASE)
        .await
        .unwrap();
    assert_eq!(report.held, [true]);
    assert_eq!(report.changed.len(), 1);
    assert_eq!(status(&app, &id).await, "succeeded");
    assert_eq!(app.count("outbox").await, 0);
    assert_eq!(
        app.count("provider_polls").await,
        0,
        "a final transfer is not polled"
    );
    assert_eq!(
        app.count("webhook_events").await,
        1,
        "the change is announced"
    );
}

#[actix_web::test]
async fn a_relay_answer_that_contradicts_a_final_status_is_kept_as_an_anomaly() {
    // A declined notification came first; the provider's answer to the
    // relay's call then says `succeeded`: an operator must look.
    let (app, id) = one_pending().await;
    let row = claim_one(&app).await;
    moved_elsewhere(&app, &id, "failed").await;
    let report = app
        .store
        .outbox()
        .settle(&[(row, final_as(TransferStatus::Succeeded))], LEASE)
        .await
        .unwrap();
    assert_eq!(report.held, [true], "the row was still held: it is done");
    assert!(report.changed.is_empty());
    assert_eq!(status(&app, &id).await, "failed");
    assert_eq!(app.count("outbox").await, 0);
    let anomaly = app
        .db()
        .await
        .query_one(
            "SELECT status_then, reported, source FROM transfer_anomalies",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            anomaly.get::<_, String>(0),
            anomaly.get::<_, String>(1),
            anomaly.get::<_, String>(2)
        ),
        ("failed".into(), "succeeded".into(), "relay".into())
    );
}

#[actix_web::test]
async fn the_status_trigger_allows_exactly_the_changes_of_may_become() {
    // The migration's trigger and `TransferStatus::may_become` each state
    // the allowed changes; every statement of the status machine is
    // generated from the second. Each pair is tried on a real row.
    let (app, id) = one_pending().await;
    let id: uuid::Uuid = id.parse().unwrap();
    let mut db = app.db().await;
    for from in TransferStatus::ALL {
        for to in TransferStatus::ALL {
            if from == to {
                continue;
            }
            let tx = db.transaction().await.unwrap();
            tx.batch_execute("ALTER TABLE transfers DISABLE TRIGGER transfers_status_change")
                .await
                .unwrap();
            tx.execute(
                "UPDATE transfers SET status = $2 WHERE id = $1",
                &[&id, &from.as_str()],
            )
            .await
            .unwrap();
            tx.batch_execute("ALTER TABLE transfers ENABLE TRIGGER transfers_status_change")
                .await
                .unwrap();
            let changed = tx
                .execute(
                    "UPDATE transfers SET status = $2 WHERE id = $1",
                    &[&id, &to.as_str()],
                )
                .await;
            if let Err(e) = &changed {
                assert_eq!(
                    e.code(),
                    Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION),
                    "{e}"
                );
            }
            assert_eq!(
                changed.is_ok(),
                from.may_become(to),
                "the trigger and may_become disagree on {from:?} -> {to:?}"
            );
            tx.rollback().await.unwrap();
        }
    }
}
