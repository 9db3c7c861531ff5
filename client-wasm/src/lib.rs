//! Browser client that sends each logical operation (a checkout, a
//! reservation) with one idempotency key, kept across retries, timeouts,
//! reloads and tabs, so that the operation runs exactly once on the server.
//!
//! Built by `scripts/build-wasm.sh` into the npm package
//! `exactly-once-client` (`client-wasm/pkg/`, copied to `www/pkg/`); its JS
//! API is CONTRACT section 4, documented for page authors in
//! `docs/CLIENT.md`.
//!
//! # Layout
//!
//! The Rust side keeps the decisions; `js/browser.js` does the browser
//! plumbing that is smaller as plain JavaScript than as wasm-bindgen shims
//! (docs/BENCHMARKS-JOURNAL.md, "Client size levers").
//!
//! - [`api`]: the exported class `IdempotentClient`.
//! - `options`: the constructor's options as the key lifecycle and the
//!   retry policy need them, and the call arguments, checked at the edge.
//! - `client`: the state behind a client and the key lifecycle that needs
//!   no waiting (`keyFor`, `release`, `clear`, `pendingOperations`,
//!   `expiredOperations`, `abortAll`), and expiry (tombstones,
//!   `onExpired`, the device clock).
//! - `send`: one call as a synchronous state (`Sending`) whose steps
//!   (store, settle, attempt, decide) `run` in `js/browser.js` takes in
//!   turn, doing the waiting in between.
//! - `lock`: the cross-tab Web Lock, its fallbacks, and the settle that
//!   makes racing tabs agree on one key.
//! - `error`: why a call failed, as the `IdempotencyError` a page sees.
//! - `storage`: one versioned record per operation and owner (prefix and
//!   scope), in `localStorage` or in page memory when that is unavailable
//!   or full; `storage::record` is the record's schema, its upgrade from
//!   version 1, and what it forgets at the final answer (the request;
//!   plain Rust, tested on the host).
//! - `text`: keys and messages, without `core::fmt` (plain Rust, tested on
//!   the host).
//! - `js`: what is imported from JavaScript: `js/browser.js` (option
//!   objects, the call's `run` and its waits, `fetch` with its timeout,
//!   abort and credentials, the Web Lock and its wait, `localStorage` and
//!   the records' owner, `IdempotencyError` with its code and cause, the
//!   objects a page receives, `onExpired`, `shouldRetry`, the canonical
//!   JSON comparison, and the class's `fetch` and `fetcher`, which the
//!   package's entry adds) and a few globals.
//! - `browser_tests`: wasm-bindgen-test tests in headless Chromium and
//!   Firefox against a real server (`scripts/test-wasm.sh`). They live in
//!   the library because the crate is a `cdylib` only: with an `rlib`
//!   beside it, cargo skips LTO.
//!
//! The files import one another one way, with no circle: in the order
//! `api`, `send`, `client`, `options`, `storage` (and `storage::record`),
//! `error`, `js`, each imports only files after it, and `text` and `lock`
//! import none of them. (`js` hands `run` the `Sending` as a `JsValue`,
//! so that it needs nothing of `send`.)
//!
//! The retry policy (what is retried, backoff, `Retry-After`) is the
//! `exactly-once-retry` crate of this workspace, which the server uses for its
//! provider calls too. The wasm module carries no JSON crate: stored
//! records and request and answer bodies go through the browser's `JSON`.

// Without std in the release module: its panic machinery (hooks, messages,
// `core::fmt`) was 1.2 KB brotli of code for panics that never print
// anywhere (docs/BENCHMARKS-JOURNAL.md). Tests and the host build keep std. (So
// `cargo clippy --all-targets` for wasm32, which builds the library with
// the tests' std-enabled dependencies, cannot link it: check `--lib` and
// `--tests` apart there.)
#![cfg_attr(all(target_arch = "wasm32", not(test)), no_std)]

extern crate alloc;

/// A panic stops the module where it is: nothing could show its message.
#[cfg(all(target_arch = "wasm32", not(test)))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

/// A small free-list allocator: the client allocates little and briefly,
/// and std's dlmalloc would be a third of the module.
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: lol_alloc::LockedAllocator<lol_alloc::FreeListAllocator> =
    lol_alloc::LockedAllocator::new(lol_alloc::FreeListAllocator::new());

pub mod api;
mod client;
mod error;
mod js;
mod lock;
mod options;
mod send;
mod storage;
mod text;

pub use api::IdempotentClient;

#[cfg(all(test, target_arch = "wasm32"))]
mod browser_tests;
