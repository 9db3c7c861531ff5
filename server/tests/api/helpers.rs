//! The app under test: the real `server` binary started by the test kit on
//! port 0 with a fresh database, and an HTTP client logged in as one
//! caller. One method per thing the tests do; each panics with the reason
//! when it cannot do it. One file though long: it is the suite's one
//! vocabulary (the app, the checkout with its provider, the assertions on
//! their answers), which every test module imports from.

use reqwest::{header, RequestBuilder, Response};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use testkit::{Fault, LedgerRow, Psp, Server, ServerBuilder};

pub(crate) use testkit::{new_key, new_token};

/// A running server and a caller of it.
pub(crate) struct TestApp {
    /// Its address and HTTP client are the server's.
    pub(crate) server: Server,
    pub(crate) token: String,
}

impl TestApp {
    /// The app with `--chaos`, on a fresh database.
    pub(crate) async fn spawn() -> Self {
        Self::spawn_with(&["--chaos"]).await
    }

    /// The app with exactly the flags `extra` on top of the kit's defaults.
    pub(crate) async fn spawn_with(extra: &[&str]) -> Self {
        Self::start(Server::builder().flags(extra)).await
    }

    /// The app with `--chaos`, its completer every second, charging
    /// `psp` at a path it does not serve: every charge is refused for
    /// good (404) and set aside for an operator.
    pub(crate) async fn with_wrong_provider_path(psp: &Psp) -> Self {
        Self::start(Server::builder().chaos().flags([
            "--psp-url",
            &psp.url("/wrong-path"),
            "--complete-interval",
            "1s",
        ]))
        .await
    }

    /// Its SQLite database file; `None` on PostgreSQL.
    pub(crate) fn sqlite_file(&self) -> Option<std::path::PathBuf> {
        self.server.database().sqlite_path().map(|p| p.to_owned())
    }

