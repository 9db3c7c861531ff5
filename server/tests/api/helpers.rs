//! Spawns the app the way `main` does, on port 0 with its own database.

use clap::Parser;
use reqwest::{header, Client, Response};
use serde_json::Value;
use server::{Application, Config};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Once;
use tempfile::TempDir;
use tokio::sync::oneshot;

static TRACING: Once = Once::new();

/// A running server and an HTTP client logged in as one caller.
pub(crate) struct TestApp {
    pub(crate) addr: SocketAddr,
    pub(crate) client: Client,
    pub(crate) token: String,
    /// Keeps the database folder alive as long as the app.
    _dir: TempDir,
    /// Where the app keeps its data.
    pub(crate) database: Database,
    stop: Option<oneshot::Sender<()>>,
}

/// A fresh random caller token.
pub(crate) fn new_token() -> String {
    format!("test-{}", uuid::Uuid::new_v4().simple())
}

/// A fresh random idempotency key.
pub(crate) fn new_key() -> String {
    uuid::Uuid::new_v4().to_string()
}

impl TestApp {
    /// The app with default flags and `extra` ones, on a fresh database.
    pub(crate) async fn spawn_with(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        Self::spawn_in(dir, extra).await
    }

    /// The app with default flags (plus `--chaos`), on a fresh database.
    pub(crate) async fn spawn() -> Self {
        Self::spawn_with(&["--chaos"]).await
    }

    /// The app on the database in `dir`.
    pub(crate) async fn spawn_in(dir: TempDir, extra: &[&str]) -> Self {
        TRACING.call_once(|| {
            if std::env::var("TEST_LOG").is_ok() {
                server::telemetry::init();
            }
        });
        let database = Database::fresh(&dir).await;
        let db = database.url();
        let www = dir.path().join("www");
        std::fs::create_dir_all(&www).unwrap();
        std::fs::write(www.join("index.html"), "<!doctype html><title>test</title>").unwrap();
        let www = www.display().to_string();
        let mut args = vec![
            "server",
            "--listen",
            "127.0.0.1:0",
            "--database",
            &db,
            "--durability",
            "relaxed",
            "--www",
            &www,
        ];
        args.extend_from_slice(extra);
        let config = Config::try_parse_from(&args).expect("valid test flags");
        let app = Application::build(config).await.expect("the app starts");
        let addr = app.local_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            client: Client::builder().build().unwrap(),
            token: new_token(),
            _dir: dir,
            database,
            stop: Some(stop),
        }
    }

    /// Runs SQL straight on the app's database, behind its back.
    pub(crate) async fn sql(&self, sqlite: &str, postgres: &str) {
        match &self.database {
            Database::Sqlite(path) => rusqlite::Connection::open(path)
                .unwrap()
                .execute_batch(sqlite)
                .unwrap(),
            Database::Postgres(url) => crate::common::connect(url)
                .await
                .batch_execute(postgres)
                .await
                .unwrap(),
        }
    }

    /// Counts rows straight in the app's database.
    pub(crate) async fn count(&self, table: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {table}");
        match &self.database {
            Database::Sqlite(path) => rusqlite::Connection::open(path)
                .unwrap()
                .query_row(&sql, [], |row| row.get(0))
                .unwrap(),
            Database::Postgres(url) => crate::common::connect(url)
                .await
                .query_one(&sql, &[])
                .await
                .unwrap()
                .get(0),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// `POST path` as this app's caller with `key` and a JSON body.
    pub(crate) async fn post(&self, path: &str, key: &str, body: &Value) -> Response {
        self.post_as(&self.token, path, key, body).await
    }

    pub(crate) async fn post_as(
        &self,
        token: &str,
        path: &str,
        key: &str,
        body: &Value,
    ) -> Response {
        self.post_raw(token, path, key, body.to_string(), &[]).await
    }

    /// A POST with a raw body and extra headers.
    pub(crate) async fn post_raw(
        &self,
        token: &str,
        path: &str,
        key: &str,
        body: impl Into<reqwest::Body>,
        extra: &[(&str, &str)],
    ) -> Response {
        let mut request = self
            .client
            .post(self.url(path))
            .bearer_auth(token)
            .header("Idempotency-Key", key)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body);
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        request.send().await.expect("request sent")
    }

    pub(crate) async fn charge(&self, key: &str, amount: i64) -> Response {
        self.post(
            "/charges",
            key,
            &serde_json::json!({"amount": amount, "currency": "usd"}),
        )
        .await
    }

    /// The caller's charges (all of them).
    pub(crate) async fn charges_of(&self, token: &str) -> Vec<Value> {
        crate::common::list_charges(&self.client, &self.url(""), token).await
    }

    pub(crate) async fn charges(&self) -> Vec<Value> {
        self.charges_of(&self.token).await
    }

    pub(crate) async fn available(&self, item: &str) -> i64 {
        let body: Value = self
            .client
            .get(self.url(&format!("/inventory/{item}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        body["available"].as_i64().expect("available")
    }

    pub(crate) async fn metrics(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub(crate) fn db_path(dir: &TempDir) -> PathBuf {
    dir.path().join("data").join("shop.db")
}

/// Reads a counter from the metrics text.
pub(crate) fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|line| line.starts_with(name) && line[name.len()..].starts_with(' '))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
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

/// The database a test app runs on: a fresh SQLite file, or, when
/// `TEST_POSTGRES_URL` names a PostgreSQL server (as `scripts/test.sh` does),
/// a fresh database on it. The same tests run on both backends.
pub(crate) enum Database {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Database {
    async fn fresh(dir: &TempDir) -> Self {
        match crate::common::fresh_postgres().await {
            Some(url) => Self::Postgres(url),
            None => Self::Sqlite(db_path(dir)),
        }
    }

    fn url(&self) -> String {
        match self {
            Self::Sqlite(path) => format!("sqlite://{}", path.display()),
            Self::Postgres(url) => url.clone(),
        }
    }
}
