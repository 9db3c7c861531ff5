//! `POST /admin/faults`: each mode, counts, clearing and replacing.

use crate::helpers::{assert_error, visa, Psp};
use reqwest::StatusCode;
use std::time::{Duration, Instant};

/// Sets a fault and checks it was accepted.
async fn set(psp: &Psp, body: &str) {
    let (status, text) = psp.fault(body).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}: {text}");
}

/// `fail` answers 500 api_error without charging; the retry with the same
/// key then charges, once.
#[tokio::test]
async fn fail_answers_500_charges_nothing_and_the_retry_charges_once() {
    let psp = Psp::start(&[]);
    set(&psp, r#"{"mode": "fail"}"#).await;
    let failed = psp.charge("k", &visa(300)).await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_error(&failed.json, "api_error", "simulated_failure");
    assert!(psp.ledger().await.is_empty());

    let retry = psp.charge("k", &visa(300)).await;
    assert_eq!(retry.status, StatusCode::CREATED);
    assert!(!retry.replayed, "the failed attempt stored nothing");
    assert_eq!(psp.charge("k", &visa(300)).await.bytes, retry.bytes);
    assert_eq!(psp.ledger().await.len(), 1);
}

/// `conflict` answers 409 idempotency_error, as Stripe answers a request
/// whose key another one is still using, without charging; the retry then
/// charges, once.
#[tokio::test]
async fn conflict_answers_409_charges_nothing_and_the_retry_charges_once() {
    let psp = Psp::start(&[]);
    set(&psp, r#"{"mode": "conflict"}"#).await;
    let busy = psp.charge("k", &visa(300)).await;
    assert_eq!(busy.status, StatusCode::CONFLICT);
    assert_error(&busy.json, "idempotency_error", "idempotency_key_in_use");
    assert!(psp.ledger().await.is_empty());
    let retry = psp.charge("k", &visa(300)).await;
    assert_eq!(retry.status, StatusCode::CREATED);
    assert!(!retry.replayed);
    assert_eq!(psp.ledger().await.len(), 1);
}

/// `drop-after-charge` commits the charge, then cuts the connection
/// without an answer; the retry replays the committed charge.
#[tokio::test]
async fn drop_after_charge_cuts_the_connection_and_the_retry_replays_the_charge() {
    let psp = Psp::start(&[]);
    set(&psp, r#"{"mode": "drop-after-charge"}"#).await;
    let dropped = psp.send_charge(Some("k"), visa(300).to_string()).await;
    let error = dropped.expect_err("no answer");
    assert!(!error.is_timeout(), "cut, not slow: {error}");

    let ledger = psp.ledger().await;
    assert_eq!(ledger.len(), 1, "the charge committed before the cut");
    let retry = psp.charge("k", &visa(300)).await;
    assert_eq!(retry.status, StatusCode::CREATED);
    assert!(retry.replayed);
    assert_eq!(retry.json["id"], ledger[0]["id"]);
    assert_eq!(psp.ledger().await.len(), 1);
}

/// `delay` holds a charge for at least `delay_ms`, then runs it as usual.
#[tokio::test]
async fn delay_holds_the_answer_for_at_least_delay_ms() {
    let psp = Psp::start(&[]);
    set(&psp, r#"{"mode": "delay", "delay_ms": 400}"#).await;
    let started = Instant::now();
    let reply = psp.charge("k", &visa(300)).await;
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(reply.status, StatusCode::CREATED);
    assert_eq!(psp.ledger().await.len(), 1);
}

/// `down` refuses at once with 503, before `--latency`, charging nothing.
#[tokio::test]
async fn down_refuses_at_once_with_503_and_charges_nothing() {
    let psp = Psp::start(&["--latency", "5s"]);
    set(&psp, r#"{"mode": "down", "count": 2}"#).await;
    for _ in 0..2 {
        let started = Instant::now();
        let reply = psp.charge("k", &visa(300)).await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "refused without waiting the latency"
        );
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_error(&reply.json, "api_error", "simulated_outage");
    }
    assert!(psp.ledger().await.is_empty());
}

/// `count` N applies to exactly N charge requests, whatever they are
/// (replays and refused requests included); listings and fault reads do
/// not count.
#[tokio::test]
async fn a_fault_applies_to_exactly_count_charge_requests() {
    let psp = Psp::start(&[]);
    assert_eq!(
        psp.charge("done", &visa(1)).await.status,
        StatusCode::CREATED
    );
    set(&psp, r#"{"mode": "fail", "count": 3}"#).await;
    psp.ledger().await;
    let shown = crate::helpers::client()
        .get(psp.url("/admin/faults"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(shown, r#"{"mode":"fail","count":3}"#);

    let replay = psp.charge("done", &visa(1)).await;
    let refused = psp.send_charge(None, visa(1).to_string()).await.unwrap();
    let new = psp.charge("new", &visa(1)).await;
    for reply in [&replay, &refused, &new] {
        assert_eq!(
            reply.status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{}",
            reply.json
        );
    }
    let after = psp.charge("new", &visa(1)).await;
    assert_eq!(after.status, StatusCode::CREATED, "the fourth runs");
    assert_eq!(psp.ledger().await.len(), 2);
}

/// `{"mode": "none"}` clears the pending fault.
#[tokio::test]
async fn none_clears_the_pending_fault() {
    let psp = Psp::start(&[]);
    set(&psp, r#"{"mode": "down", "count": 5}"#).await;
    set(&psp, r#"{"mode": "none"}"#).await;
    assert_eq!(psp.charge("k", &visa(1)).await.status, StatusCode::CREATED);
}

/// A new fault replaces the pending one, count included.
#[tokio::test]
async fn a_new_fault_replaces_the_pending_one() {
    let psp = Psp::start(&[]);
    set(&psp, r#"{"mode": "down", "count": 5}"#).await;
    set(&psp, r#"{"mode": "fail"}"#).await;
    assert_eq!(
        psp.charge("k", &visa(1)).await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(psp.charge("k", &visa(1)).await.status, StatusCode::CREATED);
}

/// A fault body that makes no sense is 400 invalid_request_error and
/// leaves the pending fault as it was.
#[tokio::test]
async fn a_bad_fault_body_is_400_and_changes_nothing() {
    let psp = Psp::start(&[]);
    set(&psp, r#"{"mode": "down"}"#).await;
    for bad in [
        "",
        "{",
        r#"{"mode": "explode"}"#,
        r#"{"count": 1}"#,
        r#"{"mode": "fail", "count": 0}"#,
        r#"{"mode": "fail", "delay_ms": 10}"#,
        r#"{"mode": "delay"}"#,
        r#"{"mode": "down", "colour": "red"}"#,
    ] {
        let (status, text) = psp.fault(bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        let body: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_error(&body, "invalid_request_error", "parameter_invalid");
    }
    assert_eq!(
        psp.charge("k", &visa(1)).await.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "the down fault is still pending"
    );
}