    /// The app `builder` describes.
    pub(crate) async fn start(builder: ServerBuilder) -> Self {
        let server = builder.start().await.expect("the server starts");
        Self {
            token: testkit::new_token(),
            server,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    /// `POST path` as this app's caller with `key` and a JSON body.
    pub(crate) async fn post(&self, path: &str, key: &str, body: &Value) -> Response {
        self.post_as(&self.token, path, key, body).await
    }

    /// `POST path` as the caller with bearer `token`.
    pub(crate) async fn post_as(
        &self,
        token: &str,
        path: &str,
        key: &str,
        body: &Value,
    ) -> Response {
        self.server
            .bearer(token)
            .post_keyed(path, key, body)
            .await
            .expect("request sent")
    }

    /// A keyed POST with a raw body (sent as JSON) and extra headers.
    pub(crate) async fn post_raw(
        &self,
        token: &str,
        path: &str,
        key: &str,
        body: impl Into<reqwest::Body>,
        extra: &[(&str, &str)],
    ) -> Response {
        let mut request = self
            .server
            .bearer(token)
            .keyed(path, key)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body);
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        request.send().await.expect("request sent")
    }

    /// `POST /charges` as this app's caller with `body` sent as it is, as
    /// JSON, and no `Idempotency-Key`: to add the key a test is about, or
    /// none, and send.
    pub(crate) fn charge_request(&self, body: impl Into<reqwest::Body>) -> RequestBuilder {
        self.server
            .http()
            .post(self.url("/charges"))
            .bearer_auth(&self.token)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
    }

    /// `POST /charges` as this app's caller with `key` and `body` sent as
    /// it is, as JSON.
    pub(crate) async fn charge_raw(&self, key: &str, body: impl Into<reqwest::Body>) -> Response {
        self.post_raw(&self.token, "/charges", key, body, &[]).await
    }

    /// `POST /charges` of `body` with `key` and `X-Chaos: chaos`; an error
    /// when no answer came (the chaos dropped the connection).
    pub(crate) async fn charge_with_chaos(
        &self,
        key: &str,
        body: &Value,
        chaos: &str,
    ) -> reqwest::Result<Response> {
        self.server
            .bearer(&self.token)
            .post_keyed_with("/charges", key, body, &[("X-Chaos", chaos)])
            .await
    }

    /// `GET path` with no credentials.
    pub(crate) async fn get(&self, path: &str) -> Response {
        self.server
            .http()
            .get(self.url(path))
            .send()
            .await
            .expect("request sent")
    }

    /// `GET path` as the caller with bearer `token`.
    pub(crate) async fn get_as(&self, token: &str, path: &str) -> Response {
        self.server
            .http()
            .get(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .expect("request sent")
    }

    /// `POST /charges` of `amount` usd with `key`.
    pub(crate) async fn charge(&self, key: &str, amount: i64) -> Response {
        self.post(
            "/charges",
            key,
            &serde_json::json!({"amount": amount, "currency": "usd"}),
        )
        .await
    }

    /// `POST /charges` of `amount` usd with `key` and a description.
    pub(crate) async fn charge_with_description(
        &self,
        key: &str,
        amount: i64,
        description: &str,
    ) -> Response {
        self.post(
            "/charges",
            key,
            &serde_json::json!({"amount": amount, "currency": "usd", "description": description}),
        )
        .await
    }

    /// The charges of the caller with bearer `token`, all pages.
    pub(crate) async fn charges_of(&self, token: &str) -> Vec<Value> {
        self.server
            .bearer(token)
            .charges()
            .await
            .unwrap_or_else(|e| panic!("listing the charges: {e:#}"))
    }

    /// This app's caller's charges, all pages.
    pub(crate) async fn charges(&self) -> Vec<Value> {
        self.charges_of(&self.token).await
    }

    /// How many of `item` are left.
    pub(crate) async fn available(&self, item: &str) -> i64 {
        self.server
            .available(item)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// The value of one series of `GET /metrics`; panics when it is absent.
    pub(crate) async fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.server
            .metrics()
            .await
            .and_then(|m| m.counter(name, labels))
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// `idempotency_requests_total{outcome=OUTCOME}`.
    pub(crate) async fn keyed_requests(&self, outcome: &str) -> f64 {
        self.counter("idempotency_requests_total", &[("outcome", outcome)])
            .await
    }

    /// Runs SQL straight on the app's database, behind its back.
    pub(crate) async fn sql(&self, sqlite: &str, postgres: &str) {
        self.server
            .database()
            .sql(sqlite, postgres)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Counts rows straight in the app's database.
    pub(crate) async fn count(&self, table: &str) -> i64 {
        self.server
            .database()
            .count(table)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// The keys' records in the app's database, not their tombstones.
    pub(crate) async fn records(&self) -> i64 {
        self.server
            .database()
            .records()
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Nothing was stored: the caller lists no charge, and the database
    /// holds no charge, no reservation and no key record.
    pub(crate) async fn assert_nothing_stored(&self) {
        assert_eq!(self.charges().await, Vec::<Value>::new(), "listed charges");
        for table in ["charges", "reservations", "idempotency_keys"] {
            assert_eq!(self.count(table).await, 0, "rows in {table}");
        }
    }
}

/// Asserts a problem+json answer of the given status and type slug.
pub(crate) async fn assert_problem(response: Response, status: u16, slug: &str) -> Value {
    assert_problem_to("the request", response, status, slug).await
}

/// The same, naming in each failure message `what` was sent.
pub(crate) async fn assert_problem_to(
    what: &str,
    response: Response,
    status: u16,
    slug: &str,
) -> Value {
    assert_eq!(response.status().as_u16(), status, "{what}: status");
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/problem+json",
        "{what}: content type"
    );
    let body: Value = response.json().await.expect("a JSON problem");
    assert!(
        body["type"]
            .as_str()
            .unwrap_or("")
            .ends_with(&format!("/{slug}")),
        "{what}: type {} should end in {slug}",
        body["type"]
    );
    assert_eq!(body["status"], status, "{what}");
    assert!(
        body["title"].is_string() && body["detail"].is_string(),
        "{what}: {body}"
    );
    body
}

/// Sends `body` to `path` with `key` twice and asserts a recorded
/// refusal: the problem `status` `slug`, not marked replayed, then the
/// same problem marked replayed. The problem.
pub(crate) async fn assert_recorded_problem(
    app: &TestApp,
    path: &str,
    key: &str,
    body: &Value,
    status: u16,
    slug: &str,
) -> Value {
    let first = app.post(path, key, body).await;
    assert!(
        first.headers().get("idempotent-replayed").is_none(),
        "the first answer is marked replayed"
    );
    let first = assert_problem(first, status, slug).await;
    let again = app.post(path, key, body).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(
        assert_problem(again, status, slug).await,
        first,
        "the replay is the first problem"
    );
    first
}

/// Asserts the answer of a request that ran now: 201 without
/// `Idempotent-Replayed`; `why` it must have run, if it was replayed.
#[track_caller]
pub(crate) fn assert_ran(response: &Response, why: &str) {
    assert_eq!(response.status(), 201, "{why}");
    assert!(
        response.headers().get("idempotent-replayed").is_none(),
        "{why}"
    );
}

/// An answer read whole: what the provider and receipt tests compare.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    /// It carried `Idempotent-Replayed: true`.
    pub(crate) replayed: bool,
    /// It carried `Retry-After`.
    pub(crate) retry_after: bool,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    pub(crate) async fn read(response: Response) -> Self {
        let headers = response.headers();
        Self {
            status: response.status().as_u16(),
            replayed: headers
                .get("idempotent-replayed")
                .is_some_and(|v| v == "true"),
            retry_after: headers.contains_key(header::RETRY_AFTER),
            body: response.bytes().await.expect("a body").to_vec(),
        }
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The problem type's last segment (`card-declined`).
    pub(crate) fn problem(&self) -> String {
        let body = self.json();
        let kind = body["type"].as_str().unwrap_or_default();
        kind.rsplit('/').next().unwrap_or_default().to_owned()
    }
}

/// A checkout that charges cards through its own payment provider
/// simulator (`--chaos --psp-url`, and `extra` flags).
pub(crate) struct Checkout {
    pub(crate) psp: Psp,
    pub(crate) app: TestApp,
}

impl Checkout {
    pub(crate) async fn start(extra: &[&str]) -> Self {
        Self::start_with(Server::builder().flags(extra)).await
    }

    /// The checkout `builder` describes, with `--chaos` and the provider.
    pub(crate) async fn start_with(builder: ServerBuilder) -> Self {
        let psp = Psp::start().expect("the payment provider simulator starts");
        let app = TestApp::start(builder.chaos().psp(&psp)).await;
        Self { psp, app }
    }

    /// `POST /charges` of `body` with `key` as the app's caller.
    pub(crate) async fn pay(&self, key: &str, body: &Value) -> Reply {
        Reply::read(self.app.post("/charges", key, body).await).await
    }

    /// The same with `X-Chaos: chaos`; `None` when no answer came.
    pub(crate) async fn pay_with_chaos(
        &self,
        key: &str,
        body: &Value,
        chaos: &str,
    ) -> Option<Reply> {
        let sent = self.app.charge_with_chaos(key, body, chaos).await.ok()?;
        Some(Reply::read(sent).await)
    }

    /// The same with an `exit-…` chaos value: no answer comes, and the
    /// server process exits with code 137.
    pub(crate) async fn pay_and_exit(&mut self, key: &str, body: &Value, chaos: &str) {
        let lost = self.pay_with_chaos(key, body, chaos).await;
        assert!(lost.is_none(), "no answer: {lost:?}");
        let exit = self
            .app
            .server
            .wait_for_exit(Duration::from_secs(10))
            .unwrap();
        assert_eq!(exit.code(), Some(137), "{exit}");
    }

    /// The provider's whole ledger.
    pub(crate) async fn ledger(&self) -> Vec<LedgerRow> {
        self.psp.ledger().await.unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Asserts that the provider's ledger holds one charge and that
    /// `reply` is a `201` charged through it; the charge.
    pub(crate) async fn assert_charged_once(&self, reply: &Reply) -> Value {
        let ledger = self.ledger().await;
        assert_eq!(ledger.len(), 1, "one charge in the ledger: {ledger:?}");
        assert_charged(reply, &ledger[0].id)
    }

    /// Asserts that `resumed`, a retry, resumed the operation whose charge
    /// was `pending`: that same charge, charged once, counted as resumed by
    /// a retry, and the only one listed.
    pub(crate) async fn assert_resumed_by_retry(&self, resumed: &Reply, pending: &Value) {
        let charge = self.assert_charged_once(resumed).await;
        assert!(!resumed.replayed, "it ran now");
        assert_eq!(
            charge["id"], pending["id"],
            "the same charge, not a new one"
        );
        assert_eq!(self.resumed("retry").await, 1.0);
        assert_eq!(self.app.charges().await, vec![charge]);
    }

    /// Sets a provider fault for the next `count` charge requests.
    pub(crate) async fn fault(&self, fault: Fault, count: u32) {
        self.psp
            .fault(fault, count)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// `provider_calls_total{outcome=OUTCOME}`.
    pub(crate) async fn provider_calls(&self, outcome: &str) -> f64 {
        self.app
            .counter("provider_calls_total", &[("outcome", outcome)])
            .await
    }

    /// `operations_resumed_total{by=BY}`.
    pub(crate) async fn resumed(&self, by: &str) -> f64 {
        self.app
            .counter("operations_resumed_total", &[("by", by)])
            .await
    }
}

/// A charge of `amount` usd on `card`.
pub(crate) fn paying(amount: i64, card: &str) -> Value {
    json!({"amount": amount, "currency": "usd", "payment_method": card})
}

/// A charge of `amount` usd on the test Visa card (the default card).
pub(crate) fn visa(amount: i64) -> Value {
    json!({"amount": amount, "currency": "usd"})
}

/// The test card that always declines.
pub(crate) const DECLINED: &str = "pm_card_chargeDeclined";

/// Asserts a `201` whose charge succeeded through the provider's charge
/// `provider_charge`; the charge.
pub(crate) fn assert_charged(reply: &Reply, provider_charge: &str) -> Value {
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
pub(crate) fn assert_refused(reply: &Reply, status: u16, slug: &str) {
    assert_eq!(
        (reply.status, reply.problem().as_str()),
        (status, slug),
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
}

/// Polls the app's charges until `done` holds for them (at most `timeout`).
pub(crate) async fn charges_until(
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
pub(crate) async fn pay_until_free(shop: &Checkout, key: &str, body: &Value) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let reply = shop.pay(key, body).await;
        if reply.status != 409 {
            return reply;
        }
        assert_refused(&reply, 409, "idempotency-key-in-use");
        assert!(reply.retry_after, "409 in use without Retry-After");
        assert!(Instant::now() < deadline, "the key stayed in use");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
