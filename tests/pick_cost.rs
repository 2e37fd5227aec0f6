//! What a fair claim costs when one client has a huge due backlog: the
//! relay's per-client pick, the lag gate's per-client measure and the
//! webhook deliveries' per-endpoint pick read what they hand out (or
//! count), never the whole backlog. Measured with
//! `EXPLAIN (ANALYZE, BUFFERS)` on a real Postgres holding a million due
//! outbox rows of one client (`PAYRAIL_PICK_ROWS` sets how many; the plans
//! are printed for docs/BENCHMARKS.md with `-- --nocapture`).

mod common;

use common::spawn_app;
use payrail::store::outbox::OUTBOX;
use payrail::store::webhooks::DELIVERIES;
use serde_json::Value;
use uuid::Uuid;

/// The relay's share per client (its default `--relay-concurrency`).
const SHARE: i64 = 128;

fn rows() -> i64 {
    std::env::var("PAYRAIL_PICK_ROWS")
        .ok()
        .map(|v| v.parse().expect("PAYRAIL_PICK_ROWS is a number"))
        .unwrap_or(1_000_000)
}

/// Buffers (shared hit + read) the statement touched, and its plan as
/// text for the record.
async fn explain(
    db: &tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> (i64, f64, String) {
    let json: Value = db
        .query_one(
            &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}"),
            params,
        )
        .await
        .unwrap()
        .get(0);
    let top = &json[0];
    let plan = &top["Plan"];
    let buffers =
        plan["Shared Hit Blocks"].as_i64().unwrap() + plan["Shared Read Blocks"].as_i64().unwrap();
    let ms = top["Execution Time"].as_f64().unwrap();
    let text: Vec<String> = db
        .query(&format!("EXPLAIN (ANALYZE, BUFFERS) {sql}"), params)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    (buffers, ms, text.join("\n"))
}

