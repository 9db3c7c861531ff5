//! One story in one browser engine: a fresh server (and, for the provider
//! stories, the payment provider simulator and MailDev beside it) and the
//! browsers the story opens. A story is run by the test that
//! [`stories!`](crate::stories!) declares for it, once per engine, each
//! time in its own scene named after that test function, so a renamed
//! story cannot save its screenshots and logs under a stale name. [`Scene::finish`] saves a
//! screenshot of every window under `target/e2e/` (`STORY-ENGINE.png`) and,
//! when the story failed, panics with what each page showed and where the
//! logs are.

use crate::browser::{Browser, Engine, Profile};
use crate::page::Page;
use crate::paths;
use anyhow::{anyhow, Result};
use std::path::PathBuf;
use std::time::Duration;
use testkit::{Database, Server};
use testkit::{MailDev, Psp};

/// Declares a module's stories: `stories![a, b]` makes, for each story
/// `async fn a(scene: &mut Scene) -> anyhow::Result<()>` of the module, a
/// `#[tokio::test]` of the same name (in the module's `tests`) that [`run`]s
/// it once per engine, in scenes named after it. `stories![setup => a, b]`
/// starts what `setup` asks for. A story left out of the list is dead code,
/// which the lints refuse.
#[macro_export]
macro_rules! stories {
    ($setup:expr => $($story:ident),+ $(,)?) => {
        mod tests {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[::tokio::test]
                async fn $story() {
                    $crate::scene::run($crate::test_name!(), $setup, super::$story).await;
                }
            )+
        }
    };
    ($($story:ident),+ $(,)?) => {
        $crate::stories!($crate::Setup::default() => $($story),+);
    };
}

/// Runs `story` once in each engine of [`engines`](crate::browser::engines), each
/// time in a fresh scene; panics at the first engine it fails in.
#[doc(hidden)]
pub async fn run(name: &str, setup: Setup, mut story: impl AsyncFnMut(&mut Scene) -> Result<()>) {
    for engine in crate::browser::engines() {
        let mut scene = Scene::start(name, engine, setup).await;
        let result = story(&mut scene).await;
        scene.finish(result).await;
    }
}

/// The name of the function it is written in, closures and async blocks
/// (such as `#[tokio::test]`'s) left out.
#[macro_export]
macro_rules! test_name {
    () => {
        $crate::scene::function_name({
            fn here() {}
            ::std::any::type_name_of_val(&here)
        })
    };
}

/// `stories::a_story::{{closure}}::here` → `a_story`.
#[doc(hidden)]
pub fn function_name(here: &'static str) -> &'static str {
    let mut path = here.strip_suffix("::here").unwrap_or(here);
    while let Some(outer) = path.strip_suffix("::{{closure}}") {
        path = outer;
    }
    path.rsplit("::").next().unwrap_or(path)
}

/// What a story needs besides the server with `--chaos`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Setup {
    provider: bool,
    demo_lease: bool,
}

impl Setup {
    /// Charges through the payment provider simulator and receipts to
    /// MailDev: the server runs with `--psp-url` and `--smtp-url`, a short
    /// `--operation-lease` and `--complete-interval` (so an operation
    /// abandoned by a killed server is taken over within a story's
    /// patience), and the page is opened with `?inbox=` MailDev's web inbox.
    pub fn provider() -> Self {
        Self {
            provider: true,
            demo_lease: false,
        }
    }

    /// As [`provider`](Self::provider), with scripts/demo.sh's
    /// `--operation-lease 5s` and `--complete-interval 2s` instead of the
    /// stories' shorter ones: an operation a killed server left behind is
    /// finished as late as a shopper of the demo sees it.
    pub fn provider_with_the_demos_lease() -> Self {
        Self {
            provider: true,
            demo_lease: true,
        }
    }
}

/// How long the simulator takes over a charge in the stories: enough to
/// be seen in flight, short enough not to slow them.
const PSP_LATENCY: Duration = Duration::from_millis(100);

/// A story's world.
pub struct Scene {
    name: String,
    engine: Engine,
    out: PathBuf,
    /// The server under test.
    pub server: Server,
    psp: Option<Psp>,
    maildev: Option<MailDev>,
    browsers: Vec<Browser>,
}

impl Scene {
    /// Starts a server (and what `setup` asks for) for the story `name` in
    /// `engine`. Panics with the reason when it cannot: nothing to test
    /// then.
    async fn start(name: &str, engine: Engine, setup: Setup) -> Self {
        match Self::try_start(name, engine, setup).await {
            Ok(scene) => scene,
            Err(e) => panic!("cannot set the scene for {name} in {engine}: {e:#}"),
        }
    }

