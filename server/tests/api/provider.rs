//! CONTRACT section 6, the payment provider: a charge runs in phases
//! around the provider call, and the card is charged once per operation
//! whatever fails. Each test reads the simulator's ledger, the provider's
//! own record of what it charged.

use crate::helpers::{Checkout, Reply, TestApp};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use testkit::{new_key, new_token, Fault, Server};

/// A charge of `amount` usd on `card`.
fn paying(amount: i64, card: &str) -> Value {
    json!({"amount": amount, "currency": "usd", "payment_method": card})
}

/// A charge of `amount` usd on the test Visa card (the default card).
fn visa(amount: i64) -> Value {
    json!({"amount": amount, "currency": "usd"})
}

/// The test card that always declines.
const DECLINED: &str = "pm_card_chargeDeclined";

/// Flags that keep the completer out of the way of a test about retries.
const NO_COMPLETER: [&str; 2] = ["--complete-interval", "1h"];

/// Asserts a `201` whose charge succeeded through the provider's charge
/// `provider_charge`; the charge.
fn assert_charged(reply: &Reply, provider_charge: &str) -> Value {
    assert_eq!(
        reply.status,
        201,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let charge = reply.json();
    assert_eq!(charge["status"], "succeeded", "{charge}");
    assert_eq!(charge["provider_charge"], provider_charge, "{charge}");
    charge
}

/// Asserts a problem answer of `status` and type `slug`.
fn assert_problem(reply: &Reply, status: u16, slug: &str) {
    assert_eq!(
        (reply.status, reply.problem().as_str()),
        (status, slug),
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
}

/// Polls the app's charges until `done` holds for them (at most `timeout`).
async fn charges_until(
    app: &TestApp,
    timeout: Duration,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let charges = app.charges().await;
        if done(&charges) {
            return charges;
        }
        assert!(
            Instant::now() < deadline,
            "not within {timeout:?}: {charges:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends `body` with `key` until the answer is not `409 in use` (which
/// must carry Retry-After), for at most 15 s.
async fn pay_once_free(shop: &Checkout, key: &str, body: &Value) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let reply = shop.pay(key, body).await;
        if reply.status != 409 {
            return reply;
        }
        assert_problem(&reply, 409, "idempotency-key-in-use");
        assert!(reply.retry_after, "409 in use without Retry-After");
        assert!(Instant::now() < deadline, "the key stayed in use");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A charge through the provider answers 201 with the ledger row's id as
/// `provider_charge`; a replay returns the same bytes and charges nothing.
#[tokio::test]
async fn a_charge_through_the_provider_is_the_ledgers_charge_and_a_replay_charges_nothing() {
    let shop = Checkout::start(&[]).await;
    let key = new_key();
    let body = json!({"amount": 1999, "currency": "usd", "description": "cart 42"});
    let first = shop.pay(&key, &body).await;
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(
        (ledger[0].amount, ledger[0].currency.as_str()),
        (1999, "usd")
    );
    let charge = assert_charged(&first, &ledger[0].id);
    assert!(!first.replayed);
    assert_eq!(charge["amount"], 1999);
    assert_eq!(charge["description"], "cart 42");
    assert_eq!(
        charge["receipt_email"],
        Value::Null,
        "present, and null: {charge}"
    );

    let replay = shop.pay(&key, &body).await;
    assert!(replay.replayed);
    assert_eq!(replay.body, first.body, "the same bytes");
    assert_eq!(shop.ledger().await, ledger, "no second charge");
    assert_eq!(shop.app.charges().await, vec![charge]);
    assert_eq!(shop.provider_calls("succeeded").await, 1.0);
}

/// Every attempt of one operation sends the provider the same key: three
/// attempts whose answers are lost after the charge, then a retry, leave
/// one charge in the ledger, and it is the one the retry answers with.
#[tokio::test]
async fn every_attempt_of_an_operation_sends_the_provider_the_same_key() {
    let shop = Checkout::start(&[]).await;
    let key = new_key();
    // Each of the request's three attempts charges (or replays) and loses
    // the answer.
    shop.fault(Fault::DropAfterCharge, 3).await;
    let lost = shop.pay(&key, &visa(700)).await;
    assert_problem(&lost, 503, "provider-unavailable");
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1, "three attempts, one charge: {ledger:?}");

    let retry = shop.pay(&key, &visa(700)).await;
    assert_charged(&retry, &ledger[0].id);
    assert_eq!(
        shop.ledger().await,
        ledger,
        "the retry was a replay at the provider"
    );
}

/// Two keys of one caller, and one key of two callers, are three
/// operations: three charges under three different provider keys.
#[tokio::test]
async fn two_keys_and_two_callers_send_the_provider_different_keys() {
    let shop = Checkout::start(&[]).await;
    let (key, other_key, other_caller) = (new_key(), new_key(), new_token());
    let mut answered = Vec::new();
    for (token, key) in [
        (&shop.app.token, &key),
        (&shop.app.token, &other_key),
        (&other_caller, &key),
    ] {
        let reply = Reply::read(shop.app.post_as(token, "/charges", key, &visa(300)).await).await;
        assert_eq!(reply.status, 201);
        answered.push(reply.json()["provider_charge"].as_str().unwrap().to_owned());
    }
    let ledger = shop.ledger().await;
    let mut keys: Vec<&str> = ledger.iter().map(|r| r.idempotency_key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 3, "three different provider keys: {ledger:?}");
    let mut ids: Vec<String> = ledger.iter().map(|r| r.id.clone()).collect();
    ids.sort();
    answered.sort();
    assert_eq!(answered, ids, "each operation answers with its own charge");
}

/// A decline is a recorded `402 card-declined`, replayed as such; the
/// charge is `failed` and nothing is in the ledger. Paying with another
/// card is a new operation (a new key), and it succeeds.
#[tokio::test]
async fn a_decline_is_a_recorded_402_and_a_new_key_with_a_good_card_succeeds() {
    let shop = Checkout::start(&[]).await;
    let key = new_key();
    let declined = shop.pay(&key, &paying(4200, DECLINED)).await;
    assert_problem(&declined, 402, "card-declined");
    assert!(!declined.replayed);
    let replay = shop.pay(&key, &paying(4200, DECLINED)).await;
    assert!(replay.replayed);
    assert_eq!((replay.status, &replay.body), (402, &declined.body));

    let charges = shop.app.charges().await;
    assert_eq!(charges.len(), 1, "{charges:?}");
    assert_eq!(charges[0]["status"], "failed");
    assert_eq!(charges[0]["provider_charge"], Value::Null);
    assert_eq!(shop.ledger().await, vec![], "a decline charges nothing");
    assert_eq!(shop.provider_calls("declined").await, 1.0);

    let paid = shop.pay(&new_key(), &paying(4200, "pm_card_visa")).await;
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1);
    assert_charged(&paid, &ledger[0].id);
    assert_eq!(shop.app.charges().await.len(), 2);
}

/// A key reused with another `payment_method` is 422: nothing runs, at the
/// provider or here.
#[tokio::test]
async fn a_key_reused_with_another_payment_method_is_422_and_nothing_runs() {
    let shop = Checkout::start(&[]).await;
    let key = new_key();
    assert_eq!(
        shop.pay(&key, &paying(900, "pm_card_visa")).await.status,
        201
    );
    let reused = shop.pay(&key, &paying(900, "pm_card_mastercard")).await;
    assert_problem(&reused, 422, "idempotency-key-mismatch");
    assert_eq!(shop.ledger().await.len(), 1);
    assert_eq!(shop.app.charges().await.len(), 1);
    assert_eq!(shop.provider_calls("succeeded").await, 1.0);
}

/// An operation waiting at its recovery point keeps its request: the same
/// key with another card is 422, and the first request still resumes.
#[tokio::test]
async fn a_waiting_operation_reused_with_another_payment_method_is_422_and_still_resumes() {
    let shop = Checkout::start(&[]).await;
    let key = new_key();
    shop.fault(Fault::Down, 3).await;
    assert_problem(
        &shop.pay(&key, &paying(900, "pm_card_visa")).await,
        503,
        "provider-unavailable",
    );
    let reused = shop.pay(&key, &paying(900, "pm_card_mastercard")).await;
    assert_problem(&reused, 422, "idempotency-key-mismatch");
    assert_eq!(shop.ledger().await, vec![], "nothing ran");

    let resumed = shop.pay(&key, &paying(900, "pm_card_visa")).await;
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1);
    assert_charged(&resumed, &ledger[0].id);
}

/// The provider down: `503 provider-unavailable` with Retry-After, nothing
/// charged, the charge listed as pending. The lease is given up with the
/// answer, so the retry with the same key right away resumes it: one
/// charge, counted as resumed by a retry.
#[tokio::test]
async fn provider_down_is_503_with_the_charge_pending_and_the_retry_resumes_it_once() {
    // The default lease (30 s) would outlast the test: the retry gets in
    // only because the lease was released.
    let shop = Checkout::start(&NO_COMPLETER).await;
    let key = new_key();
    shop.fault(Fault::Down, 100).await;
    let down = shop.pay(&key, &visa(2500)).await;
    assert_problem(&down, 503, "provider-unavailable");
    assert!(down.retry_after, "503 without Retry-After");
    assert_eq!(shop.ledger().await, vec![], "nothing charged");
    let pending = shop.app.charges().await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["status"], "pending");
    assert_eq!(pending[0]["provider_charge"], Value::Null);
    assert_eq!(
        shop.provider_calls("failed").await,
        3.0,
        "three attempts in the request"
    );

    shop.psp.clear_faults().await.unwrap();
    let resumed = shop.pay(&key, &visa(2500)).await;
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    let charge = assert_charged(&resumed, &ledger[0].id);
    assert!(!resumed.replayed, "it ran now");
    assert_eq!(
        charge["id"], pending[0]["id"],
        "the same charge, not a new one"
    );
    assert_eq!(shop.resumed("retry").await, 1.0);
    assert_eq!(shop.app.charges().await, vec![charge]);

    let replay = shop.pay(&key, &visa(2500)).await;
    assert!(replay.replayed);
    assert_eq!(replay.body, resumed.body);
}

