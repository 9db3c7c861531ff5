//! Charges, declines, refused requests and the ledger.

use crate::helpers::{assert_error, visa, visa_for_order, Psp};
use reqwest::{Method, StatusCode};
use serde_json::json;

/// A success answers 201 with the charge and puts exactly it in the ledger.
#[tokio::test]
async fn a_charge_is_created_and_listed() {
    let psp = Psp::start(&[]);
    let body = visa_for_order(1999, "42");
    let reply = psp.charge("order-42", &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json);
    assert!(!reply.replayed, "a first answer is no replay");
    let charge = &reply.json;
    let id = charge["id"].as_str().unwrap();
    assert!(id.starts_with("pch_") && id.len() == 36, "{id}");
    assert_eq!(charge["amount"], 1999);
    assert_eq!(charge["currency"], "usd");
    assert_eq!(charge["status"], "succeeded");
    assert_eq!(charge["metadata"], json!({"order": "42"}));

    let ledger = psp.ledger().await;
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0]["id"], id);
    assert_eq!(ledger[0]["amount"], 1999);
    assert_eq!(ledger[0]["currency"], "usd");
    assert_eq!(ledger[0]["idempotency_key"], "order-42");
    assert_eq!(ledger[0]["created"], charge["created"]);

    let mastercard =
        json!({"amount": 5, "currency": "eur", "payment_method": "pm_card_mastercard"});
    assert_eq!(
        psp.charge("mc", &mastercard).await.status,
        StatusCode::CREATED
    );
    assert_eq!(psp.ledger().await.len(), 2);
}

/// A declined card answers 402 card_error card_declined, replays that
/// answer, and never reaches the ledger.
#[tokio::test]
async fn a_decline_is_a_stored_402_and_absent_from_the_ledger() {
    let psp = Psp::start(&[]);
    let body =
        json!({"amount": 1999, "currency": "usd", "payment_method": "pm_card_chargeDeclined"});
    let first = psp.charge("declined", &body).await;
    assert_eq!(first.status, StatusCode::PAYMENT_REQUIRED);
    assert_error(&first.json, "card_error", "card_declined");
    assert_eq!(first.json["error"]["decline_code"], "generic_decline");
    assert!(!first.replayed);

    let again = psp.charge("declined", &body).await;
    assert_eq!(again.status, StatusCode::PAYMENT_REQUIRED);
    assert!(again.replayed, "a decline is stored and replayed");
    assert_eq!(again.bytes, first.bytes);

    let poor = json!({"amount": 1999, "currency": "usd",
                      "payment_method": "pm_card_chargeDeclinedInsufficientFunds"});
    let reply = psp.charge("poor", &poor).await;
    assert_eq!(reply.status, StatusCode::PAYMENT_REQUIRED);
    assert_error(&reply.json, "card_error", "card_declined");
    assert_eq!(reply.json["error"]["decline_code"], "insufficient_funds");

    assert!(psp.ledger().await.is_empty(), "declines charge nothing");
}

