//! Flags and their environment variables (flags win), and who may call the
//! API from another page (CORS).

use crate::helpers::{new_key, TestApp};
use reqwest::Method;
use std::time::Duration;
use testkit::Server;

/// A charge, then its retry after `wait`: whether the retry was a replay.
async fn replayed_after(app: &TestApp, wait: Duration) -> bool {
    let key = new_key();
    assert_eq!(app.charge(&key, 100).await.status(), 201);
    tokio::time::sleep(wait).await;
    let retry = app.charge(&key, 100).await;
    assert_eq!(retry.status(), 201);
    retry.headers().get("idempotent-replayed").is_some()
}

/// Every flag reads its environment variable: `KEY_TTL=1s` alone makes
/// records expire after a second, and `CHAOS=1` turns chaos mode on.
#[tokio::test]
async fn environment_variables_set_what_flags_set() {
    let app = TestApp::start(
        Server::builder()
            .env("KEY_TTL", "1s")
            .env("SWEEP_INTERVAL", "1h")
            .env("CHAOS", "1"),
    )
    .await;
    assert!(
        !replayed_after(&app, Duration::from_millis(1500)).await,
        "KEY_TTL=1s was not read"
    );
    let body = serde_json::json!({"amount": 100, "currency": "usd"});
    let dropped = app
        .charge_with_chaos(&new_key(), &body, "drop-after-commit")
        .await;
    assert!(dropped.is_err(), "CHAOS=1 was not read: {dropped:?}");
}

/// A flag wins over its environment variable: `KEY_TTL=1s` with
/// `--key-ttl 1h` keeps records for the hour.
#[tokio::test]
async fn flags_win_over_environment_variables() {
    let app = TestApp::start(
        Server::builder()
            .env("KEY_TTL", "1s")
            .env("CHAOS", "0")
            .flags(["--key-ttl", "1h"]),
    )
    .await;
    assert!(
        replayed_after(&app, Duration::from_millis(1500)).await,
        "the environment won over --key-ttl"
    );
}

/// `OPTIONS` preflight as a browser sends it from `origin`.
async fn preflight(app: &TestApp, origin: &str) -> reqwest::Response {
    app.server
        .http()
        .request(Method::OPTIONS, app.url("/charges"))
        .header("Origin", origin)
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "idempotency-key, authorization, content-type",
        )
        .send()
        .await
        .unwrap()
}

/// A keyed charge as a page at `origin` sends it.
async fn charge_from(app: &TestApp, origin: &str) -> reqwest::Response {
    app.server
        .bearer(&app.token)
        .keyed("/charges", &new_key())
        .header("Origin", origin)
        .json(&serde_json::json!({"amount": 100, "currency": "usd"}))
        .send()
        .await
        .unwrap()
}

/// With `--cors-origin` (or `CORS_ORIGINS`, a comma list), a listed origin
/// may send keyed requests and read the replay headers; an origin not
/// listed gets no `Access-Control-Allow-Origin`, on the preflight or the
/// answer, so its browser refuses the answer.
#[tokio::test]
async fn only_listed_origins_may_call_the_api_from_another_page() {
    let app = TestApp::start(
        Server::builder().env("CORS_ORIGINS", "http://shop.example,http://other.example"),
    )
    .await;
    for origin in ["http://shop.example", "http://other.example"] {
        let allowed = preflight(&app, origin).await;
        assert_eq!(allowed.headers()["access-control-allow-origin"], origin);
        let headers = allowed.headers()["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .to_ascii_lowercase();
        for needed in ["idempotency-key", "authorization", "content-type"] {
            assert!(headers.contains(needed), "{needed} in {headers}");
        }
    }
    let answer = charge_from(&app, "http://shop.example").await;
    let exposed = answer.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        exposed.contains("idempotent-replayed") && exposed.contains("retry-after"),
        "{exposed}"
    );

    let refused = preflight(&app, "http://evil.example").await;
    assert!(
        refused
            .headers()
            .get("access-control-allow-origin")
            .is_none(),
        "an origin not listed was allowed"
    );
    let answer = charge_from(&app, "http://evil.example").await;
    assert!(answer
        .headers()
        .get("access-control-allow-origin")
        .is_none());
}

/// A `--key-ttl` shorter than the browser client's default key life (a
/// day) while a provider is configured is warned of at start: a page
/// reloaded after the server forgot a key resumes it, and the card is
/// charged again. The default, and the same TTL without a provider, are
/// not warned of.
#[tokio::test]
async fn a_key_ttl_shorter_than_the_clients_key_life_is_warned_of_with_a_provider() {
    let warning = "--key-ttl is shorter than the browser client's default key life";
    let psp = testkit::Psp::start().unwrap();
    let short = TestApp::start(Server::builder().psp(&psp).flags(["--key-ttl", "1h"])).await;
    let default = TestApp::start(Server::builder().psp(&psp)).await;
    let local = TestApp::start(Server::builder().flags(["--key-ttl", "1h"])).await;
    assert!(
        short.server.log_text().contains(warning),
        "{}",
        short.server.log_text()
    );
    assert!(!default.server.log_text().contains(warning));
    assert!(!local.server.log_text().contains(warning));
}
