//! The operator console over real HTTP: its trust domain (operator tokens
//! only, sessions in HttpOnly SameSite=Strict cookies, CSRF on every
//! state-changing request, a CSP without inline script) and its repairs,
//! each audited in the action's transaction. The browser tests
//! (`scripts/console-browser`) drive the same pages in Chromium.

mod common;

use common::*;
use reqwest::{header, redirect, StatusCode};
use serde_json::Value;

/// A browser-like client: keeps cookies, does not follow redirects (so a
/// test sees where it is sent).
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .cookie_store(true)
        .redirect(redirect::Policy::none())
        .build()
        .unwrap()
}

async fn operator_token(app: &TestApp, name: &str) -> String {
    let (_, token) = app.store.console().create_operator(name).await.unwrap();
    token.expose_secret().to_owned()
}

/// The value of `<input ... name="NAME" value="...">` in a page.
fn hidden(page: &str, name: &str) -> Option<String> {
    let at = page.find(&format!("name=\"{name}\" value=\""))?;
    let rest = &page[at + name.len() + 15..];
    Some(rest[..rest.find('"')?].to_owned())
}

/// Signs `b` in with `token`; the sign-in answer.
async fn sign_in(app: &TestApp, b: &reqwest::Client, token: &str) -> reqwest::Response {
    let page = b
        .get(format!("{}/console/sign-in", app.address))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = hidden(&page, "csrf").expect("the sign-in form carries a CSRF token");
    b.post(format!("{}/console/sign-in", app.address))
        .form(&[("token", token), ("csrf", &csrf)])
        .send()
        .await
        .unwrap()
}

async fn page(app: &TestApp, b: &reqwest::Client, path: &str) -> (StatusCode, String) {
    let res = b
        .get(format!("{}{path}", app.address))
        .send()
        .await
        .unwrap();
    (res.status(), res.text().await.unwrap())
}

fn location(res: &reqwest::Response) -> &str {
    res.headers()[header::LOCATION].to_str().unwrap()
}

