//! MailDev, an SMTP server that keeps what it receives and shows it over
//! HTTP (`GET /api/email`): where the checkout server's receipts go in a
//! test (`--smtp-url`). It is an npm package, not a workspace binary:
//! `scripts/maildev.sh` installs it into `.tools/` of the checkout (run by
//! `scripts/test.sh`); `MAILDEV_BIN` points at another one.
//!
//! Started on free ports of 127.0.0.1 (or on a chosen SMTP port, for a
//! server that was told about it before it came up), with its own mail
//! folder, and ready once both ports answer. SIGKILL on drop.

use anyhow::{anyhow, bail, Context, Result};
use reqwest::Client;
use serde_json::Value;
use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The version `scripts/maildev.sh` installs.
pub const VERSION: &str = "3.0.0";
/// The variable that points at another MailDev.
pub const BIN_ENV: &str = "MAILDEV_BIN";
/// How long MailDev (Node.js) may take to answer on both ports.
const STARTUP: Duration = Duration::from_secs(30);
/// Tries with new free ports when one was taken meanwhile.
const PORT_TRIES: usize = 3;

/// One message MailDev received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email {
    /// The `Message-ID` header, with its angle brackets.
    pub message_id: String,
    /// The envelope's recipients (where the SMTP client delivered it).
    pub to: Vec<String>,
    /// The `Subject` header.
    pub subject: String,
    /// The plain-text body.
    pub text: String,
}

/// A running MailDev.
#[derive(Debug)]
pub struct MailDev {
    child: Child,
    /// Over TLS: the user and password it takes (`--incoming-secure`).
    login: Option<(String, String)>,
    smtp_port: u16,
    web_port: u16,
    http: Client,
    dir: TempDir,
}

impl MailDev {
    /// MailDev on two free ports.
    pub async fn start() -> Result<Self> {
        let mut last = None;
        for _ in 0..PORT_TRIES {
            match Self::start_on(free_port()?).await {
                Ok(maildev) => return Ok(maildev),
                // Another process took a port between our look and its bind.
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one try"))
    }

    /// MailDev whose SMTP server listens on `smtp_port` (a port that was
    /// free, named to a server before MailDev came up); web on a free port.
    pub async fn start_on(smtp_port: u16) -> Result<Self> {
        Self::start_with(smtp_port, None).await
    }

    /// MailDev whose SMTP server speaks TLS from the first byte
    /// (`--incoming-secure`) with `ca`'s server certificate and takes only
    /// the user `shop` with a password (`--incoming-user`/`--incoming-pass`);
    /// [`MailDev::smtp_url`] is then `smtps://shop:PASSWORD@127.0.0.1:PORT`.
    pub async fn start_tls(ca: &crate::TestCa) -> Result<Self> {
        let mut last = None;
        for _ in 0..PORT_TRIES {
            match Self::start_with(free_port()?, Some(ca)).await {
                Ok(maildev) => return Ok(maildev),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one try"))
    }

    async fn start_with(smtp_port: u16, tls: Option<&crate::TestCa>) -> Result<Self> {
        let bin = binary()?;
        let dir = tempfile::Builder::new()
            .prefix("testkit-maildev-")
            .tempdir()?;
        let web_port = free_port()?;
        let log = dir.path().join("maildev.log");
        let mail = dir.path().join("mail");
        let login = tls.map(|_| {
            (
                "shop".to_owned(),
                format!("pw-{}", uuid::Uuid::new_v4().simple()),
            )
        });
        let mut command = Command::new(&bin);
        if let (Some(ca), Some((user, pass))) = (tls, &login) {
            command
                .arg("--incoming-secure")
                .arg("--incoming-cert")
                .arg(ca.cert_pem())
                .arg("--incoming-key")
                .arg(ca.key_pem())
                .args(["--incoming-user", user, "--incoming-pass", pass]);
        }
        let child = command
            .args(["--smtp", &smtp_port.to_string()])
            .args(["--web", &web_port.to_string()])
            .args(["--ip", "127.0.0.1", "--web-ip", "127.0.0.1"])
            .arg("--mail-directory")
            .arg(&mail)
            .stdin(Stdio::null())
            .stdout(File::create(&log)?)
            .stderr(File::create(dir.path().join("maildev.err"))?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut maildev = Self {
            child,
            login,
            smtp_port,
            web_port,
            http: Client::builder().timeout(Duration::from_secs(10)).build()?,
            dir,
        };
        maildev.wait_until_ready().await?;
        Ok(maildev)
    }

    /// `smtp://127.0.0.1:PORT`, for `--smtp-url`; over TLS
    /// `smtps://USER:PASSWORD@127.0.0.1:PORT`.
    pub fn smtp_url(&self) -> String {
        match &self.login {
            None => format!("smtp://127.0.0.1:{}", self.smtp_port),
            Some((user, pass)) => format!("smtps://{user}:{pass}@127.0.0.1:{}", self.smtp_port),
        }
    }

    /// Where its SMTP server listens (for a [`Proxy`](crate::Proxy) before it).
    pub fn smtp_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.smtp_port))
    }

    /// The web inbox, `http://127.0.0.1:PORT/`.
    pub fn web_url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.web_port)
    }

