//! What the browser tests written in JavaScript share: the environment each
//! test gets, `page.js` (the helpers in scope of every test: `check`, `eq`,
//! `rejects`, `setup`, ...), and [`run`], which runs one test of a file's
//! source. Each test gets the class (from an instance made in Rust), the
//! server, the portal (`client-wasm/browser-support/portal.mjs`) and its
//! own storage prefix and bearer token, and throws on the first thing that
//! is wrong.
//!
//! A file's tests are a string (`TESTS`) that `page.js` compiles once,
//! not an inline snippet each: the test page then loads two modules of
//! ours instead of one per file. (With a snippet per file, Chromium's page
//! never ran under the test runner's HTTP server: some of its many module
//! requests were left unread, and chromedriver gave up after 300 s.)

use super::*;

#[wasm_bindgen(module = "/src/browser_tests/page.js")]
extern "C" {
    /// A failed test's error: its message, then its stack.
    fn describe(error: &JsValue) -> String;

    /// Runs the exported function `name` of `source` with `env` and `arg`.
    #[wasm_bindgen(js_name = run)]
    fn run_test(source: &str, name: &str, env: JsValue, arg: &str) -> Promise;
}

/// Runs test `name` of a file's `source` (its `TESTS`) with a fresh
/// environment and `arg` (a fixture, a policy, or `""`); panics with the
/// error's message and stack when it throws.
pub(super) async fn run(source: &str, name: &str, arg: &str) {
    passed(run_test(source, name, env(), arg)).await;
}

#[wasm_bindgen(module = "/js/browser.js")]
extern "C" {
    /// What the package's entry does to the class at load: gives it
    /// `fetch` (tested here on the class of this build).
    #[wasm_bindgen(js_name = withFetch)]
    fn with_fetch(class: &JsValue);
}

/// What a test's JavaScript gets: the class (with `fetch`, as the package
/// exports it), the server, the portal, and its own prefix and token.
fn env() -> JsValue {
    let setup = Setup::new();
    let instance: JsValue = setup.client(None).into();
    let class = get(&instance, "constructor");
    with_fetch(&class);
    object(&[
        ("Client", class),
        ("server", server().into()),
        ("portal", portal().into()),
        ("prefix", setup.prefix.as_str().into()),
        ("token", setup.token.as_str().into()),
    ])
}

/// Awaits a test's promise; panics with its error's message and stack.
async fn passed(test: Promise) {
    if let Err(e) = JsFuture::from(test).await {
        panic!("{}", describe(&e));
    }
}
