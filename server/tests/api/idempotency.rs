//! CONTRACT section 3, "Idempotency", clause by clause. One file because it
//! reads as that section does, one test per clause, in its order.

use crate::helpers::{assert_problem, assert_problem_to, assert_ran, new_key, new_token, TestApp};
use reqwest::header::CONTENT_TYPE;
use serde_json::json;
use std::time::Duration;

/// The first answer is the operation's own: 201, no replay header.
#[tokio::test]
async fn a_new_key_runs_the_charge_and_answers_201_without_the_replay_header() {
    let app = TestApp::spawn().await;
    let response = app
        .post(
            "/charges",
            &new_key(),
            &json!({"amount": 1999, "currency": "usd", "description": "cart 42"}),
        )
        .await;
    assert_eq!(response.status(), 201);
    assert!(response.headers().get("idempotent-replayed").is_none());
    let charge: serde_json::Value = response.json().await.unwrap();
    assert!(charge["id"].as_str().unwrap().starts_with("ch_"));
    assert_eq!(charge["amount"], 1999);
    assert_eq!(charge["currency"], "usd");
    assert_eq!(charge["description"], "cart 42");
    assert_eq!(charge["status"], "succeeded");
    assert!(charge["created"].as_i64().unwrap() > 1_700_000_000);
    assert_eq!(app.charges().await, vec![charge]);
}

/// A retry gets the stored answer again, byte for byte, marked replayed.
#[tokio::test]
async fn a_retry_replays_the_stored_response_byte_for_byte() {
    let app = TestApp::spawn().await;
    let key = new_key();
    let first = app.charge(&key, 500).await;
    let first_status = first.status();
    let first_type = first.headers()["content-type"].clone();
    let first_body = first.bytes().await.unwrap();
    for _ in 0..3 {
        let again = app.charge(&key, 500).await;
        assert_eq!(again.status(), first_status);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.headers()["content-type"], first_type);
        assert_eq!(again.bytes().await.unwrap(), first_body);
    }
    assert_eq!(app.charges().await.len(), 1);
}

/// `Idempotency-Key: abc` and `Idempotency-Key: "abc"` are one key.
#[tokio::test]
async fn quoted_and_bare_keys_are_the_same_key() {
    let app = TestApp::spawn().await;
    let key = new_key();
    assert_eq!(app.charge(&key, 700).await.status(), 201);
    let quoted = app.charge(&format!("\"{key}\""), 700).await;
    assert_eq!(quoted.headers()["idempotent-replayed"], "true");
    assert_eq!(app.charges().await.len(), 1);
}

/// Any visible ASCII may be sent bare (CONTRACT section 3), a key that
/// starts with `"` included: only one whole structured-field string is read
/// as the quoted form. `"unterminated`, `"a"x` and `""doubly""` are keys of
/// their own, each replayed to itself (an earlier release refused them 400).
#[tokio::test]
async fn a_bare_key_that_starts_with_a_quote_is_a_key() {
    let app = TestApp::spawn().await;
    for (i, key) in ["\"unterminated", "\"a\"x", "\"\"doubly\"\"", "\"a\\nb\""]
        .into_iter()
        .enumerate()
    {
        let amount = 100 + i as i64;
        let first = app.charge(key, amount).await;
        assert_eq!(first.status(), 201, "{key}");
        let first: serde_json::Value = first.json().await.unwrap();
        let again = app.charge(key, amount).await;
        assert_eq!(again.headers()["idempotent-replayed"], "true", "{key}");
        assert_eq!(again.json::<serde_json::Value>().await.unwrap(), first);
    }
    assert_eq!(app.charges().await.len(), 4, "four keys, four charges");
}