/// One provider failure is retried within the request: 201, one charge.
#[tokio::test]
async fn one_provider_failure_is_retried_within_the_request() {
    let shop = Checkout::start(&[]).await;
    shop.fault(Fault::Fail, 1).await;
    let paid = shop.pay(&new_key(), &visa(1200)).await;
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1);
    assert_charged(&paid, &ledger[0].id);
    assert_eq!(shop.provider_calls("failed").await, 1.0);
    assert_eq!(shop.provider_calls("succeeded").await, 1.0);
}

/// The provider charges and the connection drops before its answer: the
/// retry within the request gets the provider's replay, one charge.
#[tokio::test]
async fn a_provider_answer_lost_after_the_charge_is_replayed_to_the_retry_within_the_request() {
    let shop = Checkout::start(&[]).await;
    shop.fault(Fault::DropAfterCharge, 1).await;
    let paid = shop.pay(&new_key(), &visa(1300)).await;
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_charged(&paid, &ledger[0].id);
}

/// `crash-before-commit` with the provider: the start phase rolls back, so
/// nothing is stored and nothing charged; the retry runs once.
#[tokio::test]
async fn crash_before_commit_stores_nothing_charges_nothing_and_the_retry_runs_once() {
    let shop = Checkout::start(&[]).await;
    let key = new_key();
    let lost = shop
        .pay_with_chaos(&key, &visa(800), "crash-before-commit")
        .await;
    assert!(lost.is_none(), "no answer: {lost:?}");
    shop.app.assert_nothing_stored().await;
    assert_eq!(shop.ledger().await, vec![]);

    let retry = shop.pay(&key, &visa(800)).await;
    assert!(!retry.replayed, "it ran for real this time");
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1);
    assert_charged(&retry, &ledger[0].id);
}

