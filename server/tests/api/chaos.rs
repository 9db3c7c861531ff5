//! CONTRACT section 5: `X-Chaos`, only with `--chaos`.

use crate::helpers::{assert_ran, new_key, TestApp};
use serde_json::json;
use std::time::{Duration, Instant};

/// `POST /charges` of 25.00 usd with `key` and `X-Chaos: chaos`.
async fn charge_with_chaos(
    app: &TestApp,
    key: &str,
    chaos: &str,
) -> reqwest::Result<reqwest::Response> {
    app.charge_with_chaos(key, &json!({"amount": 2500, "currency": "usd"}), chaos)
        .await
}

/// `crash-before-commit`: the connection drops and nothing is stored; the
/// retry runs the charge once.
#[tokio::test]
async fn crash_before_commit_stores_nothing_and_the_retry_runs_once() {
    let app = TestApp::spawn().await;
    let key = new_key();
    let lost = charge_with_chaos(&app, &key, "crash-before-commit").await;
    assert!(
        lost.is_err(),
        "the connection is dropped without an answer: {lost:?}"
    );
    app.assert_nothing_stored().await;
    assert_ran(&app.charge(&key, 2500).await, "it ran for real this time");
    assert_eq!(app.charges().await.len(), 1);
}

/// `drop-after-commit`: no answer, but the charge is committed; the retry
/// gets the replay.
#[tokio::test]
async fn drop_after_commit_commits_and_the_retry_replays() {
    let app = TestApp::spawn().await;
    let key = new_key();
    let lost = charge_with_chaos(&app, &key, "drop-after-commit").await;
    assert!(lost.is_err(), "no answer: {lost:?}");
    assert_eq!(app.charges().await.len(), 1, "committed before the drop");
    // A retry still carrying the header is a replay: chaos acts only on runs.
    let retry = charge_with_chaos(&app, &key, "drop-after-commit")
        .await
        .unwrap();
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(app.charges().await.len(), 1);
}

/// `delay-after-commit=MS`: committed at once, answered late; a retry
/// meanwhile replays the committed charge.
#[tokio::test]
async fn delay_after_commit_answers_late_and_a_retry_meanwhile_replays() {
    let app = std::sync::Arc::new(TestApp::spawn().await);
    let key = new_key();
    let started = Instant::now();
    let slow = {
        let (app, key) = (app.clone(), key.clone());
        tokio::spawn(async move { charge_with_chaos(&app, &key, "delay-after-commit=1500").await })
    };
    // Wait until the commit is visible, then retry.
    let deadline = Instant::now() + Duration::from_secs(5);
    while app.charges().await.is_empty() {
        assert!(Instant::now() < deadline, "the charge never committed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let retry = app.charge(&key, 2500).await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let retry_body = retry.bytes().await.unwrap();
    let slow = slow.await.unwrap().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(1500));
    assert_eq!(slow.status(), 201);
    assert!(slow.headers().get("idempotent-replayed").is_none());
    assert_eq!(slow.bytes().await.unwrap(), retry_body);
    assert_eq!(app.charges().await.len(), 1);
}

/// Without `--chaos` the header is ignored.
#[tokio::test]
async fn the_chaos_header_is_ignored_without_the_flag() {
    let app = TestApp::spawn_with(&[]).await;
    let r = charge_with_chaos(&app, &new_key(), "drop-after-commit")
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = charge_with_chaos(&app, &new_key(), "nonsense")
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
}

/// With `--chaos`, an unknown value is refused before anything runs.
#[tokio::test]
async fn an_unknown_chaos_value_is_400() {
    let app = TestApp::spawn().await;
    let r = charge_with_chaos(&app, &new_key(), "explode")
        .await
        .unwrap();
    crate::helpers::assert_problem(r, 400, "invalid-request").await;
    app.assert_nothing_stored().await;
}

/// Chaos acts only on a request that runs: with `exit-after-commit` on a
/// replay, a 422 and a 400, each is answered as usual and the process
/// lives on.
#[tokio::test]
async fn chaos_leaves_replays_and_refusals_alone() {
    let app = TestApp::spawn().await;
    let key = new_key();
    assert_eq!(app.charge(&key, 2500).await.status(), 201);
    let replay = charge_with_chaos(&app, &key, "exit-after-commit")
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let other_amount = json!({"amount": 9999, "currency": "usd"});
    let mismatch = app
        .charge_with_chaos(&key, &other_amount, "exit-after-commit")
        .await
        .unwrap();
    assert_eq!(mismatch.status(), 422);
    let zero = json!({"amount": 0, "currency": "usd"});
    let refused = app
        .charge_with_chaos(&new_key(), &zero, "exit-after-commit")
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    assert_eq!(
        app.server.health().await.unwrap(),
        200,
        "the process lives on"
    );
    assert_eq!(app.charges().await.len(), 1);
}
