//! Browser client that sends each logical operation (a checkout, a
//! reservation) with one idempotency key, kept across retries, timeouts,
//! reloads and tabs, so that the operation runs exactly once on the server.
//!
//! Built by wasm-pack (`--target web`) into `www/pkg/`; its JS API is
//! CONTRACT section 4, documented for page authors in `docs/CLIENT.md`.
//!
//! # Layout
//!
//! - [`api`]: the exported class `IdempotentClient` and the module's
//!   TypeScript declarations.
//! - `options`: the constructor's and each call's options, and the call
//!   arguments, checked at the edge.
//! - `client`: the state behind a client and the key lifecycle that needs
//!   no waiting (`keyFor`, `release`, `pendingOperations`).
//! - `send`: the send loop of one call: store, settle, attempt, report,
//!   wait or stop.
//! - `lock`: the cross-tab Web Lock, its fallbacks, and the settle that
//!   makes racing tabs agree on one key.
//! - `abort`: the caller's `AbortSignal` as something every wait races.
//! - `error`: `IdempotencyError`, what every rejection is.
//! - `transport`: one `fetch` attempt with its timeout, no redirects for
//!   requests with effects.
//! - `storage`: one versioned record per operation in `localStorage`, or in
//!   page memory when that is unavailable or full; `storage::record` is the
//!   record's schema and `storage::reader` its JSON reader (plain Rust,
//!   tested on the host).
//! - `text`: keys and messages, without `core::fmt` (plain Rust, tested on
//!   the host).
//! - `js`: the browser globals used, bound one by one.
//! - `browser_tests`: wasm-bindgen-test tests in headless Chromium and
//!   Firefox against a real server (`scripts/test-wasm.sh`). They live in
//!   the library because the crate is a `cdylib` only: with an `rlib`
//!   beside it, cargo skips LTO.
//!
//! The retry policy (what is retried, backoff, `Retry-After`) is the
//! `retry-policy` crate of this workspace, which the server uses for its
//! provider calls too. The wasm module carries no JSON crate: the record
//! format has its own small reader, and request and answer bodies go
//! through the browser's `JSON`.

/// A small free-list allocator: the client allocates little and briefly,
/// and std's dlmalloc would be a third of the module.
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: lol_alloc::LockedAllocator<lol_alloc::FreeListAllocator> =
    lol_alloc::LockedAllocator::new(lol_alloc::FreeListAllocator::new());

mod abort;
pub mod api;
mod client;
mod error;
mod js;
mod lock;
mod options;
mod send;
mod storage;
mod text;
mod transport;

pub use api::IdempotentClient;
pub use error::IdempotencyError;

#[cfg(all(test, target_arch = "wasm32"))]
mod browser_tests;
