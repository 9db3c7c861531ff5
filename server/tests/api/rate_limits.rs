//! CONTRACT section 7, `--caller-rate N`: requests a second per caller, a
//! token bucket with a burst of 2N; past it `429` `rate-limited` with
//! `Retry-After`, and nothing done; `0` turns it off. The probes are
//! exempt; a request without credentials counts against its address.

use crate::helpers::{assert_problem, assert_ran, new_key, new_token, TestApp};
use reqwest::{header, Response};
use serde_json::json;
use std::time::Duration;

/// The whole seconds of a 429's `Retry-After`.
fn retry_after(response: &Response) -> u64 {
    let value = response
        .headers()
        .get(header::RETRY_AFTER)
        .expect("a 429 says when to retry");
    value
        .to_str()
        .unwrap()
        .parse()
        .expect("Retry-After in seconds")
}

/// Sends `n` requests made by `send`, one after the other: the statuses.
async fn statuses<F, Fut>(n: usize, send: F) -> Vec<u16>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Response>,
{
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        statuses.push(send().await.status().as_u16());
    }
    statuses
}

/// A caller's burst of twice the rate is served; the next requests get
/// 429 `rate-limited` with a `Retry-After` of whole seconds, and a refused
/// checkout stores nothing (its key runs once the caller may go on);
/// another caller, and the probes, are not touched.
#[tokio::test]
async fn past_its_rate_a_caller_gets_429_with_retry_after_and_no_one_else_does() {
    let app = TestApp::spawn_with(&["--caller-rate", "5"]).await;
    let token = new_token();

    let sent = statuses(40, || app.get_as(&token, "/charges")).await;
    let served = sent.iter().filter(|s| **s == 200).count();
    assert!(
        (10..=12).contains(&served),
        "a burst of 10 and what refills meanwhile: {sent:?}"
    );
    assert!(sent[..10].iter().all(|s| *s == 200), "{sent:?}");
    assert!(sent.iter().all(|s| matches!(s, 200 | 429)), "{sent:?}");

    let key = new_key();
    let charge = json!({"amount": 1999, "currency": "usd"});
    let refused = app.post_as(&token, "/charges", &key, &charge).await;
    let wait = retry_after(&refused);
    assert!((1..=2).contains(&wait), "Retry-After {wait}");
    assert_problem(refused, 429, "rate-limited").await;

    let other = new_token();
    assert_eq!(app.get_as(&other, "/charges").await.status(), 200);
    let probes = statuses(30, || app.get("/healthz")).await;
    assert!(probes.iter().all(|s| *s == 200), "{probes:?}");
    let metrics = statuses(30, || app.get("/metrics")).await;
    assert!(metrics.iter().all(|s| *s == 200), "{metrics:?}");

    tokio::time::sleep(Duration::from_secs(wait)).await;
    let ran = app.post_as(&token, "/charges", &key, &charge).await;
    assert_ran(&ran, "the refused key stored nothing");
    assert_eq!(app.charges_of(&token).await.len(), 1);
}

/// Requests without credentials share their address's bucket.
#[tokio::test]
async fn requests_without_a_caller_count_against_their_address() {
    let app = TestApp::spawn_with(&["--caller-rate", "5"]).await;
    let sent = statuses(30, || app.get("/inventory/sku-tee")).await;
    assert!(sent.contains(&429), "{sent:?}");
    let served = sent.iter().filter(|s| **s == 200).count();
    assert!((10..=12).contains(&served), "{sent:?}");
}

/// `--caller-rate 0`: no limit at all.
#[tokio::test]
async fn a_caller_rate_of_zero_is_no_limit() {
    let app = TestApp::spawn_with(&["--caller-rate", "0"]).await;
    let token = new_token();
    let sent = statuses(300, || app.get_as(&token, "/charges")).await;
    assert!(sent.iter().all(|s| *s == 200), "{sent:?}");
}