    async fn try_start(name: &str, engine: Engine, setup: Setup) -> Result<Self> {
        let name = format!("{name}-{engine}");
        let out = paths::output_dir()?;
        let log = |what: &str| out.join(format!("{name}.{what}.log"));
        for what in ["server", "driver"] {
            let _ = std::fs::remove_file(log(what));
        }
        let mut server = Server::builder()
            .chaos()
            .database(Database::sqlite()?)
            .www(paths::www_dir()?)
            .log(log("server"));
        let (mut psp, mut maildev) = (None, None);
        if setup.provider {
            let started = Psp::with_latency(PSP_LATENCY)?;
            let mail = MailDev::start().await?;
            server = server
                .flags(["--psp-url", &started.base_url()])
                .flags(["--smtp-url", &mail.smtp_url()])
                .flags(if setup.demo_lease {
                    ["--operation-lease", "5s", "--complete-interval", "2s"]
                } else {
                    ["--operation-lease", "2s", "--complete-interval", "1s"]
                });
            psp = Some(started);
            maildev = Some(mail);
        }
        Ok(Self {
            server: server.start().await?,
            name,
            engine,
            out,
            psp,
            maildev,
            browsers: Vec::new(),
        })
    }

    /// The engine this scene's browsers are.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The payment provider simulator ([`Setup::provider`] scenes only).
    pub fn psp(&self) -> Result<&Psp> {
        self.psp
            .as_ref()
            .ok_or_else(|| anyhow!("this scene has no payment provider: use Setup::provider()"))
    }

    /// MailDev ([`Setup::provider`] scenes only).
    pub fn maildev(&self) -> Result<&MailDev> {
        self.maildev
            .as_ref()
            .ok_or_else(|| anyhow!("this scene has no MailDev: use Setup::provider()"))
    }

    /// Opens a new browser (its own profile: its own cookies and storage)
    /// and loads the shop in it.
    pub async fn shopper(&mut self) -> Result<Page> {
        self.shopper_with(Profile::Standard).await
    }

    /// Opens a new browser with `profile` and loads the shop in it.
    pub async fn shopper_with(&mut self, profile: Profile) -> Result<Page> {
        let log = self.out.join(format!("{}.driver.log", self.name));
        let browser = Browser::launch(self.engine, profile, &log).await?;
        let page = Page::in_current_window(browser.client().clone(), &self.page_url()).await?;
        self.browsers.push(browser);
        page.open().await?;
        Ok(page)
    }

    /// The shop's address as a shopper opens it: with `?inbox=` when
    /// receipts go to MailDev.
    fn page_url(&self) -> String {
        match &self.maildev {
            Some(mail) => format!("{}/?inbox={}", self.server.base_url(), mail.web_url()),
            None => format!("{}/", self.server.base_url()),
        }
    }

    /// Saves the screenshots, closes the browsers, and panics with a report
    /// when `outcome` is an error.
    pub async fn finish(self, outcome: Result<()>) {
        let mut report = String::new();
        let mut shots = Vec::new();
        for (b, browser) in self.browsers.iter().enumerate() {
            let client = browser.client();
            let windows = client.windows().await.unwrap_or_default();
            for (w, window) in windows.into_iter().enumerate() {
                let suffix = match (b, w) {
                    (0, 0) => String::new(),
                    (b, 0) => format!("-browser{}", b + 1),
                    (b, w) => format!("-browser{}-window{}", b + 1, w + 1),
                };
                let page = Page::with_window(client.clone(), window, &self.page_url());
                if outcome.is_err() {
                    report.push_str(&format!("\npage{suffix}: {}\n", page.describe().await));
                }
                let path = self.out.join(format!("{}{suffix}.png", self.name));
                match page.screenshot().await {
                    Ok(png) => match std::fs::write(&path, png) {
                        Ok(()) => shots.push(path),
                        Err(e) => {
                            report.push_str(&format!("\ncould not save {}: {e}", path.display()))
                        }
                    },
                    Err(e) => report.push_str(&format!("\nno screenshot{suffix}: {e:#}")),
                }
            }
        }
        let log = self.server.log_path().to_path_buf();
        // The server's log ends where the story did.
        drop(self.server);
        for browser in self.browsers {
            let _ = browser.close().await;
        }
        if let Err(e) = outcome {
            let shots: Vec<String> = shots.iter().map(|p| p.display().to_string()).collect();
            panic!(
                "{}: {e:#}\n{report}\nscreenshots: {}\nserver log: {}",
                self.name,
                shots.join(", "),
                log.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_scene_is_named_after_the_function_it_is_set_in() {
        assert_eq!(
            crate::test_name!(),
            "a_scene_is_named_after_the_function_it_is_set_in"
        );
        let in_async_block = async { crate::test_name!() };
        let name = block_on(in_async_block);
        assert_eq!(name, "a_scene_is_named_after_the_function_it_is_set_in");
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }
}