/// Requests refused before they run (no key, bad JSON, an unknown field,
/// card or amount: 400 invalid_request_error; a body over 64 KiB: 413)
/// store nothing: the same key then charges with a corrected request.
#[tokio::test]
async fn refused_requests_store_nothing_and_the_key_then_works() {
    let psp = Psp::start(&[]);
    let missing = psp.send_charge(None, visa(100).to_string()).await.unwrap();
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_error(
        &missing.json,
        "invalid_request_error",
        "idempotency_key_missing",
    );

    let bad_key = psp
        .send_charge(Some("with space"), visa(100).to_string())
        .await
        .unwrap();
    assert_eq!(bad_key.status, StatusCode::BAD_REQUEST);
    assert_error(
        &bad_key.json,
        "invalid_request_error",
        "idempotency_key_invalid",
    );

    let key = Some("fix-me");
    for (body, code, param) in [
        (r#"{"amount": 100, "currency": "usd""#.to_owned(), "invalid_request_body", None),
        (
            json!({"amount": 100, "currency": "usd", "payment_method": "pm_card_amex"}).to_string(),
            "resource_missing",
            Some("payment_method"),
        ),
        (
            json!({"amount": 100, "currency": "usd", "payment_method": "pm_card_visa", "customer": "x"})
                .to_string(),
            "parameter_unknown",
            Some("customer"),
        ),
        (
            json!({"amount": 0, "currency": "usd", "payment_method": "pm_card_visa"}).to_string(),
            "amount_too_small",
            Some("amount"),
        ),
        (
            json!({"currency": "usd", "payment_method": "pm_card_visa"}).to_string(),
            "parameter_missing",
            Some("amount"),
        ),
    ] {
        let reply = psp.send_charge(key, body.clone()).await.unwrap();
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
        assert_error(&reply.json, "invalid_request_error", code);
        assert_eq!(reply.json["error"]["param"].as_str(), param, "{body}");
        assert!(!reply.replayed);
    }
    let huge = json!({"amount": 100, "currency": "usd", "payment_method": "pm_card_visa",
                      "metadata": {"note": "x".repeat(70_000)}});
    let too_large = psp.send_charge(key, huge.to_string()).await.unwrap();
    assert_eq!(too_large.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_error(
        &too_large.json,
        "invalid_request_error",
        "payload_too_large",
    );
    assert!(psp.ledger().await.is_empty());

    let fixed = psp.charge("fix-me", &visa(100)).await;
    assert_eq!(fixed.status, StatusCode::CREATED, "{}", fixed.json);
    assert!(
        !fixed.replayed,
        "nothing was stored for the refused requests"
    );
    assert_eq!(psp.ledger().await.len(), 1);
}

/// The ledger pages newest first: `limit` cuts a page, `has_more` says
/// whether older charges follow, `starting_after` continues after an id.
#[tokio::test]
async fn the_ledger_pages_newest_first() {
    let psp = Psp::start(&[]);
    let mut ids = Vec::new();
    for i in 1..=5 {
        let reply = psp.charge(&format!("k{i}"), &visa(i)).await;
        ids.push(reply.json["id"].as_str().unwrap().to_owned());
    }
    ids.reverse(); // newest first

    let page_ids = |body: &serde_json::Value| -> Vec<String> {
        body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (status, all) = psp.list("").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page_ids(&all), ids, "default limit, newest first");
    assert_eq!(all["has_more"], false);
    assert_eq!(all["data"][0]["amount"], 5);

    let (_, first) = psp.list("limit=2").await;
    assert_eq!(page_ids(&first), ids[0..2]);
    assert_eq!(first["has_more"], true);
    let (_, second) = psp
        .list(&format!("limit=2&starting_after={}", ids[1]))
        .await;
    assert_eq!(page_ids(&second), ids[2..4]);
    assert_eq!(second["has_more"], true);
    let (_, last) = psp
        .list(&format!("limit=2&starting_after={}", ids[3]))
        .await;
    assert_eq!(page_ids(&last), ids[4..5]);
    assert_eq!(last["has_more"], false);
    let (_, exact) = psp.list("limit=5").await;
    assert_eq!(
        exact["has_more"], false,
        "no more when the page ends the ledger"
    );

    for bad in [
        "limit=0",
        "limit=1001",
        "limit=x",
        "starting_after=ch_1",
        "color=red",
    ] {
        let (status, body) = psp.list(bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert_error(&body, "invalid_request_error", "parameter_invalid");
    }
    let (status, _) = psp.list("limit=1000").await;
    assert_eq!(status, StatusCode::OK);
}

/// Unknown paths and methods answer in Stripe's error shape.
#[tokio::test]
async fn unknown_paths_and_methods_answer_in_stripes_shape() {
    let psp = Psp::start(&[]);
    let client = crate::helpers::client();
    for (method, path, status, code) in [
        (
            Method::GET,
            "/v1/refunds",
            StatusCode::NOT_FOUND,
            "resource_missing",
        ),
        (
            Method::DELETE,
            "/v1/charges",
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
    ] {
        let request = client.request(method.clone(), psp.url(path));
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), status, "{method} {path}");
        let body = response.json().await.unwrap();
        assert_error(&body, "invalid_request_error", code);
    }
}