/// `1999`, `1999.0` and `1.999e3` are one amount (docs/API.md, "Decisions where the contract is silent"), so
/// one request: the same key replays, it is not a 422.
#[tokio::test]
async fn a_number_spelled_with_a_zero_fraction_is_the_same_request() {
    let app = TestApp::spawn().await;
    let key = new_key();
    let first = app
        .charge_raw(&key, r#"{"amount": 1999, "currency": "usd"}"#)
        .await;
    assert_eq!(first.status(), 201);
    for same in [
        r#"{"amount": 1999.0, "currency": "usd"}"#,
        r#"{"currency": "usd", "amount": 1.999e3}"#,
    ] {
        let again = app.charge_raw(&key, same).await;
        assert_eq!(again.status(), 201, "{same}");
        assert_eq!(again.headers()["idempotent-replayed"], "true", "{same}");
    }
    let other = app
        .charge_raw(&key, r#"{"amount": 2000, "currency": "usd"}"#)
        .await;
    assert_eq!(other.status(), 422);
    assert_eq!(app.charges().await.len(), 1);
}

/// The fingerprint reads the body as JSON: spacing and key order do not
/// make another request.
#[tokio::test]
async fn the_same_json_with_other_spacing_and_key_order_is_the_same_request() {
    let app = TestApp::spawn().await;
    let key = new_key();
    let a = app
        .charge_raw(&key, r#"{"amount":1999,"currency":"usd"}"#)
        .await;
    assert_eq!(a.status(), 201);
    let b = app
        .charge_raw(&key, "{\n  \"currency\": \"usd\",\n  \"amount\": 1999\n}")
        .await;
    assert_eq!(b.status(), 201);
    assert_eq!(b.headers()["idempotent-replayed"], "true");
}

/// Same key, another body: 422 and nothing runs.
#[tokio::test]
async fn a_key_reused_with_another_body_is_refused_with_422_and_nothing_runs() {
    let app = TestApp::spawn().await;
    let key = new_key();
    assert_eq!(app.charge(&key, 1000).await.status(), 201);
    assert_problem(
        app.charge(&key, 2000).await,
        422,
        "idempotency-key-mismatch",
    )
    .await;
    let charges = app.charges().await;
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0]["amount"], 1000);
    assert_eq!(app.keyed_requests("mismatch").await, 1.0);
}

/// Same key, another path (same body): 422.
#[tokio::test]
async fn a_key_reused_on_another_path_is_refused_with_422() {
    let app = TestApp::spawn().await;
    let key = new_key();
    let body = json!({"item_id": "sku-tee", "quantity": 1});
    assert_eq!(app.post("/reservations", &key, &body).await.status(), 201);
    assert_problem(
        app.post("/charges", &key, &body).await,
        422,
        "idempotency-key-mismatch",
    )
    .await;
    assert_eq!(app.available("sku-tee").await, 99);
}

/// A key belongs to its caller: another caller's same key is another
/// operation, and neither sees the other's response.
#[tokio::test]
async fn the_same_key_from_another_caller_is_another_operation_and_leaks_nothing() {
    let app = TestApp::spawn().await;
    let key = new_key();
    let alice = new_token();
    let mallory = new_token();
    let body = json!({"amount": 4200, "currency": "eur"});
    let alices = app.post_as(&alice, "/charges", &key, &body).await;
    assert_eq!(alices.status(), 201);
    let alices: serde_json::Value = alices.json().await.unwrap();

    // Mallory guesses the key and sends the very same request.
    let guess = app.post_as(&mallory, "/charges", &key, &body).await;
    assert_eq!(guess.status(), 201);
    assert!(
        guess.headers().get("idempotent-replayed").is_none(),
        "a new operation, not a replay"
    );
    let guess: serde_json::Value = guess.json().await.unwrap();
    assert_ne!(guess["id"], alices["id"]);

    // Or another request: still not a mismatch against Alice's record.
    let other = app
        .post_as(
            &new_token(),
            "/charges",
            &key,
            &json!({"amount": 1, "currency": "usd"}),
        )
        .await;
    assert_eq!(other.status(), 201);

    assert_eq!(app.charges_of(&alice).await, vec![alices]);
    assert_eq!(app.charges_of(&mallory).await, vec![guess]);
}

/// Fifty copies of one request at once: one charge, one first answer, the
/// rest replays, no 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_requests_with_one_key_make_one_charge_and_no_5xx() {
    let app = TestApp::spawn().await;
    let key = new_key();
    let body = json!({"amount": 1234, "currency": "usd"});
    let caller = app.server.bearer(&app.token);
    let copies = (0..50).map(|_| caller.keyed("/charges", &key).json(&body));
    let answers = testkit::at_once(copies).await.unwrap();
    testkit::exactly_one_run(&answers).unwrap();
    assert_eq!(app.charges().await.len(), 1);
    assert_eq!(app.keyed_requests("executed").await, 1.0);
    assert_eq!(app.keyed_requests("replayed").await, 49.0);
}

