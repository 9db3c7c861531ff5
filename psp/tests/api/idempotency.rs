//! One charge per key: replays, reused keys, and concurrent duplicates.

use crate::helpers::{assert_error, visa, visa_for_order, Psp, Reply};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

/// The same key with the same parameters (spelled in another order) gets
/// the stored answer byte for byte, marked `Idempotent-Replayed: true`,
/// and charges nothing more.
#[tokio::test]
async fn the_same_key_and_parameters_replay_the_same_bytes_without_a_second_charge() {
    let psp = Psp::start(&[]);
    let first = psp
        .send_charge(
            Some("k"),
            r#"{"amount":700,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":"1","b":"2"}}"#.into(),
        )
        .await
        .unwrap();
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed);
    let again = psp
        .send_charge(
            Some("k"),
            r#"{ "metadata": {"b": "2", "a": "1"}, "payment_method": "pm_card_visa", "currency": "usd", "amount": 700 }"#.into(),
        )
        .await
        .unwrap();
    assert_eq!(again.status, StatusCode::CREATED);
    assert!(again.replayed);
    assert_eq!(again.bytes, first.bytes, "the stored answer, byte for byte");
    assert_eq!(psp.ledger().await.len(), 1, "no second ledger row");
}

/// The same key with another amount, card or metadata is a 400
/// idempotency_error; nothing runs, and the first request still replays.
#[tokio::test]
async fn the_same_key_with_other_parameters_is_an_idempotency_error() {
    let psp = Psp::start(&[]);
    let body = visa_for_order(700, "1");
    let first = psp.charge("k", &body).await;
    assert_eq!(first.status, StatusCode::CREATED);
    for (field, value) in [
        ("amount", json!(701)),
        ("currency", json!("eur")),
        ("payment_method", json!("pm_card_mastercard")),
        ("payment_method", json!("pm_card_chargeDeclined")),
        ("metadata", json!({"order": "2"})),
        ("metadata", json!({})),
    ] {
        let mut other = body.clone();
        other[field] = value;
        let reply = psp.charge("k", &other).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{other}");
        assert_error(&reply.json, "idempotency_error", "idempotency_key_reused");
        assert!(!reply.replayed);
    }
    let again = psp.charge("k", &body).await;
    assert!(again.replayed);
    assert_eq!(again.bytes, first.bytes);
    assert_eq!(psp.ledger().await.len(), 1);
}

/// Fifty requests sent at once with one key make exactly one charge, and
/// every one of them gets the same answer.
#[tokio::test]
async fn fifty_concurrent_requests_with_one_key_charge_once_and_agree() {
    let psp = Arc::new(Psp::start(&[]));
    let replies = charges_at_once(&psp, 50, |_| ("together".into(), visa(4200))).await;
    let first = &replies[0];
    assert_eq!(first.status, StatusCode::CREATED);
    for reply in &replies {
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json);
        assert_eq!(reply.bytes, first.bytes, "every answer is the one charge");
    }
    assert_eq!(
        replies.iter().filter(|r| !r.replayed).count(),
        1,
        "one request ran, the others replayed"
    );
    assert_eq!(psp.ledger().await.len(), 1);
}

/// Fifty requests sent at once with fifty keys make fifty charges.
#[tokio::test]
async fn fifty_concurrent_requests_with_different_keys_make_fifty_charges() {
    let psp = Arc::new(Psp::start(&[]));
    let replies = charges_at_once(&psp, 50, |i| (format!("key-{i}"), visa(100 + i as i64))).await;
    assert!(replies
        .iter()
        .all(|r| r.status == StatusCode::CREATED && !r.replayed));
    // One row per key, each with its own request's amount: the ledger's
    // key column is not unique, so a key charged twice would be two rows.
    let mut charged: Vec<(String, i64)> = psp
        .ledger()
        .await
        .iter()
        .map(|c| {
            let key = c["idempotency_key"].as_str().unwrap().to_owned();
            (key, c["amount"].as_i64().unwrap())
        })
        .collect();
    charged.sort();
    let mut expected: Vec<(String, i64)> = (0..50).map(|i| (format!("key-{i}"), 100 + i)).collect();
    expected.sort();
    assert_eq!(charged, expected, "one charge per key, with its amount");
}

/// `n` charge requests sent at once, the `i`th with the key and body
/// `request(i)`; their replies, in that order.
async fn charges_at_once(
    psp: &Arc<Psp>,
    n: usize,
    request: impl Fn(usize) -> (String, Value),
) -> Vec<Reply> {
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (psp, (key, body)) = (psp.clone(), request(i));
            tokio::spawn(async move { psp.charge(&key, &body).await })
        })
        .collect();
    let mut replies = Vec::with_capacity(n);
    for handle in handles {
        replies.push(handle.await.unwrap());
    }
    replies
}
