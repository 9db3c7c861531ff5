//! The three browser engines the stories run in, and one WebDriver session
//! of any: headless Chromium through `chromedriver`, headless Firefox ESR
//! through `geckodriver`, or WebKitGTK's MiniBrowser (Safari's engine)
//! through `WebKitWebDriver` on a virtual display (`xvfb-run`). Each
//! [`Browser`] has its own driver process (geckodriver and WebKitWebDriver
//! serve one session per process; chromedriver could serve more, but one
//! each keeps the engines alike) and its own fresh profile, so its cookies
//! and storage are its own.

use anyhow::{anyhow, bail, Context, Result};
use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;
use std::fmt;
use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The variable that picks the engines: a comma list of `chromium`,
/// `firefox` and `webkit`; all three when unset.
pub const ENGINES_ENV: &str = "E2E_BROWSERS";

/// Chromium flags that work as root in a container without network
/// (installed by scripts/install-wasm-tools.sh): no sandbox, no /dev/shm, no background traffic.
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

/// The window every story starts with, in both engines.
const WINDOW: (u32, u32) = (1280, 1100);

/// A browser engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Debian's `chromium` driven by `chromedriver`.
    Chromium,
    /// Debian's `firefox-esr` driven by `geckodriver`.
    Firefox,
    /// WebKitGTK's MiniBrowser driven by Debian's `WebKitWebDriver`
    /// (package `webkit2gtk-driver`), on a virtual display of its own.
    Webkit,
}

impl Engine {
    /// Every engine, in the order the stories run them.
    pub const ALL: [Engine; 3] = [Engine::Chromium, Engine::Firefox, Engine::Webkit];

    /// `chromium`, `firefox` or `webkit`: how [`ENGINES_ENV`] and file
    /// names spell it.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Chromium => "chromium",
            Engine::Firefox => "firefox",
            Engine::Webkit => "webkit",
        }
    }

    /// Parses one name of [`ENGINES_ENV`].
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|engine| engine.name() == name.trim())
            .ok_or_else(|| {
                anyhow!("unknown browser {name:?} in {ENGINES_ENV}: use chromium, firefox and/or webkit")
            })
    }

    /// The engines [`ENGINES_ENV`] names, in its order; all of them when
    /// it is unset or empty.
    pub fn from_env() -> Result<Vec<Self>> {
        match std::env::var(ENGINES_ENV) {
            Ok(list) if !list.trim().is_empty() => list
                .split(',')
                .filter(|name| !name.trim().is_empty())
                .map(Self::parse)
                .collect(),
            _ => Ok(Self::ALL.to_vec()),
        }
    }

    fn driver(self) -> DriverProgram {
        match self {
            Engine::Chromium => DriverProgram {
                env: "CHROMEDRIVER",
                default: "chromedriver",
                port_args: |port| vec![format!("--port={port}")],
                install: "install chromium and chromium-driver (scripts/test-e2e.sh does), or set CHROMEDRIVER",
                display: false,
            },
            Engine::Firefox => DriverProgram {
                env: "GECKODRIVER",
                default: "geckodriver",
                port_args: |port| vec!["--host".into(), "127.0.0.1".into(), "--port".into(), port.to_string()],
                install: "install firefox-esr and geckodriver (scripts/test-e2e.sh does), or set GECKODRIVER",
                display: false,
            },
            Engine::Webkit => DriverProgram {
                env: "WEBKITWEBDRIVER",
                default: "WebKitWebDriver",
                port_args: |port| vec![format!("--port={port}")],
                install: "install webkit2gtk-driver and xvfb (scripts/test-e2e.sh does), or set WEBKITWEBDRIVER",
                display: true,
            },
        }
    }

    /// The session's capabilities: the browser binary, headless, the
    /// profile's settings.
    fn capabilities(self, profile: Profile, folder: &Path) -> Result<Capabilities> {
        let mut capabilities = Capabilities::new();
        match self {
            Engine::Chromium => {
                let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| s.to_string()).collect();
                args.push(format!("--user-data-dir={}", folder.display()));
                let mut options = json!({ "binary": binary("CHROME_BIN", "/usr/bin/chromium", "chromium")?, "args": args });
                if profile == Profile::StorageBlocked {
                    // Settings > Privacy > "Don't allow sites to save data":
                    // cookies and site data (localStorage, sessionStorage)
                    // are one switch in Chromium.
                    options["prefs"] =
                        json!({ "profile.default_content_setting_values.cookies": 2 });
                }
                capabilities.insert("browserName".into(), json!("chrome"));
                capabilities.insert("goog:chromeOptions".into(), options);
            }
            Engine::Firefox => {
                let mut prefs = json!({
                    // No traffic to the closed network's void.
                    "network.captive-portal-service.enabled": false,
                    "network.connectivity-service.enabled": false,
                    "app.update.disabledForTesting": true,
                });
                if profile == Profile::StorageBlocked {
                    // about:config's switch for Web Storage: both
                    // `localStorage` and `sessionStorage` read as null;
                    // cookies stay on.
                    prefs["dom.storage.enabled"] = json!(false);
                }
                capabilities.insert("browserName".into(), json!("firefox"));
                capabilities.insert(
                    "moz:firefoxOptions".into(),
                    json!({
                        "binary": binary("FIREFOX_BIN", "/usr/bin/firefox-esr", "firefox-esr")?,
                        "args": ["-headless", "-profile", folder],
                        "prefs": prefs,
                    }),
                );
            }
            Engine::Webkit => {
                // MiniBrowser keeps an automation session's data in memory
                // (each session its own), so no profile folder is needed.
                let mut args = vec!["--automation".to_string()];
                if profile == Profile::StorageBlocked {
                    // WebKit's own setting for Web Storage (Safari's "Block
                    // all cookies" has no counterpart here): localStorage
                    // is off, cookies stay on.
                    args.push("--enable-html5-local-storage=false".into());
                }
                capabilities.insert(
                    "webkitgtk:browserOptions".into(),
                    json!({ "binary": binary("MINIBROWSER", &minibrowser(), "webkit2gtk-driver")?, "args": args }),
                );
            }
        }
        Ok(capabilities)
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where Debian keeps WebKitGTK's MiniBrowser (package
/// `libwebkit2gtk-4.1-0`, a dependency of `webkit2gtk-driver`).
fn minibrowser() -> String {
    format!(
        "/usr/lib/{}-linux-gnu/webkit2gtk-4.1/MiniBrowser",
        std::env::consts::ARCH
    )
}

