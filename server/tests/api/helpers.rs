//! The app under test: the real `server` binary started by the test kit on
//! port 0 with a fresh database, and an HTTP client logged in as one
//! caller. One method per thing the tests do; each panics with the reason
//! when it cannot do it.

use reqwest::{header, Client, Response};
use serde_json::Value;
use std::net::SocketAddr;
use testkit::{Server, ServerBuilder};

pub(crate) use testkit::{new_key, new_token};

/// A running server and a caller of it.
pub(crate) struct TestApp {
    pub(crate) server: Server,
    pub(crate) addr: SocketAddr,
    pub(crate) client: Client,
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

    /// The app `builder` describes.
    pub(crate) async fn start(builder: ServerBuilder) -> Self {
        let server = builder.start().await.expect("the server starts");
        Self {
            addr: server.addr(),
            client: server.http().clone(),
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
    assert_eq!(response.status().as_u16(), status, "status");
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/problem+json",
        "content type"
    );
    let body: Value = response.json().await.expect("a JSON problem");
    assert!(
        body["type"]
            .as_str()
            .unwrap_or("")
            .ends_with(&format!("/{slug}")),
        "type {} should end in {slug}",
        body["type"]
    );
    assert_eq!(body["status"], status);
    assert!(
        body["title"].is_string() && body["detail"].is_string(),
        "{body}"
    );
    body
}
