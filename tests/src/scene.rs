//! One story: a fresh server, a chromedriver, the browsers the story opens.
//! [`Scene::finish`] saves a screenshot of every window under
//! `target/e2e/` and, when the story failed, panics with what each page
//! showed and where the logs are.

use crate::browser::{Browser, Driver};
use crate::page::Page;
use crate::paths;
use crate::server::Server;
use anyhow::Result;
use std::path::PathBuf;

/// A story's world.
pub struct Scene {
    name: String,
    out: PathBuf,
    /// The server under test.
    pub server: Server,
    driver: Driver,
    browsers: Vec<Browser>,
}

impl Scene {
    /// Starts a server and a chromedriver for the story `name` (the test's
    /// name). Panics with the reason when it cannot: nothing to test then.
    pub async fn start(name: &str) -> Self {
        match Self::try_start(name).await {
            Ok(scene) => scene,
            Err(e) => panic!("cannot set the scene for {name}: {e:#}"),
        }
    }

    async fn try_start(name: &str) -> Result<Self> {
        let out = paths::output_dir()?;
        let server_log = out.join(format!("{name}.server.log"));
        let driver_log = out.join(format!("{name}.chromedriver.log"));
        for log in [&server_log, &driver_log] {
            let _ = std::fs::remove_file(log);
        }
        let server = Server::start(&server_log).await?;
        let driver = Driver::start(&driver_log).await?;
        Ok(Self {
            name: name.to_owned(),
            out,
            server,
            driver,
            browsers: Vec::new(),
        })
    }

    /// Opens a new browser (its own profile: its own cookies and storage)
    /// and loads the shop in it.
    pub async fn shopper(&mut self) -> Result<Page> {
        let browser = Browser::launch(&self.driver).await?;
        let page = Page::in_current_window(browser.client().clone(), &self.server.url()).await?;
        self.browsers.push(browser);
        page.open().await?;
        Ok(page)
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
                let page = Page::with_window(client.clone(), window, &self.server.url());
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
        for browser in self.browsers {
            let _ = browser.close().await;
        }
        drop(self.driver);
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
