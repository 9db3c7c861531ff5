//! The `server` binary as a [`Process`], with its database and page
//! folder. Defaults: `--listen 127.0.0.1:0 --durability relaxed --www
//! <an empty temporary folder> --database <a fresh one>`, and none of the
//! server's own environment variables inherited from the test's
//! environment (a stray `CHAOS=1` cannot change a test). The per-caller
//! limits (`CALLER_RATE`, `CALLER_UNFINISHED`, `CALLER_RECEIPTS`) are off
//! ([`UNLIMITED`]): a test drives one caller far harder than a shopper
//! does; a test of a limit sets its flag, which wins.

use crate::binary::Binary;
use crate::caller::{Auth, Caller};
use crate::database::Database;
use crate::killed_start::{KillAt, KilledStart};
use crate::maildev::MailDev;
use crate::metrics::Metrics;
use crate::process::{Launch, Process};
use crate::psp::Psp;
use anyhow::{anyhow, Result};
use reqwest::Client;
use serde_json::Value;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;
use tempfile::TempDir;

/// The variables the server reads its flags from (docs/CONTRACT.md
/// section 2, and the undocumented ones): removed from its environment
/// unless a test sets them with [`ServerBuilder::env`].
const SERVER_ENV: &[&str] = &[
    "LISTEN",
    "DATABASE_URL",
    "KEY_TTL",
    "SWEEP_INTERVAL",
    "WWW_DIR",
    "CORS_ORIGINS",
    "DURABILITY",
    "BODY_TIMEOUT",
    "CHAOS",
    "CHAOS_ON_ANY_ADDRESS",
    "PSP_URL",
    "SMTP_URL",
    "OPERATION_LEASE",
    "COMPLETE_INTERVAL",
    "PSP_TIMEOUT",
    "RECEIPT_CLAIM",
    "NO_MIGRATE",
    "LOG_FORMAT",
    "MAX_CONNECTIONS",
    "CALLER_RATE",
    "CALLER_UNFINISHED",
    "CALLER_RECEIPTS",
];

/// The per-caller limits a test server starts without, unless the test
/// sets them (a flag wins over its variable).
pub const UNLIMITED: &[(&str, &str)] = &[
    ("CALLER_RATE", "0"),
    ("CALLER_UNFINISHED", "0"),
    ("CALLER_RECEIPTS", "0"),
];

/// How long one HTTP call of the kit may take: a hung server fails the
/// test instead of hanging it.
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// What to start a server with. A clone starts another with the same
/// settings (on the same database, once one was given).
#[derive(Debug, Default, Clone)]
pub struct ServerBuilder {
    flags: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    chaos: bool,
    durability_full: bool,
    www: Option<PathBuf>,
    database: Option<Database>,
    log: Option<PathBuf>,
    binary: Option<Binary>,
}

impl ServerBuilder {
    /// Starts `binary` instead of `server` (another build of it: the next
    /// release, for a rolling deploy).
    pub fn binary(mut self, binary: Binary) -> Self {
        self.binary = Some(binary);
        self
    }

    /// `--chaos`: honour `X-Chaos`.
    pub fn chaos(mut self) -> Self {
        self.chaos = true;
        self
    }

    /// One more command-line argument (`.flag("--key-ttl").flag("1s")`).
    pub fn flag(mut self, flag: impl Into<OsString>) -> Self {
        self.flags.push(flag.into());
        self
    }

    /// More command-line arguments.
    pub fn flags<I, S>(mut self, flags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.flags.extend(flags.into_iter().map(Into::into));
        self
    }

    /// An environment variable of the server process.
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// `--durability full` instead of `relaxed`.
    pub fn durability_full(mut self) -> Self {
        self.durability_full = true;
        self
    }

    /// Serves `dir` at `/` instead of an empty folder.
    pub fn www(mut self, dir: impl Into<PathBuf>) -> Self {
        self.www = Some(dir.into());
        self
    }

    /// Runs on `database` (a clone shares it) instead of a fresh one.
    pub fn database(mut self, database: Database) -> Self {
        self.database = Some(database);
        self
    }

    /// `--psp-url`: charge cards at this simulator.
    pub fn psp(self, psp: &Psp) -> Self {
        self.flag("--psp-url").flag(psp.base_url())
    }

    /// `--smtp-url`: send receipts to this MailDev.
    pub fn smtp(self, maildev: &MailDev) -> Self {
        self.flag("--smtp-url").flag(maildev.smtp_url())
    }

    /// Appends the server's stderr to `path`.
    pub fn log(mut self, path: impl Into<PathBuf>) -> Self {
        self.log = Some(path.into());
        self
    }

    /// Makes the database if none was given, starts the server and waits
    /// for its address.
    pub async fn start(self) -> Result<Server> {
        let (launch, database, scratch) = self.launch().await?;
        let process = launch.start()?;
        Ok(Server {
            process,
            database,
            http: Client::builder().timeout(HTTP_TIMEOUT).build()?,
            _scratch: scratch,
        })
    }

