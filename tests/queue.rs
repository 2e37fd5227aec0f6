//! The leased queue's rules against a real Postgres: a row taken over after
//! its lease is ambiguous, a holder whose lease ran out is fenced out of
//! every write (a final outcome included), and rows given back by a drain
//! are neither ambiguous nor charged to the retry budget.

mod common;

use std::time::Duration;

use common::{spawn_app, transfer_body, TestApp};
use payrail::domain::{ProviderReport, ProviderText, TransferStatus};
use payrail::store::notifications::Notification;
use payrail::store::outbox::{ClaimedRow, Settlement, OUTBOX};
use payrail::store::polls::POLLS;
use payrail::store::queue::QueueTable;
use payrail::store::webhooks::DELIVERIES;
use tokio_postgres::types::ToSql;

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
        .claim(10, LEASE, 10, &[])
        .await
        .unwrap()
        .is_empty()
}

async fn claim_one(app: &TestApp) -> ClaimedRow {
    let mut rows = app.store.outbox().claim(10, LEASE, 10, &[]).await.unwrap();
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
            payrail::store::status::FollowUp::polls_only(std::time::Duration::from_secs(60)),
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
            payrail::store::status::FollowUp::polls_only(std::time::Duration::from_secs(60)),
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
        .settle(
            &[(first.clone(), dead)],
            payrail::store::status::FollowUp::polls_only(std::time::Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert!(nothing_due(&app).await, "dead rows wait");
    assert!(app
        .store
        .outbox()
        .retry(first.payout.transfer_id, "cli:test")
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
        .settle(
            &[(again, retry)],
            payrail::store::status::FollowUp::polls_only(std::time::Duration::from_secs(60)),
        )
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

/// A pending transfer whose outbox row the relay holds, moved to `status`
/// by another source, then settled with the provider's `succeeded`.
async fn relay_succeeds_after(
    status: &str,
) -> (TestApp, String, payrail::store::outbox::SettleReport) {
    let (app, id) = one_pending().await;
    let row = claim_one(&app).await;
    moved_elsewhere(&app, &id, status).await;
    let report = app
        .store
        .outbox()
        .settle(
            &[(row, final_as(TransferStatus::Succeeded))],
            payrail::store::status::FollowUp::polls_only(LEASE),
        )
        .await
        .unwrap();
    (app, id, report)
}

#[actix_web::test]
async fn the_relays_final_answer_goes_through_the_status_machine() {
    // A notification made the transfer `processing` while the relay's call
    // was in flight: the relay's `succeeded` is the next allowed change, and
    // it ends the transfer's polls and writes its event.
    let (app, id, report) = relay_succeeds_after("processing").await;
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
    let (app, id, report) = relay_succeeds_after("failed").await;
    assert_eq!(report.held, [true], "the row was still held: it is done");
    assert!(report.changed.is_empty());
    assert_eq!(report.anomalies, 1);
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

// The queue's rules, on each of its tables, with the statements built from
// each table's description: the same claims, fencing, give-backs, dead
// letters, requeues and completions everywhere.

/// Claims what is due of `q` for 30 s, fairly when it is a fair queue.
async fn claim_of(db: &tokio_postgres::Client, q: &QueueTable) -> Vec<tokio_postgres::Row> {
    let (limit, lease) = (10_i64, 30.0_f64);
    let shares = vec![10_i64; q.fair_by.len()];
    let shares_of_group = 10_i64;
    let (groups, counts): (Vec<uuid::Uuid>, Vec<i64>) = (Vec::new(), Vec::new());
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&limit];
    let pick = match (q.group_by, q.fair_by.is_empty()) {
        (Some(_), true) => {
            params.extend([&shares_of_group as &(dyn ToSql + Sync), &groups, &counts]);
            q.group_pick_sql()
        }
        (None, _) => {
            return db.query(&q.claim_sql(), &[&limit, &lease]).await.unwrap();
        }
        (Some(_), false) => {
            params.extend(shares.iter().map(|s| s as &(dyn ToSql + Sync)));
            q.pick_sql()
        }
    };
    let picked: Vec<String> = db
        .query(&pick, &params)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    if picked.is_empty() {
        return Vec::new();
    }
    db.query(&q.claim_sql(), &[&limit, &lease, &picked])
        .await
        .unwrap()
}

/// A claimed row's claim number, budget used and whether it was taken over.
fn numbers(row: &tokio_postgres::Row) -> (i32, i32, bool) {
    (
        row.get("attempts"),
        row.get("budget_used"),
        row.get("reclaimed"),
    )
}

/// Runs `sql` with the row's key (one array per key column) and `more`.
async fn keyed(
    db: &tokio_postgres::Client,
    sql: &str,
    key: &[Vec<uuid::Uuid>],
    more: &[&(dyn ToSql + Sync)],
) -> u64 {
    let mut params: Vec<&(dyn ToSql + Sync)> =
        key.iter().map(|k| k as &(dyn ToSql + Sync)).collect();
    params.extend_from_slice(more);
    db.query(sql, &params).await.unwrap().len() as u64
}

/// Reschedules the row under claim `attempt`, dead or due in an hour.
async fn reschedule(
    db: &tokio_postgres::Client,
    q: &QueueTable,
    key: &[Vec<uuid::Uuid>],
    attempt: i32,
    dead: bool,
    extra: &(dyn ToSql + Sync),
) -> u64 {
    let (attempt, delay, error, dead) = (vec![attempt], vec![3600.0_f64], vec!["e"], vec![dead]);
    keyed(
        db,
        &q.reschedule_sql(),
        key,
        &[&attempt, &delay, &error, &dead, extra],
    )
    .await
}

async fn check_queue(
    db: &tokio_postgres::Client,
    q: &QueueTable,
    key: &[uuid::Uuid],
    extra: &(dyn ToSql + Sync),
) {
    let t = q.table;
    let key: Vec<Vec<uuid::Uuid>> = key.iter().map(|k| vec![*k]).collect();
    let claim = |n: i32| vec![n];

    let rows = claim_of(db, q).await;
    assert_eq!(rows.len(), 1, "{t}: the due row is claimed");
    assert_eq!(numbers(&rows[0]), (1, 1, false), "{t}");
    assert!(
        claim_of(db, q).await.is_empty(),
        "{t}: a held row is not claimed twice"
    );

    // A holder of an outdated claim writes nothing.
    assert_eq!(reschedule(db, q, &key, 0, false, extra).await, 0, "{t}");
    let release = q.release_sql() + " RETURNING 1";
    assert_eq!(keyed(db, &release, &key, &[&claim(0)]).await, 0, "{t}");

    // Given back by its holder: due at once, neither charged nor taken over.
    assert_eq!(keyed(db, &release, &key, &[&claim(1)]).await, 1, "{t}");
    let rows = claim_of(db, q).await;
    assert_eq!(
        numbers(&rows[0]),
        (2, 1, false),
        "{t}: a release is not charged"
    );

    // Its lease runs out: taken over, and said so.
    db.execute(
        &format!("UPDATE {t} SET locked_until = now() - interval '1 second'"),
        &[],
    )
    .await
    .unwrap();
    let rows = claim_of(db, q).await;
    assert_eq!(
        numbers(&rows[0]),
        (3, 2, true),
        "{t}: a takeover is reclaimed"
    );

    // Dead-lettered by its holder: not claimed again until requeued, and
    // then with a fresh budget and a growing token.
    assert_eq!(reschedule(db, q, &key, 3, true, extra).await, 1, "{t}");
    assert!(claim_of(db, q).await.is_empty(), "{t}: a dead row waits");
    let requeue = format!(
        "UPDATE {t} q SET {} WHERE dead_at IS NOT NULL",
        q.requeue_set("now()")
    );
    assert_eq!(db.execute(&requeue, &[]).await.unwrap(), 1, "{t}");
    let rows = claim_of(db, q).await;
    assert_eq!(
        numbers(&rows[0]),
        (4, 1, false),
        "{t}: a requeue starts a budget"
    );

    // Requeued by an operator while held, then given back by a draining
    // holder: the give-back still goes through, and charges nothing.
    let requeue_held = format!("UPDATE {t} q SET {}", q.requeue_set("now()"));
    assert_eq!(db.execute(&requeue_held, &[]).await.unwrap(), 1, "{t}");
    assert_eq!(
        keyed(db, &release, &key, &[&claim(4)]).await,
        1,
        "{t}: a requeued row goes back"
    );

    // Done: only under the live claim.
    assert_eq!(
        keyed(db, &q.complete_sql(), &key, &[&claim(3)]).await,
        0,
        "{t}"
    );
    assert_eq!(
        keyed(db, &q.complete_sql(), &key, &[&claim(4)]).await,
        1,
        "{t}"
    );
    assert_eq!(
        db.query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .await
            .unwrap()
            .get::<_, i64>(0),
        0,
        "{t}"
    );
}

#[actix_web::test]
async fn every_queue_claims_fences_gives_back_and_requeues_by_the_same_rules() {
    let (app, id) = one_pending().await;
    // The engine's own workers stay out of the way.
    app.stop().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let id: uuid::Uuid = id.parse().unwrap();
    let db = app.db().await;
    let client: uuid::Uuid = db
        .query_one("SELECT client_id FROM transfers WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    // A lookup of the transfer and a delivery of an event about it, due now.
    let (event, endpoint) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    db.execute(
        "INSERT INTO provider_polls (transfer_id, next_poll_at) VALUES ($1, now())",
        &[&id],
    )
    .await
    .unwrap();
    db.execute(
        "INSERT INTO webhook_endpoints (id, client_id, url, secret) VALUES ($1, $2, 'http://127.0.0.1:9/', 's')",
        &[&endpoint, &client],
    )
    .await
    .unwrap();
    db.execute(
        "INSERT INTO webhook_events (client_id, id, transfer_id, type, body, created_at) \
         VALUES ($1, $2, $3, 'transfer.succeeded', '{}', now())",
        &[&client, &event, &id],
    )
    .await
    .unwrap();
    db.execute(
        "INSERT INTO webhook_deliveries (event_id, endpoint_id, client_id) VALUES ($1, $2, $3)",
        &[&event, &endpoint, &client],
    )
    .await
    .unwrap();
    check_queue(&db, &OUTBOX, &[id], &vec![true]).await;
    check_queue(&db, &POLLS, &[id], &vec!["processing"]).await;
    check_queue(&db, &DELIVERIES, &[event, endpoint], &vec![500_i32]).await;
}

#[actix_web::test]
async fn a_transfer_processing_and_decided_in_one_batch_is_not_left_polled() {
    // A batch of notifications says `processing` and then `succeeded` for
    // one transfer: the status machine makes both changes, and the lookup
    // the first would start must not outlive the second.
    let (app, id) = one_pending().await;
    let id: uuid::Uuid = id.parse().unwrap();
    let notification = |n: &str, report| Notification {
        id: format!("n-{n}-{id}"),
        transfer_id: id,
        report,
    };
    let batch = [
        notification("1", ProviderReport::Processing { reference: None }),
        notification(
            "2",
            ProviderReport::Succeeded {
                reference: Some(ProviderText::clean("ref")),
            },
        ),
    ];
    let report = app
        .store
        .notifications()
        .apply(
            &batch,
            payrail::store::status::FollowUp::polls_only(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    assert_eq!(
        report.applied.changed.len(),
        2,
        "pending -> processing -> succeeded"
    );
    assert_eq!(status(&app, &id.to_string()).await, "succeeded");
    assert_eq!(
        app.count("provider_polls").await,
        0,
        "a decided transfer is not looked up"
    );
    assert_eq!(app.count("outbox").await, 0);
    assert_eq!(
        app.count("webhook_events").await,
        2,
        "each change is announced"
    );
}

#[actix_web::test]
async fn the_backlog_figures_count_up_to_their_bound_and_no_further() {
    // /metrics and the console's live view read these every few seconds:
    // a backlog past the bound reads as the bound ("at least").
    let app = spawn_app().await;
    app.stop().await;
    let max = payrail::store::FIGURE_ROWS_MAX;
    app.db()
        .await
        .execute(
            "INSERT INTO outbox (transfer_id, client_id, attempts, attempts_base, dead_at, last_error) \
             SELECT gen_random_uuid(), gen_random_uuid(), 1, 0, now(), 'e' FROM generate_series(1::int8, $1)",
            &[&(max + 5)],
        )
        .await
        .unwrap();
    let stats = app.store.outbox().stats().await.unwrap();
    assert_eq!(stats.dead, max);
    assert_eq!(stats.backlog, 0);
    let live = app.store.console().live().await.unwrap();
    assert_eq!((live.outbox_dead, live.outbox_backlog), (max, 0));
}
