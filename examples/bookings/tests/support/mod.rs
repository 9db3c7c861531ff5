//! What both test suites start and read: the `partner` and `bookings`
//! binaries as processes (testkit's [`Process`]), on a fresh database
//! (testkit's [`Database`]: SQLite, or PostgreSQL when `TEST_POSTGRES_URL`
//! is set), the partner's ledger, and answers read whole with the headers
//! the engine's contract names.

use anyhow::{bail, Context, Result};
use reqwest::{Client, RequestBuilder};
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use testkit::{Auth, Binary, Database, Launch, Process};

/// The service under test (`BOOKINGS_BIN` overrides).
pub(crate) const BOOKINGS: Binary = Binary::new("bookings", "bookings", "BOOKINGS_BIN");
/// The simulated partner (`PARTNER_BIN` overrides).
const PARTNER: Binary = Binary::new("partner", "bookings", "PARTNER_BIN");

/// An HTTP client whose requests give up after a few seconds.
pub(crate) fn http() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client builds")
}

/// Starts `launch` off the async threads (a start blocks until the
/// process prints its address).
async fn start(launch: Launch) -> Result<Process> {
    tokio::task::spawn_blocking(move || launch.start()).await?
}

/// The partner process and its admin calls.
pub(crate) struct Partner {
    pub(crate) process: Process,
    http: Client,
}

/// `GET /ledger`.
#[derive(Debug, Deserialize)]
pub(crate) struct Ledger {
    pub(crate) effects: Vec<Effect>,
    /// Answers held back right now.
    pub(crate) held: usize,
}

/// One confirmation the partner made.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Effect {
    pub(crate) key: String,
    pub(crate) booking: String,
    pub(crate) seat: String,
    pub(crate) confirmation: String,
    /// Requests that came with its key.
    pub(crate) requests: u32,
}

impl Partner {
    /// A partner whose every answer waits `delay` (`"0s"`: none) after its
    /// effect.
    pub(crate) async fn start(delay: &str) -> Result<Self> {
        Ok(Self {
            process: start(Launch::new(PARTNER).args(["--delay", delay])).await?,
            http: http(),
        })
    }

    /// SIGKILL: the partner is gone (and its memory with it).
    pub(crate) fn stop(&mut self) -> Result<()> {
        self.process.kill()?;
        Ok(())
    }

    /// Back on the same address, with an empty ledger.
    pub(crate) fn restart(&mut self) -> Result<()> {
        self.process.restart()
    }

    pub(crate) async fn ledger(&self) -> Result<Ledger> {
        let response = self.http.get(self.process.url("/ledger")).send().await?;
        Ok(response.error_for_status()?.json().await?)
    }

    /// Answers wait, after their effect, until [`Partner::release`].
    pub(crate) async fn hold(&self) -> Result<()> {
        self.admin("/hold").await
    }

    pub(crate) async fn release(&self) -> Result<()> {
        self.admin("/release").await
    }

