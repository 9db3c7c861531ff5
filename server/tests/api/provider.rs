//! CONTRACT section 6, the payment provider: a charge runs in phases
//! around the provider call, and the card is charged once per operation
//! whatever the provider does: declines, fails, drops its answer, is down.
//! Each test reads the simulator's ledger, the provider's own record of
//! what it charged.

use crate::helpers::{assert_charged, assert_refused, paying, visa};
use crate::helpers::{Checkout, Reply, TestApp, DECLINED};
use serde_json::{json, Value};
use testkit::{new_key, new_token, Fault, Server};

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
    assert_refused(&lost, 503, "provider-unavailable");
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
    assert_refused(&declined, 402, "card-declined");
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
    shop.assert_charged_once(&paid).await;
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
    assert_refused(&reused, 422, "idempotency-key-mismatch");
    assert_eq!(shop.ledger().await.len(), 1);
    assert_eq!(shop.app.charges().await.len(), 1);
    assert_eq!(shop.provider_calls("succeeded").await, 1.0);
}

/// An operation waiting at its recovery point keeps its request: the same
/// key with another card is 422, and the first request still resumes.
#[tokio::test]
async fn a_waiting_operation_reused_with_another_payment_method_is_422_and_still_resumes() {
    // No completer during the test: the retry below is what resumes.
    let shop = Checkout::start(&["--complete-interval", "1h"]).await;
    let key = new_key();
    shop.fault(Fault::Down, 3).await;
    assert_refused(
        &shop.pay(&key, &paying(900, "pm_card_visa")).await,
        503,
        "provider-unavailable",
    );
    let pending = shop.app.charges().await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["status"], "pending");
    let reused = shop.pay(&key, &paying(900, "pm_card_mastercard")).await;
    assert_refused(&reused, 422, "idempotency-key-mismatch");
    assert_eq!(shop.ledger().await, vec![], "nothing ran");
    assert_eq!(
        shop.app.charges().await,
        pending,
        "the waiting charge is as it was"
    );

    let resumed = shop.pay(&key, &paying(900, "pm_card_visa")).await;
    shop.assert_resumed_by_retry(&resumed, &pending[0]).await;
}

/// The provider down: `503 provider-unavailable` with Retry-After, nothing
/// charged, the charge listed as pending. The lease is given up with the
/// answer, so the retry with the same key right away resumes it: one
/// charge, counted as resumed by a retry.
#[tokio::test]
async fn provider_down_is_503_with_the_charge_pending_and_the_retry_resumes_it_once() {
    // The default lease (30 s) would outlast the test: the retry gets in
    // only because the lease was released.
    let shop = Checkout::start(&["--complete-interval", "1h"]).await;
    let key = new_key();
    shop.fault(Fault::Down, 100).await;
    let down = shop.pay(&key, &visa(2500)).await;
    assert_refused(&down, 503, "provider-unavailable");
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
    shop.assert_resumed_by_retry(&resumed, &pending[0]).await;

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
    shop.assert_charged_once(&paid).await;
    assert_eq!(shop.provider_calls("failed").await, 1.0);
    assert_eq!(shop.provider_calls("succeeded").await, 1.0);
}

/// The provider answers 409 `idempotency_error` while another request
/// under the same key is in flight (Stripe does, for a completer and a
/// retry that meet): that is "not yet", retried within the request, and
/// the charge goes through once. An earlier release took it for a broken
/// provider and answered 500.
#[tokio::test]
async fn a_provider_409_for_a_key_in_use_is_retried() {
    let shop = Checkout::start(&[]).await;
    shop.fault(Fault::Conflict, 2).await;
    let reply = shop.pay(&new_key(), &visa(1500)).await;
    shop.assert_charged_once(&reply).await;
}

/// The provider charges and the connection drops before its answer: the
/// retry within the request gets the provider's replay, one charge.
#[tokio::test]
async fn a_provider_answer_lost_after_the_charge_is_replayed_to_the_retry_within_the_request() {
    let shop = Checkout::start(&[]).await;
    shop.fault(Fault::DropAfterCharge, 1).await;
    let paid = shop.pay(&new_key(), &visa(1300)).await;
    shop.assert_charged_once(&paid).await;
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
