//! SQLite's group commit: the writer runs every queued request in one
//! transaction, each in its own savepoint, and answers only after the
//! commit. What one request's failure does to the others it shared a
//! transaction with.

use crate::helpers::{new_key, TestApp};
use serde_json::json;
use testkit::{at_once, Database, Server};

/// Charges of `amount` sent at once under fresh keys (each charge's
/// description is its key): the requests that share the writer's
/// transactions.
fn burst(app: &TestApp, amounts: &[i64]) -> (Vec<String>, Vec<reqwest::RequestBuilder>) {
    amounts
        .iter()
        .map(|amount| {
            let key = new_key();
            let request = app
                .server
                .bearer(&app.token)
                .keyed("/charges", &key)
                .json(&json!({"amount": amount, "currency": "usd", "description": key}));
            (key, request)
        })
        .unzip()
}

/// The amounts of a burst: `poisoned` in the middle (at [`POISONED`]) of
/// thirty ordinary ones.
fn amounts(poisoned: i64) -> Vec<i64> {
    let mut amounts: Vec<i64> = (1..=30).map(|n| 1000 + n).collect();
    amounts.insert(POISONED, poisoned);
    amounts
}

/// Where the poisoned request sits in a burst.
const POISONED: usize = 15;

/// The descriptions (keys) of the caller's stored charges, one per row: a
/// key charged twice is there twice.
async fn stored(app: &TestApp) -> Vec<String> {
    app.charges()
        .await
        .iter()
        .map(|c| c["description"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Every charge row has its key's record and no key has two charges:
/// `expected` of each.
async fn assert_charged_once_each(app: &TestApp, expected: usize) {
    let mut stored = stored(app).await;
    assert_eq!(stored.len(), expected, "charges");
    stored.sort();
    stored.dedup();
    assert_eq!(stored.len(), expected, "a key charged twice");
    assert_eq!(app.count("charges").await, expected as i64);
    assert_eq!(app.count("idempotency_keys").await, expected as i64);
}

/// A trigger that makes one charge's INSERT fail: `raise` is `ABORT`
/// (only the statement fails) or `ROLLBACK` (SQLite rolls back the whole
/// transaction, everyone's savepoints with it).
async fn poison(app: &TestApp, amount: i64, raise: &str) {
    app.sql(
        &format!(
            "CREATE TRIGGER poison BEFORE INSERT ON charges WHEN NEW.amount = {amount}
             BEGIN SELECT RAISE({raise}, 'poisoned for this test'); END;"
        ),
        "",
    )
    .await;
}

async fn sqlite_app() -> TestApp {
    TestApp::start(
        Server::builder()
            .database(Database::sqlite().expect("a SQLite file"))
            .durability_full(),
    )
    .await
}

/// One failing request in a batch rolls back only itself: every other
/// request of the burst is charged once and answered 201.
#[tokio::test]
async fn a_failing_request_in_a_batch_rolls_back_only_itself() {
    let app = sqlite_app().await;
    poison(&app, 666, "ABORT").await;
    let (keys, requests) = burst(&app, &amounts(666));
    let answers = at_once(requests).await.expect("the burst is answered");
    let stored = stored(&app).await;
    for (i, (answer, key)) in answers.iter().zip(&keys).enumerate() {
        let (status, charged) = if i == POISONED {
            (500, false)
        } else {
            (201, true)
        };
        assert_eq!(answer.status, status, "request {i}");
        assert_eq!(stored.contains(key), charged, "request {i} stored");
    }
    assert_charged_once_each(&app, 30).await;
}

/// A failure that rolls the whole transaction back in the middle of a
/// batch (here a trigger's `RAISE(ROLLBACK)`; in life a full disk, an I/O
/// error while spilling, out of memory) must not leave the batch running
/// outside its transaction, and must be answered truthfully: no failure
/// answer for a charge that is stored, the other requests are told to
/// retry (503 with Retry-After), and each retry then runs once.
#[tokio::test]
async fn a_transaction_rolled_back_mid_batch_is_answered_truthfully_and_retries_run_once() {
    let app = sqlite_app().await;
    poison(&app, 666, "ROLLBACK").await;
    let mut told_to_retry = 0;
    for round in 1..=10 {
        let (keys, requests) = burst(&app, &amounts(666));
        let answers = at_once(requests).await.expect("the burst is answered");
        let stored = stored(&app).await;
        for (i, (answer, key)) in answers.iter().zip(&keys).enumerate() {
            let charged = stored.contains(key);
            match (i, answer.status) {
                (POISONED, 500) => assert!(!charged, "the poisoned charge is stored"),
                (_, 201) => assert!(
                    charged,
                    "request {i} was answered 201, its charge is not stored"
                ),
                (_, 503) => {
                    assert!(
                        !charged,
                        "request {i} was answered 503 (nothing was done) and its charge is stored"
                    );
                    told_to_retry += 1;
                    let retry = app.charge_with_description(key, amounts(666)[i], key).await;
                    assert_eq!(retry.status(), 201, "the retry of request {i}");
                    assert!(
                        retry.headers().get("idempotent-replayed").is_none(),
                        "request {i} had run"
                    );
                }
                (_, status) => panic!(
                    "request {i} was answered {status} and its charge is {}stored: {}",
                    if charged { "" } else { "not " },
                    String::from_utf8_lossy(&answer.body)
                ),
            }
        }
        assert_charged_once_each(&app, 30 * round).await;
        if told_to_retry > 0 {
            break;
        }
    }
    assert!(
        told_to_retry > 0,
        "no round put the poisoned request in a batch with others"
    );
}

/// A server error reaches the log once, with the request's method and
/// path and the cause the answer's body leaves out: one `ERROR` line, not
/// one more from the trace layer without the cause (an alert that counts
/// error lines would count it twice).
#[tokio::test]
async fn a_server_error_is_logged_once_with_its_request_and_cause() {
    let app = sqlite_app().await;
    poison(&app, 4242, "ABORT").await;
    let status = app.charge(&new_key(), 4242).await.status();
    assert!(status.is_server_error(), "answered {status}");
    let log = app.server.log_text();
    let lines: Vec<&str> = log.lines().filter(|line| line.contains("ERROR")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains("request failed; nothing was done"),
        "{log}"
    );
    for part in ["POST", "/charges", "poisoned for this test"] {
        assert!(lines[0].contains(part), "{part} is not in {}", lines[0]);
    }
}