    /// Every message received so far, oldest first. An error unless
    /// `GET /api/email` answers 200 with an array of messages that each
    /// have a `Message-ID`.
    pub async fn emails(&self) -> Result<Vec<Email>> {
        let url = format!("{}api/email", self.web_url());
        let all =
            crate::http::json_200(self.http.get(&url), &format!("maildev: GET {url}")).await?;
        all.as_array()
            .ok_or_else(|| anyhow!("maildev: GET {url} answered no array: {all}"))?
            .iter()
            .map(|m| {
                email(m).ok_or_else(|| anyhow!("maildev: a message without a Message-ID: {m}"))
            })
            .collect()
    }

    /// Polls until `done` holds for the messages received, or `timeout`
    /// passes (then an error that shows them, or the last failed read). A
    /// read that fails (MailDev busy, a dropped connection) is tried again
    /// until then. The messages it held for.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&[Email]) -> bool,
    ) -> Result<Vec<Email>> {
        let deadline = Instant::now() + timeout;
        loop {
            let read = self.emails().await;
            if let Ok(emails) = &read {
                if done(emails) {
                    return read;
                }
            }
            if Instant::now() >= deadline {
                return match read {
                    Ok(emails) => {
                        bail!("maildev: not {what} within {timeout:?}; received: {emails:#?}")
                    }
                    Err(e) => Err(e.context(format!("maildev: not {what} within {timeout:?}"))),
                };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What MailDev printed, for error messages.
    pub fn log_text(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.dir.path().join(name));
        format!(
            "{}{}",
            read("maildev.log").unwrap_or_default(),
            read("maildev.err").unwrap_or_default()
        )
    }

    async fn wait_until_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + STARTUP;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "maildev exited ({status}) before listening on SMTP {} and web {}:\n{}",
                    self.smtp_port,
                    self.web_port,
                    self.log_text()
                );
            }
            let smtp = TcpStream::connect(("127.0.0.1", self.smtp_port)).is_ok();
            if smtp && self.emails().await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "maildev did not answer on SMTP {} and web {} within {STARTUP:?}:\n{}",
                    self.smtp_port,
                    self.web_port,
                    self.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for MailDev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- maildev log:\n{}", self.log_text());
        }
    }
}

/// A port of 127.0.0.1 that was free a moment ago.
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// `MAILDEV_BIN`, else `.tools/node_modules/.bin/maildev` in the workspace;
/// an error that names the install command when it is not there.
pub fn binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(BIN_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!("{BIN_ENV}={} is not a file", path.display());
        }
        return Ok(path);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."));
    let path = workspace.join(".tools/node_modules/.bin/maildev");
    if !path.is_file() {
        bail!(
            "MailDev is missing at {}: install it with `scripts/maildev.sh` \
             (npm install maildev@{VERSION} into .tools/), or point {BIN_ENV} at one",
            path.display()
        );
    }
    Ok(path)
}

fn email(message: &Value) -> Option<Email> {
    let headers = &message["headers"];
    Some(Email {
        message_id: headers["message-id"].as_str()?.to_owned(),
        to: message["envelope"]["to"]
            .as_array()
            .map(|to| {
                to.iter()
                    .filter_map(|r| r["address"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        subject: message["subject"].as_str().unwrap_or_default().to_owned(),
        text: message["text"].as_str().unwrap_or_default().to_owned(),
    })
}