/// The process exits (137) at `chaos`, and starts again on the same
/// database; once the lease runs out the retry resumes the operation:
/// one charge, the one in the ledger. Returns the ledger after the exit.
async fn exit_restart_and_retry(chaos: &str) -> Vec<testkit::LedgerRow> {
    let mut shop =
        Checkout::start(&["--operation-lease", "2s", NO_COMPLETER[0], NO_COMPLETER[1]]).await;
    let key = new_key();
    let lost = shop.pay_with_chaos(&key, &visa(5100), chaos).await;
    assert!(lost.is_none(), "no answer: {lost:?}");
    let exit = shop
        .app
        .server
        .wait_for_exit(Duration::from_secs(10))
        .unwrap();
    assert_eq!(exit.code(), Some(137), "{exit}");
    let after_exit = shop.ledger().await;

    shop.app.server.restart().unwrap();
    let pending = shop.app.charges().await;
    assert_eq!(pending.len(), 1, "the start was committed: {pending:?}");
    assert_eq!(pending[0]["status"], "pending");
    let resumed = pay_once_free(&shop, &key, &visa(5100)).await;
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    let charge = assert_charged(&resumed, &ledger[0].id);
    assert!(!resumed.replayed);
    assert_eq!(charge["id"], pending[0]["id"]);
    assert_eq!(shop.resumed("retry").await, 1.0);
    assert_eq!(shop.resumed("completer").await, 0.0);
    after_exit
}

