//! `POST /transfers`, its outcome table and its body rules.

mod common;

use common::{assert_problem, new_key, spawn_app, transfer_body};
use reqwest::StatusCode;
use serde_json::{json, Value};

#[actix_web::test]
async fn a_new_key_creates_a_pending_transfer() {
    let app = spawn_app().await;
    let key = new_key();
    let res = app.post_transfer(&key, &transfer_body()).await;

    assert_eq!(res.status(), StatusCode::CREATED);
    assert!(res.headers().get("idempotent-replayed").is_none());
    let location = res.headers()["location"].to_str().unwrap().to_owned();
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        location,
        format!("/transfers/{}", body["id"].as_str().unwrap())
    );
    assert_eq!(body["status"], "pending");
    assert_eq!(body["amount"], 1500);
    assert_eq!(body["currency"], "USD");
    assert_eq!(body["source_account"], "acc_alice");
    assert_eq!(body["destination_account"], "acc_bob");
    assert_eq!(body["description"], "rent");
    assert_eq!(body["metadata"], json!({"order": "A-17"}));
    assert_eq!(body["idempotency_key"], key);
    assert_eq!(body["created_at"], body["updated_at"]);
    assert!(body["provider_reference"].is_null() && body["failure_reason"].is_null());
    let id = uuid::Uuid::parse_str(body["id"].as_str().unwrap()).unwrap();
    assert_eq!(id.get_version_num(), 7);

    // One key row, one transfer row and one outbox row, all naming it.
    let db = app.db().await;
    let row = db
        .query_one(
            "SELECT k.transfer_id, t.status, o.transfer_id FROM idempotency_keys k \
             JOIN transfers t ON t.id = k.transfer_id JOIN outbox o ON o.transfer_id = t.id WHERE k.key = $1",
            &[&key],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, uuid::Uuid>(0), id);
    assert_eq!(row.get::<_, String>(1), "pending");

    // GET shows the same representation.
    let got: Value = app.get(&location).await.json().await.unwrap();
    assert_eq!(got, body);
}

#[actix_web::test]
async fn a_retry_gets_the_first_answer_byte_for_byte() {
    let app = spawn_app().await;
    let key = new_key();
    let first = app.post_transfer(&key, &transfer_body()).await;
    let first_location = first.headers()["location"].clone();
    let first_body = first.bytes().await.unwrap();

    // Field order and whitespace differ; the fingerprint does not.
    let reordered = r#"{ "metadata": {"order": "A-17"}, "description": "rent",
        "destination_account": "acc_bob", "source_account": "acc_alice", "currency": "USD", "amount": 1500 }"#;
    let retry = app
        .post_raw(Some(&key), "application/json", reordered.into())
        .await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.headers()["location"], first_location);
    assert_eq!(retry.bytes().await.unwrap(), first_body);
    assert_eq!(app.count("transfers").await, 1);
    assert_eq!(app.count("outbox").await, 1);
}

