//! reading transfers, keyset pagination.

mod common;

use common::{assert_problem, new_key, spawn_app, transfer_body};
use reqwest::StatusCode;
use serde_json::Value;

#[actix_web::test]
async fn pages_go_newest_first_without_gaps_or_repeats() {
    let app = spawn_app().await;
    let mut created = Vec::new();
    for _ in 0..25 {
        let t: Value = app
            .post_transfer(&new_key(), &transfer_body())
            .await
            .json()
            .await
            .unwrap();
        created.push(t["id"].as_str().unwrap().to_owned());
    }
    created.reverse();

    let first: Value = app.get("/transfers").await.json().await.unwrap();
    let first_ids: Vec<&str> = first["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(first_ids.len(), 20, "default limit");
    assert_eq!(first["has_more"], true);
    assert_eq!(
        first_ids,
        created[..20].iter().map(String::as_str).collect::<Vec<_>>()
    );

    let next: Value = app
        .get(&format!("/transfers?starting_after={}", first_ids[19]))
        .await
        .json()
        .await
        .unwrap();
    let next_ids: Vec<&str> = next["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        next_ids,
        created[20..].iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(next["has_more"], false);

    let small: Value = app.get("/transfers?limit=3").await.json().await.unwrap();
    assert_eq!(small["data"].as_array().unwrap().len(), 3);
    assert_eq!(small["has_more"], true);
    let all: Value = app.get("/transfers?limit=100").await.json().await.unwrap();
    assert_eq!(all["data"].as_array().unwrap().len(), 25);
    assert_eq!(all["has_more"], false);
}

#[actix_web::test]
async fn bad_page_parameters_are_validation_problems() {
    let app = spawn_app().await;
    for q in [
        "limit=0",
        "limit=101",
        "limit=abc",
        "starting_after=nope",
        "starting_after=018f0000-0000-7000-8000-000000000000",
    ] {
        let res = app.get(&format!("/transfers?{q}")).await;
        assert_problem(res, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
    }
    // Another client's transfer is no cursor of mine.
    let other = app.other_client().await;
    let t: Value = app
        .post_transfer_as(&other, &new_key(), &transfer_body())
        .await
        .json()
        .await
        .unwrap();
    let res = app
        .get(&format!(
            "/transfers?starting_after={}",
            t["id"].as_str().unwrap()
        ))
        .await;
    assert_problem(res, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
}

#[actix_web::test]
async fn a_malformed_transfer_id_is_not_found() {
    let app = spawn_app().await;
    assert_problem(
        app.get("/transfers/not-a-uuid").await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
}
