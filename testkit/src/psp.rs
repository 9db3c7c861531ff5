//! The payment provider simulator (`psp`, docs/PSP.md) as a [`Process`]:
//! a fresh SQLite ledger in a temporary folder, `--latency` if asked, and
//! the two things a test of the checkout reads or does to it: the whole
//! ledger, and a fault for the next charge requests.
//!
//! `cargo test -p server` does not build another package's binary: build
//! it first with `cargo build -p psp` (`scripts/test.sh` does), or point
//! `PSP_BIN` at one.

use crate::binary::Binary;
use crate::process::{Launch, Process};
use anyhow::{anyhow, bail, Context, Result};
use reqwest::Client;
use serde_json::{json, Value};
use std::time::Duration;
use tempfile::TempDir;

/// What the next charge requests do (`POST /admin/faults`): the
/// provider's own type, so the test kit sends exactly what it parses.
pub use simulator::faults::Fault;
use simulator::faults::FaultRequest;

/// One row of the provider's ledger: a charge it made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRow {
    /// `pch_…`
    pub id: String,
    /// Minor units.
    pub amount: i64,
    /// Currency code.
    pub currency: String,
    /// The `Idempotency-Key` the charge was made under.
    pub idempotency_key: String,
}

/// A running simulator on a fresh ledger. SIGKILL on drop.
#[derive(Debug)]
pub struct Psp {
    process: Process,
    http: Client,
    _dir: TempDir,
}

impl Psp {
    /// The `psp` binary (`PSP_BIN` overrides).
    pub const BINARY: Binary = Binary::new("psp", "psp", "PSP_BIN");

    /// A simulator with no latency.
    pub fn start() -> Result<Self> {
        Self::with_latency(Duration::ZERO)
    }

    /// A simulator served over TLS (`--tls-cert`/`--tls-key`) with `ca`'s
    /// server certificate: its base URL is `https://127.0.0.1:PORT`, and
    /// the kit's own client trusts `ca`.
    pub fn start_tls(ca: &crate::TestCa) -> Result<Self> {
        let launch = Launch::new(Self::BINARY)
            .arg("--tls-cert")
            .arg(ca.cert_pem())
            .arg("--tls-key")
            .arg(ca.key_pem());
        Self::launch(launch, Duration::ZERO, ca.client()?)
    }

    /// A simulator that adds `latency` to every charge.
    pub fn with_latency(latency: Duration) -> Result<Self> {
        let http = Client::builder().timeout(Duration::from_secs(30)).build()?;
        Self::launch(Launch::new(Self::BINARY), latency, http)
    }

    fn launch(launch: Launch, latency: Duration, http: Client) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("testkit-psp-").tempdir()?;
        let database = format!("sqlite://{}", dir.path().join("psp.db").display());
        let process = launch
            .env_remove("PSP_LISTEN")
            .env_remove("PSP_DATABASE_URL")
            .env_remove("PSP_LATENCY")
            .env_remove("PSP_TLS_CERT")
            .env_remove("PSP_TLS_KEY")
            .env("NO_COLOR", "1")
            .args(["--database", &database])
            .arg("--latency")
            .arg(format!("{}ms", latency.as_millis()))
            .start()?;
        Ok(Self {
            process,
            http,
            _dir: dir,
        })
    }

    /// Every charge in the ledger, newest first (all pages). An error
    /// unless each page is a 200 with the documented fields.
    pub async fn ledger(&self) -> Result<Vec<LedgerRow>> {
        let rows = crate::http::all_pages("psp: ", "/v1/charges?limit=1000", |path| {
            self.http.get(self.url(path))
        })
        .await?;
        rows.iter()
            .map(|row| {
                ledger_row(row).ok_or_else(|| {
                    anyhow!("psp: a ledger row without id, amount, currency or key: {row}")
                })
            })
            .collect()
    }

    /// Sets `fault` for the next `count` charge requests (replacing any
    /// pending one).
    pub async fn fault(&self, fault: Fault, count: u32) -> Result<()> {
        self.admin(serde_json::to_value(FaultRequest::set(fault, count))?)
            .await
    }

    /// What the simulator logged so far (a line per fault it injected,
    /// `fault: …`, among them).
    pub fn log_text(&self) -> String {
        self.process.log_text()
    }

    /// The pending fault as `GET /admin/faults` shows it (`{"mode": "none"}`
    /// once every one set has fired), to show that a test's faults fired.
    pub async fn pending_fault(&self) -> Result<Value> {
        let response = self
            .http
            .get(self.url("/admin/faults"))
            .send()
            .await
            .context("psp: GET /admin/faults")?
            .error_for_status()
            .context("psp: GET /admin/faults")?;
        Ok(response.json().await?)
    }

    /// Clears the pending fault.
    pub async fn clear_faults(&self) -> Result<()> {
        self.admin(json!({"mode": "none"})).await
    }

    async fn admin(&self, body: Value) -> Result<()> {
        let response = self
            .http
            .post(self.url("/admin/faults"))
            .json(&body)
            .send()
            .await
            .with_context(|| format!("psp: POST /admin/faults {body}"))?;
        let status = response.status();
        if status != reqwest::StatusCode::NO_CONTENT {
            let text = response.text().await.unwrap_or_default();
            bail!("psp: POST /admin/faults {body} answered {status}: {text}");
        }
        Ok(())
    }
}

fn ledger_row(row: &Value) -> Option<LedgerRow> {
    Some(LedgerRow {
        id: row["id"].as_str()?.to_owned(),
        amount: row["amount"].as_i64()?,
        currency: row["currency"].as_str()?.to_owned(),
        idempotency_key: row["idempotency_key"].as_str()?.to_owned(),
    })
}

crate::process::deref_to_process! {
    /// The process operations (`base_url`, `kill`, `restart`, `log_text`, …).
    Psp
}
