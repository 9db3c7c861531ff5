//! Browser client that sends each logical operation (a checkout, a
//! reservation) with one idempotency key, kept across retries, timeouts,
//! reloads and tabs, so that the operation runs exactly once on the server.
//!
//! Built by wasm-pack (`--target web`) into `www/pkg/`; its JS API is
//! CONTRACT section 4, documented for page authors in `docs/CLIENT.md`.
//!
//! # Layout
//!
//! - [`api`]: the exported surface, `IdempotentClient`, its options and its
//!   outcome object; the send loop and the cross-tab Web Lock.
//! - `storage`: one versioned record per operation in `localStorage`, or in
//!   page memory when that is unavailable or full; `storage::record` is the
//!   record's text format (plain Rust, tested on the host).
//! - the retry policy (what is retried, how long to wait, `Retry-After`
//!   parsing) is the workspace crate `retry-policy`, shared with the server.
//! - `transport`: one `fetch` attempt with its timeout.
//! - `js`: the browser globals used, bound one by one.
//! - `browser_tests`: wasm-bindgen-test tests in headless Chromium against a
//!   real server (`scripts/test-wasm.sh`). They live in the library because
//!   the crate is a `cdylib` only: with an `rlib` beside it, cargo skips LTO.
//!
//! The wasm module carries no JSON crate: the record format has its own
//! small reader, and request and answer bodies go through the browser's
//! `JSON`.

/// A small free-list allocator: the client allocates little and briefly,
/// and std's dlmalloc would be a third of the module.
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: lol_alloc::LockedAllocator<lol_alloc::FreeListAllocator> =
    lol_alloc::LockedAllocator::new(lol_alloc::FreeListAllocator::new());

pub mod api;
mod js;
mod storage;
mod transport;

pub use api::IdempotentClient;

#[cfg(all(test, target_arch = "wasm32"))]
mod browser_tests;
