//! The `psp` binary as a process on a fresh database, with one method per
//! endpoint.

use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The `psp` binary cargo built for these tests.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_psp");

/// A running simulator. Killed (SIGKILL) when dropped.
pub(crate) struct Psp {
    child: Child,
    stdout: BufReader<ChildStdout>,
    /// `http://ADDR`.
    pub(crate) base: String,
    /// The database file.
    pub(crate) db: PathBuf,
    client: Client,
    /// Keeps the temporary folder of [`Psp::start`] alive.
    _dir: Option<TempDir>,
}

/// One answer to a charge request.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    /// Whether it carried `Idempotent-Replayed: true`.
    pub(crate) replayed: bool,
    /// The body as sent.
    pub(crate) bytes: Vec<u8>,
    /// The body, parsed.
    pub(crate) json: Value,
}

/// A charge body for `amount` on the test Visa card.
pub(crate) fn visa(amount: i64) -> Value {
    json!({"amount": amount, "currency": "usd", "payment_method": "pm_card_visa"})
}

/// The same, for the order `order` (`"metadata": {"order": order}`).
pub(crate) fn visa_for_order(amount: i64, order: &str) -> Value {
    let mut body = visa(amount);
    body["metadata"] = json!({ "order": order });
    body
}

/// A client that opens a new connection per request (a dropped connection
/// then concerns one request only) and never waits forever.
pub(crate) fn client() -> Client {
    Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

impl Psp {
    /// Starts `psp` on port 0 with a fresh database and `extra` flags.
    pub(crate) fn start(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut psp = Self::start_on(&dir.path().join("data/psp.db"), extra);
        psp._dir = Some(dir);
        psp
    }

    /// Starts `psp` on port 0 with the database at `db` and `extra` flags.
    pub(crate) fn start_on(db: &Path, extra: &[&str]) -> Self {
        let database = format!("sqlite://{}", db.display());
        let mut args = vec!["--listen", "127.0.0.1:0", "--database", &database];
        args.extend_from_slice(extra);
        let mut child = command(&args).spawn().expect("spawn psp");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        let Some(base) = line.trim_end().strip_prefix("listening on ") else {
            let _ = child.kill();
            panic!("psp did not start: {line:?}");
        };
        Self {
            base: base.to_owned(),
            child,
            stdout,
            db: db.to_owned(),
            client: client(),
            _dir: None,
        }
    }

    /// `http://ADDR/path`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `POST /v1/charges` with `key` and `body`.
    pub(crate) async fn charge(&self, key: &str, body: &Value) -> Reply {
        self.send_charge(Some(key), body.to_string())
            .await
            .expect("an answer")
    }

    /// `POST /v1/charges` with an optional key and a raw body.
    pub(crate) async fn send_charge(
        &self,
        key: Option<&str>,
        body: String,
    ) -> reqwest::Result<Reply> {
        let mut request = self
            .client
            .post(self.url("/v1/charges"))
            .header("content-type", "application/json")
            .body(body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        let response = request.send().await?;
        let status = response.status();
        let replayed = match response.headers().get("idempotent-replayed") {
            None => false,
            Some(v) if v == "true" => true,
            Some(v) => panic!("Idempotent-Replayed: {v:?}"),
        };
        let bytes = response.bytes().await?.to_vec();
        let json = serde_json::from_slice(&bytes).expect("a JSON body");
        Ok(Reply {
            status,
            replayed,
            bytes,
            json,
        })
    }

    /// `GET /v1/charges?QUERY`: status and body.
    pub(crate) async fn list(&self, query: &str) -> (StatusCode, Value) {
        let response = self
            .client
            .get(self.url(&format!("/v1/charges?{query}")))
            .send()
            .await
            .unwrap();
        (response.status(), response.json().await.unwrap())
    }

    /// The whole ledger (up to 1 000 charges), newest first.
    pub(crate) async fn ledger(&self) -> Vec<Value> {
        let (status, body) = self.list("limit=1000").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["has_more"], false);
        body["data"].as_array().unwrap().clone()
    }

    /// `POST /admin/faults` with `body`: status and body text.
    pub(crate) async fn fault(&self, body: &str) -> (StatusCode, String) {
        let response = self
            .client
            .post(self.url("/admin/faults"))
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        (response.status(), response.text().await.unwrap())
    }

    /// Sends `signal` (a name such as `TERM`) to the process.
    pub(crate) fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal}");
    }

    /// Waits up to `timeout` for the process to exit; returns its status
    /// and what it wrote on stdout after the `listening on` line.
    pub(crate) fn wait(&mut self, timeout: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "psp did not exit");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        (status, rest)
    }

    /// SIGKILL, as a crash would.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Psp {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `psp ARGS` with stdout piped; stderr shown only with `TEST_LOG` set.
pub(crate) fn command(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("PSP_LISTEN")
        .env_remove("PSP_DATABASE_URL")
        .env_remove("PSP_LATENCY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(if std::env::var_os("TEST_LOG").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
    command
}

/// Asserts an error body's `type` and `code`.
#[track_caller]
pub(crate) fn assert_error(body: &Value, kind: &str, code: &str) {
    assert_eq!(body["error"]["type"], kind, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
}
