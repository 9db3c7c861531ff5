//! `GET /charges`, `/inventory`, `/healthz`, `/metrics`.

use crate::helpers::{assert_problem, new_key, TestApp};
use serde_json::Value;

/// The caller's charges come newest first, in pages.
#[tokio::test]
async fn charges_are_listed_newest_first_in_pages() {
    let app = TestApp::spawn().await;
    let mut ids = Vec::new();
    for amount in 1..=5 {
        let charge: Value = app.charge(&new_key(), amount).await.json().await.unwrap();
        ids.push(charge["id"].as_str().unwrap().to_owned());
    }
    ids.reverse();
    let page = |query: String| {
        let app = &app;
        async move {
            let r = app.get_as(&app.token, &format!("/charges{query}")).await;
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let all = page(String::new()).await;
    let listed: Vec<_> = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, ids);
    assert_eq!(all["has_more"], false);

    let first = page("?limit=2".into()).await;
    assert_eq!(first["data"].as_array().unwrap().len(), 2);
    assert_eq!(first["has_more"], true);
    let after = first["data"][1]["id"].as_str().unwrap();
    let second = page(format!("?limit=2&starting_after={after}")).await;
    assert_eq!(second["data"][0]["id"], ids[2].as_str());
    assert_eq!(second["has_more"], true);
    let last = page(format!("?limit=2&starting_after={}", ids[3])).await;
    assert_eq!(last["data"].as_array().unwrap().len(), 1);
    assert_eq!(last["has_more"], false);
}

/// Bad listing parameters are 400 problems.
#[tokio::test]
async fn bad_listing_parameters_are_refused() {
    let app = TestApp::spawn().await;
    for query in [
        "?limit=0",
        "?limit=1001",
        "?limit=ten",
        "?starting_after=nope",
    ] {
        let r = app.get_as(&app.token, &format!("/charges{query}")).await;
        assert_problem(r, 400, "invalid-request").await;
    }
    assert_problem(app.get("/charges").await, 401, "unauthorized").await;
}

/// A method no route takes is counted under one label, `_OTHER` (as the
/// OpenTelemetry conventions name it): a client sending made-up methods
/// cannot add series to `/metrics`, and memory to the server, without end.
#[tokio::test]
async fn made_up_methods_share_one_metrics_label() {
    let app = TestApp::spawn().await;
    let client = reqwest::Client::new();
    for method in ["FOO", "BAR", "BAZ"] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let response = client.request(method, app.url("/charges")).send().await;
        assert_eq!(response.unwrap().status(), 405);
    }
    let labels = [
        ("method", "_OTHER"),
        ("route", "/charges"),
        ("status", "405"),
    ];
    let series = "http_request_duration_seconds_count";
    assert_eq!(app.counter(series, &labels).await, 3.0);
    let text = app.server.metrics().await.unwrap();
    assert!(!text.text().contains("FOO"), "{}", text.text());
}

/// A fresh database holds the contract's inventory; unknown items are 404.
#[tokio::test]
async fn a_fresh_database_holds_the_seeded_inventory() {
    let app = TestApp::spawn().await;
    assert_eq!(app.available("sku-tee").await, 100);
    assert_eq!(app.available("sku-mug").await, 20);
    assert_eq!(app.available("sku-poster").await, 3);
    assert_problem(app.get("/inventory/sku-nothing").await, 404, "not-found").await;
}

/// Health and metrics answer.
#[tokio::test]
async fn healthz_is_200_and_metrics_count_decisions() {
    let app = TestApp::spawn().await;
    assert_eq!(app.get("/healthz").await.status(), 200);
    let key = new_key();
    app.charge(&key, 10).await;
    app.charge(&key, 10).await;
    assert_eq!(app.keyed_requests("executed").await, 1.0);
    assert_eq!(app.keyed_requests("replayed").await, 1.0);
    assert_eq!(app.keyed_requests("conflict").await, 0.0);
    assert_eq!(
        app.counter("idempotency_records_expired_total", &[]).await,
        0.0
    );
    let text = app.server.metrics().await.unwrap();
    let text = text.text();
    assert!(
        text.contains("http_request_duration_seconds_bucket"),
        "{text}"
    );
}