/// `exit-before-provider`: the start is committed and the process exits
/// (137) before the provider is called: nothing charged; after a restart
/// and the lease, the retry charges once.
#[tokio::test]
async fn exit_before_provider_charges_nothing_and_the_retry_after_the_lease_charges_once() {
    let after_exit = exit_restart_and_retry("exit-before-provider").await;
    assert_eq!(after_exit, vec![], "the provider was never called");
}

/// `exit-after-provider`: the provider charged, the process exits (137)
/// before that is committed; after a restart and the lease, the retry
/// answers with the charge that was already in the ledger.
#[tokio::test]
async fn exit_after_provider_and_the_retry_answers_with_the_charge_already_made() {
    let after_exit = exit_restart_and_retry("exit-after-provider").await;
    assert_eq!(after_exit.len(), 1, "the provider charged before the exit");
    // exit_restart_and_retry checked that the answer is the one ledger row.
}

/// A retry while the first request holds the lease (its provider call is
/// slow) is `409 idempotency-key-in-use` with Retry-After, and runs
/// nothing; the first request still answers 201, once.
#[tokio::test]
async fn a_retry_during_the_lease_is_409_in_use_and_the_first_request_answers_once() {
    let shop = std::sync::Arc::new(Checkout::start(&[]).await);
    let key = new_key();
    shop.fault(Fault::Delay(Duration::from_millis(3000)), 1)
        .await;
    let first = {
        let (shop, key) = (shop.clone(), key.clone());
        tokio::spawn(async move { shop.pay(&key, &visa(6000)).await })
    };
    charges_until(&shop.app, Duration::from_secs(10), |c| c.len() == 1).await;
    let retry = shop.pay(&key, &visa(6000)).await;
    assert_problem(&retry, 409, "idempotency-key-in-use");
    assert!(retry.retry_after, "409 in use without Retry-After");

    let first = first.await.unwrap();
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_charged(&first, &ledger[0].id);
    assert!(!first.replayed);
    assert_eq!(shop.app.keyed_requests("conflict").await, 1.0);
    let replay = shop.pay(&key, &visa(6000)).await;
    assert!(replay.replayed);
    assert_eq!(replay.body, first.body);
}

/// The completer finishes an operation no client comes back for: after
/// `exit-after-provider` and a restart, with no retry, the charge ends
/// succeeded with the ledger's charge, and a later retry replays it.
#[tokio::test]
async fn the_completer_finishes_an_abandoned_operation_that_no_client_retries() {
    let mut shop = Checkout::start(&["--operation-lease", "1s", "--complete-interval", "1s"]).await;
    let key = new_key();
    let lost = shop
        .pay_with_chaos(&key, &visa(3300), "exit-after-provider")
        .await;
    assert!(lost.is_none());
    let exit = shop
        .app
        .server
        .wait_for_exit(Duration::from_secs(10))
        .unwrap();
    assert_eq!(exit.code(), Some(137), "{exit}");
    shop.app.server.restart().unwrap();

    let charges = charges_until(&shop.app, Duration::from_secs(20), |c| {
        c.len() == 1 && c[0]["status"] != "pending"
    })
    .await;
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(charges[0]["status"], "succeeded");
    assert_eq!(charges[0]["provider_charge"], ledger[0].id.as_str());
    assert_eq!(shop.resumed("completer").await, 1.0);
    assert_eq!(shop.resumed("retry").await, 0.0);

    let later = shop.pay(&key, &visa(3300)).await;
    assert_eq!(later.status, 201);
    assert!(later.replayed, "the completer recorded the answer");
    assert_eq!(later.json(), charges[0]);
    assert_eq!(shop.ledger().await, ledger);
}