#[actix_web::test]
async fn the_console_is_off_unless_asked_for() {
    let app = spawn_app().await;
    let res = browser()
        .get(format!("{}/console/sign-in", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}

#[actix_web::test]
async fn only_an_operator_token_opens_the_console_and_it_creates_no_transfer() {
    let app = spawn_app_with(&fresh_database().await, &["--console"]).await;
    let token = operator_token(&app, "ada").await;

    // Not signed in, with or without a client's API key: sent to sign in.
    let b = browser();
    let res = b
        .get(format!("{}/console/transfers", app.address))
        .bearer_auth(&app.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&res), "/console/sign-in");

    // A client's API key and an unknown token are refused at sign-in.
    for wrong in [app.api_key.as_str(), "pro_0000", ""] {
        let res = sign_in(&app, &b, wrong).await;
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "{wrong:?}");
        assert!(res.headers().get(header::SET_COOKIE).is_some());
        let (status, _) = page(&app, &b, "/console/transfers").await;
        assert_eq!(status, StatusCode::SEE_OTHER);
    }

    // A sign-in POST without the form's CSRF token is refused.
    let res = b
        .post(format!("{}/console/sign-in", app.address))
        .form(&[("token", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);

    let res = sign_in(&app, &b, &token).await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let cookie = res
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with("payrail_console="))
        .expect("a session cookie");
    for attribute in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=28800",
    ] {
        assert!(cookie.contains(attribute), "{attribute} in {cookie}");
    }
    // On loopback a browser has no TLS to send a Secure cookie over.
    assert!(!cookie.contains("Secure"), "{cookie}");

    let res = b
        .get(format!("{}/console/transfers", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let csp = res.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    let html = res.text().await.unwrap();
    assert!(html.contains("ada"), "the operator's name is shown");
    assert!(
        !html.contains("<script>") && !html.contains(" onclick="),
        "no inline script"
    );

    // The operator token is no API key.
    let res = app
        .post_transfer_as(&token, &new_key(), &transfer_body())
        .await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(app.count("transfers").await, 0);

    // Revoking the token ends the session at once.
    assert!(app
        .store
        .console()
        .revoke_operator(&payrail::domain::ConsoleSecret::from_presented(&token).hash())
        .await
        .unwrap());
    let (status, _) = page(&app, &b, "/console/transfers").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
}

#[actix_web::test]
async fn a_transfer_is_found_by_key_and_its_timeline_tells_its_story() {
    let sim = spawn_sim(payrail::sim::SimArgs::default()).await;
    let app = spawn_relaying(&fresh_database().await, &sim.url(), &["--console"]).await;
    let key = new_key();
    let res = app.post_transfer(&key, &transfer_body()).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let id = res.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.wait_final(&id).await;

    let b = browser();
    sign_in(&app, &b, &operator_token(&app, "ada").await).await;
    let (status, list) = page(&app, &b, &format!("/console/transfers?key={key}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(list.contains(&id), "found by idempotency key");
    let (_, list) = page(&app, &b, "/console/transfers?status=failed").await;
    assert!(!list.contains(&id), "a filter that does not match");
    let (_, list) = page(&app, &b, "/console/transfers?status=succeeded").await;
    assert!(list.contains(&id));

    let (status, timeline) = page(&app, &b, &format!("/console/transfers/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    for expected in ["Provider attempts", "succeeded", "transfer.succeeded", &key] {
        assert!(timeline.contains(expected), "{expected} in the timeline");
    }
    // Its one status change's event was found, without an index.
    assert!(!timeline.contains("were not found"), "{timeline}");
    // The one call answered at once: the relay wrote no attempt row, and
    // the timeline tells it from the status change it made.
    let recorded: i64 = app
        .db()
        .await
        .query_one(
            "SELECT count(*) FROM provider_attempts WHERE transfer_id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(recorded, 0);
    let reference = app.transfer(&id).await["provider_reference"]
        .as_str()
        .unwrap()
        .to_owned();
    let attempts = &timeline[timeline.find("Provider attempts").unwrap()..];
    let attempts = &attempts[..attempts.find("</section>").unwrap()];
    assert!(
        attempts.contains("<td>1</td><td>succeeded</td>") && attempts.contains(&reference),
        "{attempts}"
    );

    let (status, _) = page(&app, &b, "/console/transfers?from=yesterday").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = page(&app, &b, &format!("/console/transfers/{}", new_key())).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[actix_web::test]
async fn a_retry_needs_the_csrf_token_and_is_audited_with_what_it_did() {
    // Nothing listens at the provider's address: every call is refused
    // before it could execute, and one attempt dead-letters a row.
    let provider = format!("http://127.0.0.1:{}", free_port());
    let app = spawn_relaying(
        &fresh_database().await,
        &provider,
        &["--console", "--relay-attempts-max", "1"],
    )
    .await;
    let ids = app.create_transfers(3, &transfer_body()).await;
    let db = app.db().await;
    wait_for(
        "3 dead rows",
        std::time::Duration::from_secs(20),
        || async {
            db.query_one("SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL", &[])
                .await
                .unwrap()
                .get::<_, i64>(0)
                == 3
        },
    )
    .await;

    let b = browser();
    sign_in(&app, &b, &operator_token(&app, "grace").await).await;
    let (_, dead) = page(&app, &b, "/console/outbox").await;
    assert!(dead.contains("3 dead rows match"), "{dead}");
    let csrf = hidden(&dead, "csrf").unwrap();

    // Without the CSRF token, or with another, nothing happens.
    for form in [
        vec![("transfer_id", ids[0].as_str())],
        vec![("transfer_id", ids[0].as_str()), ("csrf", "forged")],
    ] {
        let res = b
            .post(format!("{}/console/outbox/retry", app.address))
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::FORBIDDEN);
    }
    assert_eq!(app.count("operator_audit").await, 0);

    // The confirmation states how many rows a bulk retry touches.
    let (_, confirm) = page(&app, &b, "/console/outbox/retry").await;
    assert!(confirm.contains("confirm-count\">3<"), "{confirm}");

    let res = b
        .post(format!("{}/console/outbox/retry", app.address))
        .form(&[("transfer_id", ids[0].as_str()), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let res = b
        .post(format!("{}/console/outbox/retry", app.address))
        .form(&[("all", "1"), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert!(location(&res).starts_with("/console/outbox?retried="));

    let audit = db
        .query(
            "SELECT operator_name, action, target, rows_touched FROM operator_audit ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(audit[0].get::<_, String>(0), "grace");
    assert_eq!(audit[0].get::<_, String>(1), "outbox.retry");
    assert_eq!(audit[0].get::<_, String>(2), ids[0]);
    assert_eq!(audit[0].get::<_, i64>(3), 1);
    // The bulk retry retried the two still dead, unless the first had
    // already failed again (then all three), and says so once as a whole
    // and once on each transfer it retried.
    assert_eq!(audit[1].get::<_, String>(1), "outbox.retry-bulk");
    assert_eq!(audit[1].get::<_, String>(2), "all dead rows");
    let second: i64 = audit[1].get(3);
    assert!((2..=3).contains(&second), "{second}");
    let each: Vec<(String, String, i64)> = audit[2..]
        .iter()
        .map(|r| (r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(each.len() as i64, second, "{each:?}");
    assert!(
        each.iter()
            .all(|(action, target, rows)| action == "outbox.retry"
                && ids.contains(target)
                && *rows == 1),
        "{each:?}"
    );
    let retried = &each.last().unwrap().1;
    let (_, timeline) = page(&app, &b, &format!("/console/transfers/{retried}")).await;
    assert!(
        timeline.contains("outbox.retry"),
        "the transfer's timeline shows the bulk retry"
    );
    let (_, log) = page(&app, &b, "/console/audit").await;
    assert!(log.contains("outbox.retry") && log.contains("grace"));

    // Sign-out needs the token too, and ends the session.
    let res = b
        .post(format!("{}/console/sign-out", app.address))
        .form(&[("csrf", "forged")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let res = b
        .post(format!("{}/console/sign-out", app.address))
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let (status, _) = page(&app, &b, "/console/audit").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
}

#[actix_web::test]
async fn pages_keep_to_their_scan_bound_and_say_so() {
    let app = spawn_app_with(
        &fresh_database().await,
        &[
            "--console",
            "--console-page-rows-max",
            "2",
            "--console-scan-rows-max",
            "3",
        ],
    )
    .await;
    let ids = app.create_transfers(5, &transfer_body()).await;
    let b = browser();
    sign_in(&app, &b, &operator_token(&app, "ada").await).await;
    // Newest first, two per page, with a link to the older ones.
    let (_, first) = page(&app, &b, "/console/transfers").await;
    let mut newest: Vec<&String> = ids.iter().collect();
    newest.sort();
    newest.reverse();
    assert!(first.contains(newest[0].as_str()) && first.contains(newest[1].as_str()));
    assert!(!first.contains(newest[2].as_str()));
    assert!(first.contains("rel=\"next\""));
    // No transfer is failed: the page reads 3 transfers, says it stopped,
    // and offers to go on from the last one read.
    let (_, none) = page(&app, &b, "/console/transfers?status=failed").await;
    assert!(none.contains("Stopped after reading 3 transfers"), "{none}");
    assert!(none.contains(&format!("before={}", newest[2])), "{none}");

    // One client's transfers through its index, and the next page from
    // the cursor; another client's filter matches none of them.
    let (_, mine) = page(
        &app,
        &b,
        &format!("/console/transfers?client={}", app.client_id),
    )
    .await;
    assert!(mine.contains(newest[0].as_str()) && mine.contains(newest[1].as_str()));
    let next = format!(
        "/console/transfers?client={}&before={}",
        app.client_id, newest[1]
    );
    let (_, older) = page(&app, &b, &next).await;
    assert!(older.contains(newest[2].as_str()) && older.contains(newest[3].as_str()));
    assert!(!older.contains(newest[1].as_str()));
    let (_, theirs) = page(
        &app,
        &b,
        &format!("/console/transfers?client={}", new_key()),
    )
    .await;
    assert!(theirs.contains("No transfer matches"));
    // A time range that ends before them all.
    let (_, early) = page(&app, &b, "/console/transfers?to=2020-01-01").await;
    assert!(early.contains("No transfer matches"));
}

#[actix_web::test]
async fn live_figures_come_as_json_to_a_signed_in_operator_only() {
    let app = spawn_app_with(&fresh_database().await, &["--console"]).await;
    app.create_transfers(4, &transfer_body()).await;
    let b = browser();
    let (status, _) = page(&app, &b, "/console/live.json").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    sign_in(&app, &b, &operator_token(&app, "ada").await).await;
    let live: Value = b
        .get(format!("{}/console/live.json", app.address))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(live["creates_per_second"].as_f64().unwrap() > 0.0, "{live}");
    assert_eq!(live["outbox_dead"], 0);
}

#[actix_web::test]
async fn reviving_a_disabled_endpoint_is_audited_as_enabling_it_and_as_its_redelivery() {
    let app = spawn_app_with(&fresh_database().await, &["--console"]).await;
    let db = app.db().await;
    let endpoint = uuid::Uuid::now_v7();
    db.execute(
        "INSERT INTO webhook_endpoints (id, client_id, url, secret, disabled_at) \
         VALUES ($1, $2, 'http://127.0.0.1:9/', 's', now())",
        &[&endpoint, &app.client_id],
    )
    .await
    .unwrap();
    let b = browser();
    sign_in(&app, &b, &operator_token(&app, "lin").await).await;
    let (_, endpoints) = page(&app, &b, "/console/endpoints").await;
    let csrf = hidden(&endpoints, "csrf").expect("a form on the page");
    let revive = |csrf: String| {
        let b = b.clone();
        let url = format!("{}/console/endpoints/{endpoint}/revive", app.address);
        async move { b.post(url).form(&[("csrf", csrf)]).send().await.unwrap() }
    };
    assert_eq!(revive(csrf.clone()).await.status(), StatusCode::SEE_OTHER);
    // Again, now that it is enabled: only the redelivery.
    assert_eq!(revive(csrf).await.status(), StatusCode::SEE_OTHER);
    let actions: Vec<(String, String)> = db
        .query("SELECT action, target FROM operator_audit ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let target = endpoint.to_string();
    assert_eq!(
        actions,
        [
            ("endpoint.enable".to_owned(), target.clone()),
            ("endpoint.redeliver-dead".to_owned(), target.clone()),
            ("endpoint.redeliver-dead".to_owned(), target),
        ]
    );
    let enabled: bool = db
        .query_one(
            "SELECT disabled_at IS NULL FROM webhook_endpoints WHERE id = $1",
            &[&endpoint],
        )
        .await
        .unwrap()
        .get(0);
    assert!(enabled);
}