#[actix_web::test]
async fn a_committed_key_still_judges_every_body_it_is_sent_with() {
    // A retry repeating the first attempt's bytes is answered from the
    // replay cache without parsing; any other body must still be parsed,
    // validated and fingerprinted as if the key were new to this process.
    let app = spawn_app().await;
    let key = new_key();
    let first_bytes = serde_json::to_vec(&transfer_body()).unwrap();
    let first = app
        .post_raw(Some(&key), "application/json", first_bytes.clone())
        .await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let first_body = first.bytes().await.unwrap();

    let same = app
        .post_raw(Some(&key), "application/json", first_bytes.clone())
        .await;
    assert_eq!(same.status(), StatusCode::CREATED);
    assert_eq!(same.headers()["idempotent-replayed"], "true");
    assert_eq!(same.bytes().await.unwrap(), first_body);

    let malformed = [&first_bytes[..], b"}"].concat();
    let res = app
        .post_raw(Some(&key), "application/json", malformed)
        .await;
    assert_problem(res, StatusCode::BAD_REQUEST, "malformed-json").await;

    let mut invalid = transfer_body();
    invalid["amount"] = json!(0);
    let res = app.post_transfer(&key, &invalid).await;
    assert_problem(res, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;

    let mut changed = transfer_body();
    changed["amount"] = json!(1501);
    let res = app.post_transfer(&key, &changed).await;
    assert_problem(
        res,
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency-key-reused",
    )
    .await;

    let same_again = app
        .post_raw(Some(&key), "application/json", first_bytes)
        .await;
    assert_eq!(same_again.headers()["idempotent-replayed"], "true");
    assert_eq!(same_again.bytes().await.unwrap(), first_body);
    assert_eq!(app.count("transfers").await, 1);
}

#[actix_web::test]
async fn the_quoted_key_form_names_the_same_key() {
    let app = spawn_app().await;
    let key = new_key();
    let first: Value = app
        .post_transfer(&key, &transfer_body())
        .await
        .json()
        .await
        .unwrap();
    let quoted = app
        .post_transfer(&format!("\"{key}\""), &transfer_body())
        .await;
    assert_eq!(quoted.headers()["idempotent-replayed"], "true");
    let again: Value = quoted.json().await.unwrap();
    assert_eq!(again["id"], first["id"]);
}

#[actix_web::test]
async fn the_same_key_with_a_different_request_is_refused_and_changes_nothing() {
    let app = spawn_app().await;
    let key = new_key();
    let first: Value = app
        .post_transfer(&key, &transfer_body())
        .await
        .json()
        .await
        .unwrap();
    for (field, value) in [
        ("amount", json!(1501)),
        ("currency", json!("EUR")),
        ("description", json!(null)),
        ("metadata", json!({"order": "A-18"})),
    ] {
        let mut changed = transfer_body();
        changed[field] = value;
        let res = app.post_transfer(&key, &changed).await;
        assert_problem(
            res,
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency-key-reused",
        )
        .await;
    }
    assert_eq!(app.count("transfers").await, 1);
    let still: Value = app
        .get(&format!("/transfers/{}", first["id"].as_str().unwrap()))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(still["amount"], 1500);
    // And the original request still replays.
    let replay = app.post_transfer(&key, &transfer_body()).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
}

#[actix_web::test]
async fn idempotency_key_header_rules() {
    let app = spawn_app().await;
    let body = serde_json::to_vec(&transfer_body()).unwrap();
    let res = app.post_raw(None, "application/json", body.clone()).await;
    assert_problem(res, StatusCode::BAD_REQUEST, "idempotency-key-missing").await;

    let too_long = "k".repeat(256);
    for bad in ["", "has space", "\"unterminated", too_long.as_str(), "\"\""] {
        let res = app
            .post_raw(Some(bad), "application/json", body.clone())
            .await;
        assert_problem(res, StatusCode::BAD_REQUEST, "idempotency-key-invalid").await;
    }
    let longest = "k".repeat(255);
    let res = app
        .post_raw(Some(&longest), "application/json", body.clone())
        .await;
    assert_eq!(res.status(), StatusCode::CREATED);

    // Two Idempotency-Key headers: which one was meant cannot be known.
    let res = app
        .http
        .post(format!("{}/transfers", app.address))
        .bearer_auth(&app.api_key)
        .header("Idempotency-Key", "a")
        .header("Idempotency-Key", "b")
        .json(&transfer_body())
        .send()
        .await
        .unwrap();
    assert_problem(res, StatusCode::BAD_REQUEST, "idempotency-key-invalid").await;
}

#[actix_web::test]
async fn body_rules_map_to_their_problems() {
    let app = spawn_app().await;
    let body = serde_json::to_vec(&transfer_body()).unwrap();

    let res = app
        .post_raw(Some(&new_key()), "text/plain", body.clone())
        .await;
    assert_problem(
        res,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported-media-type",
    )
    .await;
    let res = app
        .post_raw(
            Some(&new_key()),
            "application/json; charset=utf-8",
            body.clone(),
        )
        .await;
    assert_eq!(res.status(), StatusCode::CREATED);

    let res = app
        .post_raw(
            Some(&new_key()),
            "application/json",
            b"{\"amount\": ".to_vec(),
        )
        .await;
    assert_problem(res, StatusCode::BAD_REQUEST, "malformed-json").await;
    let res = app
        .post_raw(Some(&new_key()), "application/json", vec![0xff, 0xfe, b'{'])
        .await;
    assert_problem(res, StatusCode::BAD_REQUEST, "malformed-json").await;

    let mut big = transfer_body();
    big["description"] = json!("x".repeat(64 * 1024));
    let res = app.post_transfer(&new_key(), &big).await;
    assert_problem(res, StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large").await;

    let res = app
        .post_raw(Some(&new_key()), "application/json", b"[1, 2]".to_vec())
        .await;
    assert_problem(res, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;

    let mut bad = transfer_body();
    bad["amount"] = json!(0);
    bad["currency"] = json!("usd");
    bad["destination_account"] = json!("acc_alice");
    bad["surprise"] = json!(1);
    let res = app.post_transfer(&new_key(), &bad).await;
    let problem = assert_problem(res, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
    let fields: Vec<&str> = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    for f in ["amount", "currency", "destination_account", "surprise"] {
        assert!(fields.contains(&f), "{f} in {fields:?}");
    }
    assert!(problem["errors"][0]["message"].is_string());
    assert_eq!(
        app.count("transfers").await,
        1,
        "only the one valid request stored"
    );
}

#[actix_web::test]
async fn a_rejected_request_stores_nothing_and_the_key_stays_usable() {
    let app = spawn_app().await;
    let key = new_key();
    let mut bad = transfer_body();
    bad["amount"] = json!(-1);
    assert_eq!(
        app.post_transfer(&key, &bad).await.status(),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let res = app
        .post_raw(Some(&key), "application/json", b"nope".to_vec())
        .await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert_eq!(app.count("idempotency_keys").await, 0);

    let res = app.post_transfer(&key, &transfer_body()).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    assert!(res.headers().get("idempotent-replayed").is_none());
}

#[actix_web::test]
async fn errors_never_leak_internals() {
    let app = spawn_app().await;
    let res = app.get("/nowhere").await;
    let body = assert_problem(res, StatusCode::NOT_FOUND, "not-found").await;
    assert!(!body.to_string().to_lowercase().contains("sql"));
    let res = app
        .http
        .delete(format!("{}/transfers", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[actix_web::test]
async fn a_key_that_starts_with_a_quote_reads_back_and_replays() {
    // `"\"q"` is the quoted form of the key `"q`; read back from Postgres it
    // must not be mistaken for a header value again.
    let app = spawn_app().await;
    let res = app.post_transfer("\"\\\"q\"", &transfer_body()).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let created: Value = res.json().await.unwrap();
    assert_eq!(created["idempotency_key"], "\"q");
    let id = created["id"].as_str().unwrap();
    let read: Value = app
        .get(&format!("/transfers/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(read["idempotency_key"], "\"q");
    let listed: Value = app.get("/transfers").await.json().await.unwrap();
    assert_eq!(listed["data"][0]["id"], id);
}

#[actix_web::test]
async fn a_nul_character_is_a_validation_problem_and_fails_no_one_else() {
    let app = spawn_app().await;
    let mut nul = transfer_body();
    nul["description"] = json!("a\u{0}b");
    let mut nul_meta = transfer_body();
    nul_meta["metadata"] = json!({"k\u{0}": "v", "k": "\u{0}"});
    // Sent together so that they would share a flush with valid requests.
    let valid = (0..20).map(|_| app.post_transfer_owned(new_key(), transfer_body()));
    let (k1, k2) = (new_key(), new_key());
    let (bad, bad_meta, others) = futures::join!(
        app.post_transfer(&k1, &nul),
        app.post_transfer(&k2, &nul_meta),
        futures::future::join_all(valid),
    );
    let problem = assert_problem(bad, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
    assert_eq!(problem["errors"][0]["field"], "description");
    let problem = assert_problem(
        bad_meta,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation-failed",
    )
    .await;
    assert_eq!(problem["errors"].as_array().unwrap().len(), 2);
    assert!(others.iter().all(|s| *s == StatusCode::CREATED));
    assert_eq!(app.count("transfers").await, 20);
}
