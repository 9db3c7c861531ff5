//! An exactly-once checkout API: the demo shop, the first user of the
//! [`exactly_once`] engine.
//!
//! Every mutating request carries an `Idempotency-Key`. The engine records
//! the key, a fingerprint of the request and the response **in the same
//! database transaction as the business write**, replays the stored
//! response to retries, refuses a reused key with another request (422),
//! never runs one operation twice under concurrency, and answers only once
//! the commit is durable. This crate is the shop around it, and reaches the
//! engine through its public API alone.
//!
//! # Layout
//!
//! * [`config`]: flags and environment variables; [`urls`]: the URLs they
//!   name, parsed (a password shown as `***`).
//! * [`startup`]: opens the engine's store with the shop's migrations,
//!   builds the state, the router and the listener, and runs the engine's
//!   background tasks (sweeper, completer, receipt relay).
//! * [`domain`]: the shop's types (`Amount`, `PaymentMethod`, the session
//!   token reduced to the engine's `Caller`, …), parsed once at the edge.
//! * [`operation`]: the shop's operations as the engine runs them (their
//!   `Operation` impls) and what each answers; [`db`]: their SQL on each
//!   backend, and the shop's reads.
//! * [`steps`]: the step between a charge's phases (the provider call);
//!   [`provider`]: the payment provider client (`--psp-url`), retried by
//!   the shared retry policy; [`mailer`]: receipts by SMTP (`--smtp-url`),
//!   the engine's outbox transport.
//! * [`routes`]: one module per resource, each handler annotated with its
//!   OpenAPI description; [`routes::api`] gathers them into the router and
//!   the document `GET /openapi.json` serves.
//! * [`openapi`]: the document's fixed parts, the answer types in
//!   [`openapi::responses`] and the schemas in [`openapi::schemas`].
//! * [`error`]: `ApiError`, the shop's errors beside the engine's, rendered
//!   as `application/problem+json`.
//! * [`chaos`]: `X-Chaos` fault injection for the demo and the tests (the
//!   engine's `Faults`).
//! * [`operations`]: `server operations list|show|retry|settle`, the
//!   operator's commands (the engine's [`exactly_once::operator`]), and
//!   the demo's `GET /operations` (with `--chaos`).
//! * [`metrics`]: the shop's Prometheus metrics beside the engine's
//!   (served by [`routes::metrics`]);
//!   [`observe`]: the middleware that records each request's latency and
//!   logs its server error; [`rate`]: `--caller-rate`, requests a second
//!   per caller. Logs, the accept loop and the binary's `main`
//!   are the workspace's `serve` crate.
//!
//! Feature-gated, never in a default build: `fuzzing`, the bodies of the
//! `cargo fuzz` targets (replayed by a test). The benchmark's tools (load
//! generator, floor servers) are another package, `bench/`.

pub mod chaos;
pub mod config;
pub mod db;
pub mod domain;
pub mod error;
/// The bodies of the `cargo fuzz` targets in `fuzz/` (docs/FUZZING.md).
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod mailer;
pub mod metrics;
pub mod observe;
pub mod openapi;
pub mod operation;
pub mod operations;
pub mod provider;
pub mod rate;
pub mod routes;
pub mod startup;
pub mod state;
pub mod steps;
pub mod urls;

pub use config::Config;
pub use startup::{Application, StartupError};

/// The README's Rust quick start ("Quick start 2: your Rust service"),
/// compiled by `cargo test --doc` (`no_run`: its `main` serves forever).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeQuickStart;

/// docs/RUST.md's snippets (the engine without axum, your own pool),
/// compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/RUST.md")]
pub struct DocsRust;

/// docs/END-TO-END.md's service (the engine in your own app state, with
/// the CORS headers the browser client needs), compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/END-TO-END.md")]
pub struct DocsEndToEnd;