/// Many keys at once, each sent twice, and one key sent with two different
/// amounts: the requests that arrive together share a commit (SQLite's
/// writer) or a statement (PostgreSQL), and still each key runs once, each
/// copy gets its key's answer, and the reused key is 422 for exactly one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_sent_together_run_each_key_once_whatever_keys_they_share() {
    let app = TestApp::spawn().await;
    let caller = app.server.bearer(&app.token);
    let keys: Vec<String> = (0..16).map(|_| new_key()).collect();
    let reused = new_key();
    let mut requests = Vec::new();
    for (n, key) in keys.iter().enumerate() {
        let body = json!({"amount": 100 + n, "currency": "usd"});
        requests.push(caller.keyed("/charges", key).json(&body));
        requests.push(caller.keyed("/charges", key).json(&body));
    }
    for amount in [7, 8] {
        let body = json!({"amount": amount, "currency": "usd"});
        requests.push(caller.keyed("/charges", &reused).json(&body));
    }
    let answers = testkit::at_once(requests).await.unwrap();

    for (n, pair) in answers[..32].chunks(2).enumerate() {
        testkit::exactly_one_run(pair).unwrap_or_else(|e| panic!("key {n}: {e}"));
        assert_eq!(pair[0].json()["amount"], 100 + n, "key {n}'s own charge");
    }
    let mut reused_statuses: Vec<u16> = answers[32..].iter().map(|a| a.status).collect();
    reused_statuses.sort_unstable();
    assert_eq!(reused_statuses, [201, 422], "the reused key");
    assert_eq!(app.charges().await.len(), 17, "one charge per key");
    assert_eq!(app.keyed_requests("executed").await, 17.0);
}