#[actix_web::test]
async fn the_relays_pick_and_lag_measure_read_what_they_hand_out_not_what_waits() {
    let app = spawn_app().await;
    app.stop().await;
    let db = app.db().await;
    // As the engine's connections run (`store::Store::connect`).
    db.batch_execute("SET jit = off").await.unwrap();
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let n = rows();
    // A: n due rows waiting, and SHARE more held by a relay. B: 5 due rows,
    // younger than all of A's.
    db.execute(
        "INSERT INTO outbox (transfer_id, client_id, available_at)
         SELECT gen_random_uuid(), $1, now() - interval '1 hour' + i * interval '1 ms'
         FROM generate_series(1, $2::int8) i",
        &[&a, &n],
    )
    .await
    .unwrap();
    db.execute(
        "INSERT INTO outbox (transfer_id, client_id, attempts, available_at, locked_until)
         SELECT gen_random_uuid(), $1, 1, now() - interval '2 hours', now() + interval '1 hour'
         FROM generate_series(1, $2::int8)",
        &[&a, &SHARE],
    )
    .await
    .unwrap();
    db.execute(
        "INSERT INTO outbox (transfer_id, client_id) SELECT gen_random_uuid(), $1 FROM generate_series(1, 5)",
        &[&b],
    )
    .await
    .unwrap();
    db.batch_execute("VACUUM ANALYZE outbox").await.unwrap();
    let table_blocks: i64 = db
        .query_one(
            "SELECT (pg_relation_size('outbox') + pg_relation_size('outbox_client_due')) / 8192",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    eprintln!(
        "outbox: {n} due rows of A, {SHARE} held, 5 of B; table and index {table_blocks} blocks"
    );

    let pick = OUTBOX.group_pick_sql();
    let limit = 64_i64;
    let (no_groups, no_counts): (Vec<Uuid>, Vec<i64>) = (vec![], vec![]);

    // A holds its share in this relay: the pick hands out B's five and
    // reads none of A's rows.
    let (held_groups, held_counts) = (vec![a], vec![SHARE]);
    let picked = db
        .query(&pick, &[&limit, &SHARE, &held_groups, &held_counts])
        .await
        .unwrap();
    assert_eq!(picked.len(), 5, "B's rows, none of A's");
    let (buffers, ms, plan) =
        explain(&db, &pick, &[&limit, &SHARE, &held_groups, &held_counts]).await;
    eprintln!("== pick, A holding its share: {buffers} buffers, {ms:.3} ms\n{plan}");
    assert!(
        buffers < 100,
        "the pick read {buffers} buffers: A's backlog, not what it handed out"
    );

    // A holds nothing: the pick hands out 64 rows, B's five among them (the
    // first row of every client before the second of any), reading about
    // what it hands out plus A's held rows it skips.
    let picked: Vec<String> = db
        .query(&pick, &[&limit, &SHARE, &no_groups, &no_counts])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(picked.len() as i64, limit);
    let of_b: i64 = db
        .query_one(
            "SELECT count(*) FROM outbox WHERE ctid = ANY ($1::text[]::tid[]) AND client_id = $2",
            &[&picked, &b],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(of_b, 5, "B's rows come first in turn, though A's are older");
    let (buffers, ms, plan) = explain(&db, &pick, &[&limit, &SHARE, &no_groups, &no_counts]).await;
    eprintln!("== pick, A holding nothing: {buffers} buffers, {ms:.3} ms\n{plan}");
    assert!(buffers < 500, "the pick read {buffers} buffers");

    // The lag gate's measure counts each client's waiting rows up to the
    // backlog bound (10 000 by default), however many wait.
    let measure = payrail::store::outbox::waiting_by_client_sql();
    let (buffers, ms, plan) = explain(&db, measure, &[&10_001_i64]).await;
    eprintln!("== lag measure, bound 10 000: {buffers} buffers, {ms:.3} ms\n{plan}");
    assert!(
        buffers < table_blocks / 4,
        "the measure read {buffers} of {table_blocks} blocks: the whole backlog"
    );
}

#[actix_web::test]
async fn the_delivery_pick_reads_what_it_hands_out_not_a_hanging_receivers_backlog() {
    let app = spawn_app().await;
    app.stop().await;
    let db = app.db().await;
    db.batch_execute("SET jit = off").await.unwrap();
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let (a_endpoint, b_endpoint) = (Uuid::now_v7(), Uuid::now_v7());
    let n = rows();
    // A's receiver hangs: it holds its endpoint share (16) in flight, and n
    // deliveries wait behind them, older than B's five.
    db.execute(
        "INSERT INTO webhook_deliveries (event_id, endpoint_id, client_id, next_attempt_at)
         SELECT gen_random_uuid(), $1, $2, now() - interval '1 hour' + i * interval '1 ms'
         FROM generate_series(1, $3::int8) i",
        &[&a_endpoint, &a, &n],
    )
    .await
    .unwrap();
    db.execute(
        "INSERT INTO webhook_deliveries (event_id, endpoint_id, client_id, attempts, next_attempt_at, locked_until)
         SELECT gen_random_uuid(), $1, $2, 1, now() - interval '2 hours', now() + interval '1 hour'
         FROM generate_series(1, 16)",
        &[&a_endpoint, &a],
    )
    .await
    .unwrap();
    db.execute(
        "INSERT INTO webhook_deliveries (event_id, endpoint_id, client_id)
         SELECT gen_random_uuid(), $1, $2 FROM generate_series(1, 5)",
        &[&b_endpoint, &b],
    )
    .await
    .unwrap();
    db.batch_execute("VACUUM ANALYZE webhook_deliveries")
        .await
        .unwrap();
    let pick = DELIVERIES.pick_sql();
    let (limit, endpoint_share, client_share) = (64_i64, 16_i64, 32_i64);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
        [&limit, &endpoint_share, &client_share];
    let picked = db.query(&pick, &params).await.unwrap();
    assert_eq!(picked.len(), 5, "B's deliveries, none of A's full endpoint");
    let (buffers, ms, plan) = explain(&db, &pick, &params).await;
    eprintln!(
        "== delivery pick, {n} due behind a full endpoint: {buffers} buffers, {ms:.3} ms\n{plan}"
    );
    assert!(
        buffers < 100,
        "the pick read {buffers} buffers: A's backlog"
    );
}
