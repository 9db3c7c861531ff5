//! The two processes outside the shop that the provider stories need: the
//! payment provider simulator (`psp`, its ledger read whole) and MailDev
//! (the SMTP server receipts go to, its messages read over HTTP).
//!
//! The minimum these stories use. The test kit of branch provider-tests
//! has fuller `testkit::{Psp, MailDev}` with the same names; once it is on
//! main this file gives way to them.

use crate::paths;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::fs::File;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use testkit::{Binary, Launch, Process};

/// How long one HTTP call to either may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// The payment provider simulator on a fresh ledger. SIGKILL on drop.
pub struct Psp {
    process: Process,
    http: reqwest::Client,
    _dir: TempDir,
}

/// One charge in the provider's ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRow {
    /// `pch_…`
    pub id: String,
    /// Minor units.
    pub amount: i64,
}

impl Psp {
    /// The `psp` binary (`PSP_BIN` overrides).
    const BINARY: Binary = Binary::new("psp", "psp", "PSP_BIN");

    /// A simulator that takes `latency` over every charge, logging to `log`.
    pub fn start(latency: Duration, log: PathBuf) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("e2e-psp-").tempdir()?;
        let database = format!("sqlite://{}", dir.path().join("psp.db").display());
        let process = Launch::new(Self::BINARY)
            .env_remove("PSP_LISTEN")
            .env_remove("PSP_DATABASE_URL")
            .env_remove("PSP_LATENCY")
            .env("NO_COLOR", "1")
            .args(["--database", &database])
            .arg("--latency")
            .arg(format!("{}ms", latency.as_millis()))
            .log(log)
            .start()?;
        Ok(Self {
            process,
            http: reqwest::Client::builder().timeout(HTTP_TIMEOUT).build()?,
            _dir: dir,
        })
    }

    /// `http://ADDR`, for `--psp-url`.
    pub fn base_url(&self) -> String {
        self.process.base_url()
    }

    /// Every charge the provider made (at most 1000: a story makes a few).
    pub async fn ledger(&self) -> Result<Vec<LedgerRow>> {
        let url = self.process.url("/v1/charges?limit=1000");
        let page: Value = get_json(&self.http, &url).await?;
        let rows = page["data"]
            .as_array()
            .ok_or_else(|| anyhow!("psp: GET {url}: no `data` in {page}"))?;
        rows.iter()
            .map(|row| match (row["id"].as_str(), row["amount"].as_i64()) {
                (Some(id), Some(amount)) => Ok(LedgerRow {
                    id: id.to_owned(),
                    amount,
                }),
                _ => Err(anyhow!("psp: a ledger row without id or amount: {row}")),
            })
            .collect()
    }
}

/// One message MailDev received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email {
    /// The `Message-ID` header, with its angle brackets.
    pub message_id: String,
    /// The envelope's recipients.
    pub to: Vec<String>,
}

/// MailDev on free ports of 127.0.0.1 with its own mail folder. SIGKILL
/// on drop.
pub struct MailDev {
    child: Child,
    smtp_port: u16,
    web_port: u16,
    http: reqwest::Client,
    _dir: TempDir,
}

impl MailDev {
    /// Starts MailDev (`MAILDEV_BIN`, else the one `scripts/maildev.sh`
    /// puts in `.tools/`) and waits until both ports answer; its output is
    /// appended to `log`.
    pub async fn start(log: PathBuf) -> Result<Self> {
        let bin = std::env::var_os("MAILDEV_BIN")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| paths::workspace().join(".tools/node_modules/.bin/maildev"));
        if !bin.is_file() {
            bail!(
                "MailDev is missing at {}: scripts/test-e2e.sh installs it, or set MAILDEV_BIN",
                bin.display()
            );
        }
        let dir = tempfile::Builder::new().prefix("e2e-maildev-").tempdir()?;
        let (smtp_port, web_port) = (free_port()?, free_port()?);
        let output = File::options().create(true).append(true).open(&log)?;
        let child = Command::new(&bin)
            .args([
                "--smtp",
                &smtp_port.to_string(),
                "--web",
                &web_port.to_string(),
            ])
            .args(["--ip", "127.0.0.1", "--web-ip", "127.0.0.1"])
            .arg("--mail-directory")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut maildev = Self {
            child,
            smtp_port,
            web_port,
            http: reqwest::Client::builder().timeout(HTTP_TIMEOUT).build()?,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = maildev.child.try_wait()? {
                bail!(
                    "maildev exited ({status}) before it listened; see {}",
                    log.display()
                );
            }
            let smtp = TcpStream::connect(("127.0.0.1", smtp_port)).is_ok();
            if smtp && maildev.emails().await.is_ok() {
                return Ok(maildev);
            }
            if Instant::now() >= deadline {
                bail!("maildev did not answer within 30 s; see {}", log.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `smtp://127.0.0.1:PORT`, for `--smtp-url`.
    pub fn smtp_url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.smtp_port)
    }

    /// The web inbox, `http://127.0.0.1:PORT/`.
    pub fn web_url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.web_port)
    }

    /// Every message received so far.
    pub async fn emails(&self) -> Result<Vec<Email>> {
        let url = format!("{}api/email", self.web_url());
        let all: Value = get_json(&self.http, &url).await?;
        all.as_array()
            .ok_or_else(|| anyhow!("maildev: GET {url} answered no array: {all}"))?
            .iter()
            .map(|m| {
                let message_id = m["headers"]["message-id"].as_str();
                let to = m["envelope"]["to"].as_array().map(|to| {
                    to.iter()
                        .filter_map(|r| r["address"].as_str().map(str::to_owned))
                        .collect()
                });
                match (message_id, to) {
                    (Some(id), Some(to)) => Ok(Email {
                        message_id: id.to_owned(),
                        to,
                    }),
                    _ => Err(anyhow!(
                        "maildev: a message without Message-ID or envelope: {m}"
                    )),
                }
            })
            .collect()
    }
}

impl Drop for MailDev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value> {
    let response = http
        .get(url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = response.status();
    let text = response.text().await?;
    if !status.is_success() {
        bail!("GET {url} answered {status}: {text}");
    }
    serde_json::from_str(&text).with_context(|| format!("GET {url} answered {text}"))
}
