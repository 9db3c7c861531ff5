//! The real `server` process: port 0, a fresh SQLite database in a temp
//! folder, `--chaos` on. It can be waited on after `exit-after-commit` and
//! restarted on the same address and database.

use crate::paths;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a server may take to print its address.
const STARTUP: Duration = Duration::from_secs(30);

/// A running server process and the database folder it owns.
pub struct Server {
    child: Child,
    addr: SocketAddr,
    database: String,
    log: PathBuf,
    http: reqwest::Client,
    _data: TempDir,
}

impl Server {
    /// Starts a server on a free port with a fresh database; its stderr
    /// goes to `log`.
    pub async fn start(log: &Path) -> Result<Self> {
        let data = tempfile::Builder::new().prefix("e2e-shop-").tempdir()?;
        let database = format!("sqlite://{}", data.path().join("shop.db").display());
        let (child, addr) = spawn("127.0.0.1:0", &database, log).await?;
        Ok(Self {
            child,
            addr,
            database,
            log: log.to_path_buf(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()?,
            _data: data,
        })
    }

    /// `http://ADDR`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The file that holds the server's logs.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Waits for the process to exit on its own (`exit-after-commit`).
    pub async fn wait_for_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .map_err(|_| anyhow!("the server did not exit within {timeout:?}"))?
            .context("waiting for the server process")
    }

    /// Starts a new process on the same address and database, as an
    /// orchestrator would after a crash. The old one must have exited.
    pub async fn restart(&mut self) -> Result<()> {
        if self.child.try_wait()?.is_none() {
            bail!("restart: the old server process is still running");
        }
        let listen = self.addr.to_string();
        let mut last = None;
        // The port is free at once in practice; a few tries cover a slow release.
        for _ in 0..20 {
            match spawn(&listen, &self.database, &self.log).await {
                Ok((child, addr)) => {
                    self.child = child;
                    self.addr = addr;
                    return Ok(());
                }
                Err(e) => {
                    last = Some(e);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
        Err(last
            .unwrap_or_else(|| anyhow!("restart failed"))
            .context(format!("restarting the server on {listen}")))
    }

    /// `GET /charges` as the browser whose `sid` cookie is given: the
    /// charges the server holds for that caller, newest first.
    pub async fn charges_of_session(&self, sid: &str) -> Result<Vec<Value>> {
        let response = self
            .http
            .get(format!("{}/charges?limit=1000", self.url()))
            .header("Cookie", format!("sid={sid}"))
            .send()
            .await?;
        let status = response.status();
        let body: Value = response.json().await?;
        if status != reqwest::StatusCode::OK {
            bail!("GET /charges answered {status}: {body}");
        }
        let data = body["data"]
            .as_array()
            .ok_or_else(|| anyhow!("GET /charges without data: {body}"))?;
        Ok(data.clone())
    }

    /// `POST /reservations` as the caller with bearer `token`.
    pub async fn reserve(
        &self,
        token: &str,
        key: &str,
        item: &str,
        quantity: u32,
    ) -> Result<(u16, Value)> {
        let response = self
            .http
            .post(format!("{}/reservations", self.url()))
            .bearer_auth(token)
            .header("Idempotency-Key", key)
            .json(&serde_json::json!({ "item_id": item, "quantity": quantity }))
            .send()
            .await?;
        let status = response.status().as_u16();
        Ok((status, response.json().await?))
    }

    /// `idempotency_requests_total{outcome="OUTCOME"}` from `GET /metrics`:
    /// how many keyed requests this process `executed`, `replayed`, ….
    pub async fn keyed_requests(&self, outcome: &str) -> Result<u64> {
        let text = self
            .http
            .get(format!("{}/metrics", self.url()))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let series = format!("idempotency_requests_total{{outcome=\"{outcome}\"}} ");
        let line = text
            .lines()
            .find_map(|line| line.strip_prefix(&series))
            .ok_or_else(|| anyhow!("no {series:?} in GET /metrics"))?;
        Ok(line.trim().parse()?)
    }

    /// `GET /inventory/ITEM`: how many are left.
    pub async fn available(&self, item: &str) -> Result<i64> {
        let body: Value = self
            .http
            .get(format!("{}/inventory/{item}", self.url()))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        body["available"]
            .as_i64()
            .ok_or_else(|| anyhow!("no `available` in {body}"))
    }
}

/// Starts `server --listen LISTEN --database DATABASE` and reads the
/// address it prints.
async fn spawn(listen: &str, database: &str, log: &Path) -> Result<(Child, SocketAddr)> {
    let binary = paths::server_binary()?;
    let www = paths::www_dir()?;
    let stderr = File::options().create(true).append(true).open(log)?;
    let mut child = Command::new(&binary)
        .args([
            "--listen",
            listen,
            "--database",
            database,
            "--durability",
            "relaxed",
            "--chaos",
        ])
        .arg("--www")
        .arg(&www)
        // Plain text in the log files (RUST_LOG, when set, is inherited).
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(STARTUP, lines.next_line()).await;
    let line = match first {
        Ok(Ok(Some(line))) => line,
        Ok(Ok(None)) | Ok(Err(_)) => {
            let status = child.wait().await?;
            bail!(
                "the server exited ({status}) before listening; see {}",
                log.display()
            );
        }
        Err(_) => bail!(
            "the server printed nothing within {STARTUP:?}; see {}",
            log.display()
        ),
    };
    let addr = line
        .strip_prefix("listening on http://")
        .ok_or_else(|| anyhow!("unexpected first line from the server: {line:?}"))?
        .trim()
        .parse()
        .with_context(|| format!("parsing the address in {line:?}"))?;
    // Keep reading stdout so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, addr))
}