    /// Starts a server and sends it SIGKILL `at` the moment given, whether
    /// it is listening yet or not (it may be opening or migrating the
    /// database): what it had got to. Give it the database a later start
    /// is to find (a fresh one made here would be lost), and a
    /// [`ServerBuilder::log`] to read what it logged.
    pub async fn start_and_kill(self, at: &KillAt) -> Result<KilledStart> {
        let (launch, _database, _scratch) = self.launch().await?;
        launch.start_and_kill(at)
    }

    /// The process to start, its database (made if none was given) and
    /// the scratch folder of its page.
    async fn launch(self) -> Result<(Launch, Database, TempDir)> {
        let scratch = tempfile::Builder::new()
            .prefix("testkit-server-")
            .tempdir()?;
        let database = match self.database {
            Some(database) => database,
            None => Database::fresh().await?,
        };
        let www = match self.www {
            Some(www) => www,
            None => {
                let www = scratch.path().join("www");
                std::fs::create_dir(&www)?;
                www
            }
        };
        let mut launch = Launch::new(self.binary.unwrap_or(Binary::server()));
        for name in SERVER_ENV {
            launch = launch.env_remove(name);
        }
        for (name, value) in UNLIMITED {
            launch = launch.env(name, value);
        }
        launch = launch
            .env("NO_COLOR", "1")
            .args([
                "--durability",
                if self.durability_full {
                    "full"
                } else {
                    "relaxed"
                },
            ])
            .arg("--www")
            .arg(&www)
            .args(["--database", &database.url()]);
        if self.chaos {
            launch = launch.arg("--chaos");
        }
        launch = launch.args(&self.flags);
        for (name, value) in &self.env {
            launch = launch.env(name, value);
        }
        if let Some(log) = self.log {
            launch = launch.log(log);
        }
        Ok((launch, database, scratch))
    }
}

/// A running `server` process and the database it owns.
#[derive(Debug)]
pub struct Server {
    process: Process,
    database: Database,
    http: Client,
    _scratch: TempDir,
}

impl Server {
    /// A builder with the defaults.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// A server with the defaults (no chaos) on a fresh database.
    pub async fn start() -> Result<Self> {
        Self::builder().start().await
    }

    /// Starts a new process on the same address, flags and database (the
    /// old one must have exited), with a fresh HTTP client: connections
    /// kept alive to the old process would fail.
    pub fn restart(&mut self) -> Result<()> {
        self.process.restart()?;
        self.http = Client::builder().timeout(HTTP_TIMEOUT).build()?;
        Ok(())
    }

    /// The database it runs on.
    pub fn database(&self) -> &Database {
        &self.database
    }

    /// The kit's HTTP client (30 s timeout).
    pub fn http(&self) -> &Client {
        &self.http
    }

    /// A new customer: a fresh random bearer token.
    pub fn caller(&self) -> Caller {
        self.bearer(&crate::new_token())
    }

    /// The customer with bearer `token`.
    pub fn bearer(&self, token: &str) -> Caller {
        Caller::new(
            self.http.clone(),
            self.base_url(),
            Auth::Bearer(token.to_owned()),
        )
    }

    /// The browser whose `sid` cookie is `sid`.
    pub fn session(&self, sid: &str) -> Caller {
        Caller::new(
            self.http.clone(),
            self.base_url(),
            Auth::Session(sid.to_owned()),
        )
    }

    /// `GET /inventory/ITEM`: how many are left. An error unless 200 with
    /// an integer `available`.
    pub async fn available(&self, item: &str) -> Result<i64> {
        let path = format!("/inventory/{item}");
        let body = self.get_json(&path).await?;
        body["available"]
            .as_i64()
            .ok_or_else(|| anyhow!("GET {path}: no integer `available` in {body}"))
    }

    /// `GET /metrics`, parsed; an error unless 200.
    pub async fn metrics(&self) -> Result<Metrics> {
        let request = self.http.get(self.url("/metrics"));
        Metrics::parse(&crate::http::text_200(request, "GET /metrics").await?)
    }

    /// The status `GET /healthz` answers.
    pub async fn health(&self) -> Result<u16> {
        let response = self.http.get(self.url("/healthz")).send().await?;
        Ok(response.status().as_u16())
    }

    /// `GET path` as JSON; an error unless 200.
    async fn get_json(&self, path: &str) -> Result<Value> {
        let request = self.http.get(self.url(path));
        crate::http::json_200(request, &format!("GET {path}")).await
    }
}

crate::process::deref_to_process! {
    /// The process operations (`url`, `signal`, `kill`, `wait_for_exit`,
    /// `restart`, `log_text`, …) act on the server process.
    Server
}