/// A holder whose lease ran out cannot record: its provider call outlasts
/// the lease, a retry takes the operation over and finishes it, and the
/// stale holder then answers what the record says. One charge, one first
/// run, the same answer twice.
#[tokio::test]
async fn a_stale_lease_holder_cannot_record_and_both_answers_agree() {
    let shop = std::sync::Arc::new(
        Checkout::start(&["--operation-lease", "1s", NO_COMPLETER[0], NO_COMPLETER[1]]).await,
    );
    let key = new_key();
    shop.fault(Fault::Delay(Duration::from_millis(3000)), 1)
        .await;
    let stale = {
        let (shop, key) = (shop.clone(), key.clone());
        tokio::spawn(async move { shop.pay(&key, &visa(7700)).await })
    };
    charges_until(&shop.app, Duration::from_secs(10), |c| c.len() == 1).await;
    let taken_over = pay_once_free(&shop, &key, &visa(7700)).await;
    let stale = stale.await.unwrap();

    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_charged(&taken_over, &ledger[0].id);
    assert_charged(&stale, &ledger[0].id);
    assert_eq!(stale.body, taken_over.body, "both answers are the record");
    assert!(
        !taken_over.replayed && stale.replayed,
        "the retry recorded, the stale holder replayed (retry replayed: {}, stale replayed: {})",
        taken_over.replayed,
        stale.replayed
    );
    assert_eq!(shop.resumed("retry").await, 1.0);
}

/// A record stopped at a recovery point never expires while unfinished:
/// past its `--key-ttl` and a sweep, the retry still resumes the same
/// charge instead of starting a new one.
#[tokio::test]
async fn an_unfinished_operation_outlives_its_key_ttl() {
    let shop = Checkout::start(&["--key-ttl", "1s", "--sweep-interval", "1s"]).await;
    let key = new_key();
    shop.fault(Fault::Down, 3).await;
    assert_problem(
        &shop.pay(&key, &visa(450)).await,
        503,
        "provider-unavailable",
    );
    let pending = shop.app.charges().await;
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let resumed = shop.pay(&key, &visa(450)).await;
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1);
    let charge = assert_charged(&resumed, &ledger[0].id);
    assert_eq!(charge["id"], pending[0]["id"], "the same operation went on");
    assert_eq!(shop.app.charges().await.len(), 1);
}

/// Without `--psp-url` a charge is recorded locally in one phase: status
/// `succeeded`, `provider_charge` null, `receipt_email` as sent.
#[tokio::test]
async fn a_local_charge_without_a_provider_succeeds_with_no_provider_charge() {
    let app = TestApp::start(Server::builder()).await;
    let plain = Reply::read(app.charge(&new_key(), 100).await).await;
    assert_eq!(plain.status, 201);
    let charge = plain.json();
    assert_eq!(charge["status"], "succeeded");
    for field in ["provider_charge", "receipt_email"] {
        assert_eq!(charge.get(field), Some(&Value::Null), "{field} in {charge}");
    }
    let body = json!({"amount": 200, "currency": "usd", "receipt_email": "ada@shop.example"});
    let with_email = Reply::read(app.post("/charges", &new_key(), &body).await).await;
    assert_eq!(with_email.status, 201);
    assert_eq!(with_email.json()["receipt_email"], "ada@shop.example");
    assert_eq!(with_email.json()["provider_charge"], Value::Null);
    assert_eq!(
        app.counter("operations_resumed_total", &[("by", "retry")])
            .await,
        0.0
    );
}