    async fn admin(&self, path: &str) -> Result<()> {
        self.http
            .post(self.process.url(path))
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    /// Waits until the ledger satisfies `done`; the ledger then.
    pub(crate) async fn wait_for(&self, done: impl Fn(&Ledger) -> bool) -> Result<Ledger> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let ledger = self.ledger().await?;
            if done(&ledger) {
                return Ok(ledger);
            }
            if Instant::now() > deadline {
                bail!("the partner's ledger never got there: {ledger:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The bookings process on its database.
pub(crate) struct Bookings {
    pub(crate) process: Process,
    pub(crate) database: Database,
    http: Client,
}

impl Bookings {
    /// `bookings` on `database`, calling `partner`, with `flags` more.
    /// Commits are `relaxed` (in the operating system): they survive a
    /// SIGKILL, which is all these tests do.
    pub(crate) async fn start(
        database: &Database,
        partner: &Partner,
        flags: &[&str],
    ) -> Result<Self> {
        let launch = Launch::new(BOOKINGS)
            .args(["--database", &database.url()])
            .args(["--partner-url", &partner.process.base_url()])
            .args(["--durability", "relaxed"])
            .args(flags);
        Ok(Self {
            process: start(launch).await?,
            database: database.clone(),
            http: http(),
        })
    }

    /// A fresh database of the backend under test, a partner and the
    /// service on them.
    pub(crate) async fn fresh(partner_delay: &str, flags: &[&str]) -> Result<(Partner, Self)> {
        let database = Database::fresh().await?;
        let partner = Partner::start(partner_delay).await?;
        let bookings = Self::start(&database, &partner, flags).await?;
        Ok((partner, bookings))
    }

    /// A customer with the bearer token `token`.
    pub(crate) fn customer(&self, token: &str) -> testkit::Caller {
        testkit::Caller::new(
            self.http.clone(),
            self.process.base_url(),
            Auth::Bearer(token.to_owned()),
        )
    }

    /// SIGKILL, then a start on the same address and database.
    pub(crate) async fn kill_and_restart(&mut self) -> Result<()> {
        let process = &mut self.process;
        tokio::task::block_in_place(|| {
            process.kill()?;
            process.restart()
        })
    }

    /// `GET /metrics` of the process running now.
    pub(crate) async fn metrics(&self) -> Result<testkit::Metrics> {
        let response = self.http.get(self.process.url("/metrics")).send().await?;
        testkit::Metrics::parse(&response.error_for_status()?.text().await?)
    }

    /// Rows of the table, counted straight from the database.
    pub(crate) async fn rows(&self, filter: &str) -> Result<i64> {
        self.database.count(&format!("bookings {filter}")).await
    }
}

/// `POST /bookings` for `seat` under `key`.
pub(crate) fn book(customer: &testkit::Caller, key: &str, seat: &str) -> RequestBuilder {
    customer
        .keyed("/bookings", key)
        .json(&json!({ "seat": seat }))
}

/// `GET /bookings` of `customer`: its rows, oldest first.
pub(crate) async fn listing(customer: &testkit::Caller) -> Result<Vec<Value>> {
    let response = customer
        .request(reqwest::Method::GET, "/bookings")
        .send()
        .await?;
    let status = response.status();
    let body: Value = response.json().await?;
    match body["data"].as_array() {
        Some(rows) if status == 200 => Ok(rows.clone()),
        _ => bail!("GET /bookings answered {status} {body}"),
    }
}

/// One answer, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) content_type: Option<String>,
    /// `Idempotent-Replayed: true`.
    pub(crate) replayed: bool,
    pub(crate) retry_after: Option<String>,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }

    /// The problem type of a problem+json answer (`/problems/…`).
    pub(crate) fn problem(&self) -> Option<String> {
        self.json()["type"].as_str().map(str::to_owned)
    }

    /// A 409 `idempotency-key-in-use` with `Retry-After`: another request
    /// holds the key's operation; retry.
    pub(crate) fn in_use(&self) -> bool {
        self.status == 409
            && self.problem().as_deref() == Some("/problems/idempotency-key-in-use")
            && self.retry_after.is_some()
    }
}

/// Sends `request` and reads its answer whole.
pub(crate) async fn send(request: RequestBuilder) -> reqwest::Result<Answer> {
    let response = request.send().await?;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (content_type, retry_after) = (header("content-type"), header("retry-after"));
    let replayed = header("idempotent-replayed").as_deref() == Some("true");
    Ok(Answer {
        status: response.status().as_u16(),
        content_type,
        replayed,
        retry_after,
        body: response.bytes().await?.to_vec(),
    })
}

/// Sends what `request` makes until the answer is final (not a 409
/// in-use, not a 503 with `Retry-After`, not a connection error), for up
/// to 30 seconds.
pub(crate) async fn until_final(request: impl Fn() -> RequestBuilder) -> Result<Answer> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = send(request()).await;
        let retry = match &answer {
            Ok(a) => a.in_use() || (a.status == 503 && a.retry_after.is_some()),
            Err(_) => true,
        };
        if !retry {
            return Ok(answer?);
        }
        if Instant::now() > deadline {
            return answer
                .context("no final answer within 30 s")
                .and_then(|a| bail!("no final answer within 30 s; the last: {a:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
