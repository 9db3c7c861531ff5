//! One customer's HTTP calls to a running server: keyed POSTs and the
//! full list of its charges. Every reading fails loudly: a listing that
//! does not answer 200 with a `data` array is an error, never an empty
//! list, so "nothing was stored" cannot pass because the listing broke.

use anyhow::Result;
use reqwest::{header, Client, Method, RequestBuilder, Response};
use serde_json::Value;

/// How a caller proves who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer TOKEN`.
    Bearer(String),
    /// The `sid` cookie `GET /` sets, as a browser sends it.
    Session(String),
}

/// A customer of one server.
#[derive(Debug, Clone)]
pub struct Caller {
    http: Client,
    base: String,
    auth: Auth,
}

impl Caller {
    /// A caller of the server at `base` (`http://ADDR`).
    pub fn new(http: Client, base: impl Into<String>, auth: Auth) -> Self {
        Self {
            http,
            base: base.into(),
            auth,
        }
    }

    /// The same caller through another HTTP client (other timeouts, say).
    pub fn with_http(mut self, http: Client) -> Self {
        self.http = http;
        self
    }

    /// The bearer token or session id.
    pub fn token(&self) -> &str {
        match &self.auth {
            Auth::Bearer(token) | Auth::Session(token) => token,
        }
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request with this caller's credentials.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, self.url(path));
        match &self.auth {
            Auth::Bearer(token) => request.bearer_auth(token),
            Auth::Session(sid) => request.header(header::COOKIE, format!("sid={sid}")),
        }
    }

    /// `POST path` with credentials and `Idempotency-Key: key`, to finish
    /// with a body and any other headers.
    pub fn keyed(&self, path: &str, key: &str) -> RequestBuilder {
        self.request(Method::POST, path)
            .header("Idempotency-Key", key)
    }

    /// `POST path` with `key` and the JSON `body`.
    pub async fn post_keyed(
        &self,
        path: &str,
        key: &str,
        body: &Value,
    ) -> reqwest::Result<Response> {
        self.post_keyed_with(path, key, body, &[]).await
    }

    /// `POST /charges` with a new key and the JSON `body`.
    pub async fn charge(&self, body: &Value) -> reqwest::Result<Response> {
        self.post_keyed("/charges", &crate::new_key(), body).await
    }

    /// `POST path` with `key`, the JSON `body` and extra headers
    /// (`X-Chaos`, say).
    pub async fn post_keyed_with(
        &self,
        path: &str,
        key: &str,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> reqwest::Result<Response> {
        let mut request = self.keyed(path, key).json(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await
    }

    /// Every charge this caller has, newest first, following `has_more`
    /// pages. An error, with the body, when a page is not a 200 with a
    /// `data` array and a boolean `has_more`.
    pub async fn charges(&self) -> Result<Vec<Value>> {
        crate::http::all_pages("", "/charges?limit=1000", |path| {
            self.request(Method::GET, path)
        })
        .await
    }
}
