//! Shared by the test binaries: the `server` binary as a process, and fresh
//! databases on either backend.
#![allow(dead_code)] // each test binary uses its own part

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The `server` binary cargo built for these tests.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_server");

/// Starts `server ARGS` and reads its `listening on http://ADDR` line.
/// Returns the child and `http://ADDR`, or `None` if it did not start.
/// Its logs go to the test's stderr with `TEST_LOG` set.
// The child is handed to the caller, which waits for it.
#[allow(clippy::zombie_processes)]
pub(crate) fn spawn_server(args: &[&str]) -> Option<(Child, String)> {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(if std::env::var("TEST_LOG").is_ok() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .expect("spawn server");
    let mut line = String::new();
    // A failed read leaves the line empty: "did not start" below.
    let _ = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
    match line.trim().strip_prefix("listening on ") {
        Some(base) if base.starts_with("http://") => Some((child, base.to_owned())),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

/// The charges a caller sees at `base` (`http://ADDR`), newest first (up
/// to 1 000).
pub(crate) async fn list_charges(
    client: &reqwest::Client,
    base: &str,
    token: &str,
) -> Vec<serde_json::Value> {
    let body: serde_json::Value = client
        .get(format!("{base}/charges?limit=1000"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["data"].as_array().cloned().unwrap_or_default()
}

/// A client connected to the PostgreSQL server at `url`.
pub(crate) async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(connection);
    client
}

/// A new, empty database on the PostgreSQL server `TEST_POSTGRES_URL`
/// names, if it names one.
pub(crate) async fn fresh_postgres() -> Option<String> {
    let admin = std::env::var("TEST_POSTGRES_URL").ok()?;
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    connect(&admin)
        .await
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (server, _) = admin.rsplit_once('/').expect("a URL with a database name");
    Some(format!("{server}/{name}"))
}

/// A fresh database URL: a new PostgreSQL database when `TEST_POSTGRES_URL`
/// is set (the same tests then run on that backend), else a new SQLite
/// file under `dir`.
pub(crate) async fn fresh_database(dir: &Path) -> String {
    match fresh_postgres().await {
        Some(url) => url,
        None => format!("sqlite://{}", dir.join("data/shop.db").display()),
    }
}