/// What a browser's profile allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Profile {
    /// A fresh profile with the engine's defaults.
    #[default]
    Standard,
    /// The shopper switched site storage off, the way each engine offers
    /// it (see [`Engine::capabilities`]): Chromium blocks cookies and site
    /// data together, Firefox and WebKit only Web Storage.
    StorageBlocked,
}

/// How to start one engine's WebDriver server.
struct DriverProgram {
    env: &'static str,
    default: &'static str,
    port_args: fn(u16) -> Vec<String>,
    install: &'static str,
    /// Needs an X display: runs under `xvfb-run -a` (a virtual display on
    /// a free number), which shares the driver's process group.
    display: bool,
}

/// A WebDriver server process on a free port, in its own process group so
/// that dropping it ends the browser (and the virtual display) it started
/// too.
struct Driver {
    child: Child,
    url: String,
    name: String,
    /// Under `xvfb-run`: asked to end first, so that Xvfb removes its
    /// display's lock file.
    display: bool,
}

impl Driver {
    /// Starts the engine's driver (its variable overrides the one on PATH)
    /// and waits until it answers; its log is appended to `log`.
    async fn start(engine: Engine, log: &Path) -> Result<Self> {
        let program = engine.driver();
        let name = std::env::var(program.env).unwrap_or_else(|_| program.default.into());
        let mut last = None;
        // The free port can be taken between our probe and the driver's
        // bind: try again on another one.
        for _ in 0..3 {
            let port = free_port()?;
            let output = File::options().create(true).append(true).open(log)?;
            let mut command = if program.display {
                let mut xvfb = Command::new("xvfb-run");
                xvfb.args(["-a", &name]);
                xvfb
            } else {
                Command::new(&name)
            };
            let child = command
                .args((program.port_args)(port))
                .stdin(Stdio::null())
                .stdout(output.try_clone()?)
                .stderr(output)
                .process_group(0)
                .spawn()
                .with_context(|| format!("starting {name}: {}", program.install))?;
            let mut driver = Self {
                child,
                url: format!("http://127.0.0.1:{port}"),
                name: name.clone(),
                display: program.display,
            };
            match driver.wait_ready().await {
                Ok(()) => return Ok(driver),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("{name} did not start")))
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let http = reqwest::Client::new();
        let status = format!("{}/status", self.url);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(exit) = self.child.try_wait()? {
                bail!("{} exited: {exit}", self.name);
            }
            if let Ok(response) = http.get(&status).send().await {
                if response.status().is_success() {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                bail!("{} did not answer on {status} within 20 s", self.name);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The whole group: the driver and any browser it left behind.
        let group = format!("-{}", self.child.id());
        if self.display {
            // SIGTERM first, and time for every process of the group to
            // end: Xvfb removes its lock file as it does, which would
            // otherwise keep its display number taken for good.
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                let _ = self.child.try_wait();
                let alive = Command::new("kill")
                    .args(["-0", "--", &group])
                    .stderr(Stdio::null())
                    .status();
                if !matches!(alive, Ok(status) if status.success()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A browser binary: the path in `env`, else Debian's `default`.
fn binary(env: &str, default: &str, package: &str) -> Result<PathBuf> {
    let path = std::env::var_os(env)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    if !path.is_file() {
        bail!(
            "the browser is missing at {}: install {package} (scripts/test-e2e.sh does), or set {env}",
            path.display()
        );
    }
    Ok(path)
}

/// One WebDriver session: a headless browser with its own profile and
/// its own driver process.
pub struct Browser {
    client: Client,
    // Dropped after the session is closed: the driver, then the profile.
    driver: Driver,
    profile: TempDir,
}

impl Browser {
    /// Starts a driver and opens a new browser of `engine` with a fresh
    /// profile; the driver's log is appended to `log`.
    pub async fn launch(engine: Engine, profile: Profile, log: &Path) -> Result<Self> {
        let folder = tempfile::Builder::new()
            .prefix(&format!("e2e-{engine}-"))
            .tempdir()?;
        let driver = Driver::start(engine, log).await?;
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(engine.capabilities(profile, folder.path())?)
            .connect(&driver.url)
            .await
            .with_context(|| format!("opening a {engine} session through {}", driver.name))?;
        client.set_window_size(WINDOW.0, WINDOW.1).await?;
        Ok(Self {
            client,
            driver,
            profile: folder,
        })
    }

    /// The WebDriver session.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Ends the session (closes the browser), then its driver.
    pub async fn close(self) -> Result<()> {
        let Self {
            client,
            driver,
            profile,
            ..
        } = self;
        let closed = client.close().await;
        drop(driver);
        drop(profile);
        closed?;
        Ok(())
    }
}

/// The engines the stories run in (`E2E_BROWSERS`, default both). Panics
/// on a name it does not know: a typo must not pass as "no engine".
pub fn engines() -> Vec<Engine> {
    Engine::from_env().unwrap_or_else(|e| panic!("{e:#}"))
}
