//! `chromedriver` and headless Chromium sessions. Each [`Browser`] has its
//! own fresh profile folder, so its cookies and storage are its own.

use anyhow::{anyhow, bail, Context, Result};
use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;
use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// Chromium flags that work as root in a container without network
/// (see TOOLCHAIN.md): no sandbox, no /dev/shm, no background traffic.
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,1100",
];

/// A `chromedriver` process on a free port, in its own process group so
/// that dropping it ends the browsers it started too.
pub struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    /// Starts `chromedriver` (`CHROMEDRIVER` overrides the one on PATH) and
    /// waits until it answers; its log goes to `log`.
    pub async fn start(log: &Path) -> Result<Self> {
        let program = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let mut last = None;
        // The free port can be taken between our probe and chromedriver's
        // bind: try again on another one.
        for _ in 0..3 {
            let port = free_port()?;
            let output = File::options().create(true).append(true).open(log)?;
            let child = Command::new(&program)
                .arg(format!("--port={port}"))
                .stdin(Stdio::null())
                .stdout(output.try_clone()?)
                .stderr(output)
                .process_group(0)
                .spawn()
                .with_context(|| {
                    format!(
                        "starting {program}: install chromium and chromium-driver \
                         (scripts/test-e2e.sh does), or set CHROMEDRIVER"
                    )
                })?;
            let mut driver = Self {
                child,
                url: format!("http://127.0.0.1:{port}"),
            };
            match driver.wait_ready().await {
                Ok(()) => return Ok(driver),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("chromedriver did not start")))
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let http = reqwest::Client::new();
        let status = format!("{}/status", self.url);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(exit) = self.child.try_wait()? {
                bail!("chromedriver exited: {exit}");
            }
            if let Ok(response) = http.get(&status).send().await {
                if response.status().is_success() {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                bail!("chromedriver did not answer on {status} within 20 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The WebDriver endpoint.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The whole group: chromedriver and any Chromium it left behind.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The Chromium binary: `CHROME_BIN`, else Debian's `/usr/bin/chromium`.
fn chromium_binary() -> Result<PathBuf> {
    let path = std::env::var_os("CHROME_BIN")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if !path.is_file() {
        bail!(
            "Chromium is missing at {}: install chromium (scripts/test-e2e.sh does), or set CHROME_BIN",
            path.display()
        );
    }
    Ok(path)
}

/// One WebDriver session: a headless Chromium with its own profile.
pub struct Browser {
    client: Client,
    _profile: TempDir,
}

impl Browser {
    /// Opens a new Chromium with a fresh profile.
    pub async fn launch(driver: &Driver) -> Result<Self> {
        let profile = tempfile::Builder::new().prefix("e2e-chromium-").tempdir()?;
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| s.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let mut capabilities = Capabilities::new();
        capabilities.insert("browserName".into(), json!("chrome"));
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({ "binary": chromium_binary()?, "args": args }),
        );
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(driver.url())
            .await
            .context("opening a Chromium session through chromedriver")?;
        Ok(Self {
            client,
            _profile: profile,
        })
    }

    /// The WebDriver session.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Ends the session (closes Chromium).
    pub async fn close(self) -> Result<()> {
        self.client.close().await?;
        Ok(())
    }
}