/// Requests refused before they run store nothing: the key can be used
/// again with a corrected request.
#[tokio::test]
async fn refused_requests_leave_the_key_reusable() {
    let app = TestApp::spawn().await;
    let key = new_key();
    let good = json!({"amount": 300, "currency": "usd"}).to_string();

    let post = || {
        app.server
            .http()
            .post(app.url("/charges"))
            .header("Idempotency-Key", &key)
    };
    let huge =
        json!({"amount": 300, "currency": "usd", "description": "x".repeat(70_000)}).to_string();
    for (what, request, status, slug) in [
        (
            "no caller",
            post()
                .header(CONTENT_TYPE, "application/json")
                .body(good.clone()),
            401,
            "unauthorized",
        ),
        (
            "a body that is not a charge",
            app.charge_request(r#"{"amount": -1, "currency": "usd"}"#)
                .header("Idempotency-Key", &key),
            400,
            "invalid-request",
        ),
        (
            "a body that is not JSON",
            app.charge_request(r#"{"amount": 300,"#)
                .header("Idempotency-Key", &key),
            400,
            "invalid-request",
        ),
        (
            "a body that is not JSON at all",
            post()
                .bearer_auth(&app.token)
                .header(CONTENT_TYPE, "text/plain")
                .body(good.clone()),
            415,
            "invalid-request",
        ),
        (
            "a body over 64 KiB",
            app.charge_request(huge).header("Idempotency-Key", &key),
            413,
            "payload-too-large",
        ),
    ] {
        let answer = request.send().await.unwrap();
        assert_problem_to(what, answer, status, slug).await;
    }

    app.assert_nothing_stored().await;
    assert_ran(
        &app.charge_raw(&key, good).await,
        "the corrected request runs",
    );
}

/// A record lives for --key-ttl; after that the key counts as absent, the
/// sweeper deletes the record, and a retry runs again (the documented
/// contract).
#[tokio::test]
async fn records_expire_after_the_ttl_and_a_retry_then_runs_again() {
    let app = TestApp::spawn_with(&["--key-ttl", "1s", "--sweep-interval", "1s"]).await;
    let key = new_key();
    assert_eq!(app.charge(&key, 100).await.status(), 201);
    assert_eq!(
        app.charge(&key, 100).await.headers()["idempotent-replayed"],
        "true"
    );

    tokio::time::sleep(Duration::from_millis(1300)).await;
    // Expired: even a different body is no mismatch now; it simply runs.
    let again = app.charge(&key, 200).await;
    assert_eq!(again.status(), 201);
    assert!(again.headers().get("idempotent-replayed").is_none());
    let again: serde_json::Value = again.json().await.unwrap();
    assert_eq!(again["amount"], 200);
    let amounts: Vec<_> = app
        .charges()
        .await
        .iter()
        .map(|c| c["amount"].clone())
        .collect();
    assert_eq!(amounts, [200, 100], "the new run and the expired one");
    // The new run is the key's record now.
    let replay = app.charge(&key, 200).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.json::<serde_json::Value>().await.unwrap(), again);

    // The sweeper deletes expired records on its own.
    let other = new_key();
    assert_eq!(app.charge(&other, 100).await.status(), 201);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let expired = app.counter("idempotency_records_expired_total", &[]).await;
        if expired >= 1.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the sweeper deleted nothing"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A browser session (the `sid` cookie `GET /` sets) is a caller too.
#[tokio::test]
async fn the_session_cookie_from_the_page_identifies_the_caller() {
    let www = tempfile::tempdir().unwrap();
    std::fs::write(
        www.path().join("index.html"),
        "<!doctype html><title>shop</title>",
    )
    .unwrap();
    let app = TestApp::start(testkit::Server::builder().www(www.path())).await;
    let page = app.get("/").await;
    let cookie = page.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let sid = cookie.split(';').next().unwrap().to_owned();
    let key = new_key();
    let post = |sid: String| {
        app.server
            .http()
            .post(app.url("/charges"))
            .header("cookie", sid)
            .header("Idempotency-Key", &key)
            .header("content-type", "application/json")
            .body(r#"{"amount": 900, "currency": "usd"}"#)
            .send()
    };
    assert_eq!(post(sid.clone()).await.unwrap().status(), 201);
    assert_eq!(
        post(sid.clone()).await.unwrap().headers()["idempotent-replayed"],
        "true"
    );
    let token = sid.trim_start_matches("sid=");
    assert_eq!(app.charges_of(token).await.len(), 1);
}

/// No "assume new": if the key's record cannot be written, the business
/// change is rolled back with it. Proven by making record inserts fail
/// inside the database while the server runs.
#[tokio::test]
async fn a_charge_never_commits_without_its_record() {
    let app = TestApp::spawn().await;
    // One statement at a time, on one session: Citus wants
    // `citus.enable_unsafe_triggers` for a trigger on a sharded table
    // (elsewhere a name PostgreSQL keeps and nothing reads), and refuses
    // several statements in one string when it passes the trigger on to
    // the workers.
    let postgres = app.server.database().postgres_client().await.ok();
    match &postgres {
        Some(client) => {
            for sql in [
                "SET citus.enable_unsafe_triggers = on",
                "CREATE FUNCTION refuse_records() RETURNS trigger LANGUAGE plpgsql AS
                   $$ BEGIN RAISE EXCEPTION 'records refused for this test'; END $$",
                "CREATE TRIGGER refuse_records BEFORE INSERT ON idempotency_keys
                   FOR EACH ROW EXECUTE FUNCTION refuse_records()",
            ] {
                client.batch_execute(sql).await.unwrap();
            }
        }
        None => {
            let refuse = "CREATE TRIGGER refuse_records BEFORE INSERT ON idempotency_keys
                BEGIN SELECT RAISE(ABORT, 'records refused for this test'); END;";
            app.sql(refuse, "").await;
        }
    }
    let key = new_key();
    let r = app.charge(&key, 777).await;
    assert!(r.status().is_server_error(), "{}", r.status());
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    // The charge was rolled back with its record.
    app.assert_nothing_stored().await;

    match &postgres {
        Some(client) => {
            let drop = "DROP TRIGGER refuse_records ON idempotency_keys";
            client.batch_execute(drop).await.unwrap();
        }
        None => app.sql("DROP TRIGGER refuse_records;", "").await,
    }
    assert_ran(&app.charge(&key, 777).await, "the retry ran afresh");
    assert_eq!(app.charges().await.len(), 1);
}

/// A request with both a bearer token and a `sid` cookie belongs to the
/// bearer's caller: the charge is listed for the bearer, not the cookie,
/// and the key's record is the bearer's.
#[tokio::test]
async fn the_bearer_token_wins_over_the_session_cookie() {
    let app = TestApp::spawn().await;
    let (bearer, sid) = (new_token(), new_token());
    let key = new_key();
    let both = app
        .server
        .bearer(&bearer)
        .keyed("/charges", &key)
        .header("cookie", format!("sid={sid}"))
        .json(&json!({"amount": 1300, "currency": "usd"}))
        .send()
        .await
        .unwrap();
    assert_eq!(both.status(), 201);
    let charge: serde_json::Value = both.json().await.unwrap();

    assert_eq!(app.charges_of(&bearer).await, vec![charge.clone()]);
    let by_cookie = app.server.session(&sid).charges().await.unwrap();
    assert_eq!(by_cookie, Vec::<serde_json::Value>::new());
    // The key is the bearer's: it replays for the bearer alone.
    let replay = app
        .post_as(
            &bearer,
            "/charges",
            &key,
            &json!({"amount": 1300, "currency": "usd"}),
        )
        .await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.json::<serde_json::Value>().await.unwrap(), charge);
}

/// The record decides before the body's fields do: a key reused with a
/// body whose fields would be refused (a string amount, an unknown field)
/// is a 422, and the same body under a fresh key is the 400. Both from a
/// process that has the record in memory and from a restarted one that
/// must read it.
#[tokio::test]
async fn a_key_reused_with_a_body_that_would_not_parse_is_422_not_400() {
    let mut app = TestApp::spawn().await;
    let key = new_key();
    assert_eq!(app.charge(&key, 1999).await.status(), 201);
    refuse_with_422_then_400(&app, &key).await;
    app.server.kill().unwrap();
    app.server.restart().unwrap();
    refuse_with_422_then_400(&app, &key).await;
    assert_eq!(app.charges().await.len(), 1);
}

async fn refuse_with_422_then_400(app: &TestApp, key: &str) {
    for bad in [
        json!({"amount": "lots", "currency": "usd"}),
        json!({"amount": 1999, "currency": "usd", "tip": 5}),
        json!([1, 2, 3]),
    ] {
        let reused = app.post("/charges", key, &bad).await;
        assert_problem(reused, 422, "idempotency-key-mismatch").await;
        let fresh = app.post("/charges", &new_key(), &bad).await;
        assert_problem(fresh, 400, "invalid-request").await;
    }
}
