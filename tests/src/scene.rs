//! One story: a fresh server, a chromedriver, the browsers the story opens.
//! A story sets its scene with [`scene!`](crate::scene!), which names it
//! after the test function it is written in, so a renamed story cannot save
//! its screenshots and logs under a stale name. [`Scene::finish`] saves a
//! screenshot of every window under `target/e2e/` and, when the story
//! failed, panics with what each page showed and where the logs are.

use crate::browser::{Browser, Driver};
use crate::page::Page;
use crate::paths;
use anyhow::Result;
use std::path::PathBuf;
use testkit::{Database, Server};

/// Sets the scene for the story it is written in: `scene!().await` is
/// [`Scene::start`] with the enclosing test function's name.
#[macro_export]
macro_rules! scene {
    () => {
        $crate::Scene::start($crate::test_name!())
    };
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
    /// Starts a server and a chromedriver for the story `name`. Panics
    /// with the reason when it cannot: nothing to test then. Stories call
    /// it through [`scene!`](crate::scene!), which passes their own name.
    #[doc(hidden)]
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
        let server = Server::builder()
            .chaos()
            .database(Database::sqlite()?)
            .www(paths::www_dir()?)
            .log(&server_log)
            .start()
            .await?;
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
        let page =
            Page::in_current_window(browser.client().clone(), &self.server.base_url()).await?;
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
                let page = Page::with_window(client.clone(), window, &self.server.base_url());
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
