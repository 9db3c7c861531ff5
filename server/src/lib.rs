//! An exactly-once checkout API.
//!
//! Every mutating request carries an `Idempotency-Key`. The server records
//! the key, a fingerprint of the request and the response **in the same
//! database transaction as the business write**, replays the stored
//! response to retries, refuses a reused key with another request (422),
//! never runs one operation twice under concurrency, and answers only once
//! the commit is durable.
//!
//! # Layout
//!
//! * [`config`]: flags and environment variables.
//! * [`startup`]: builds the store, the router and the listener.
//! * [`domain`]: `Caller`, `IdempotencyKey`, `Fingerprint`, `Amount`, …
//!   parsed once at the edge.
//! * [`idempotency`]: the flow, top to bottom: the edge ([`idempotency::keyed`]),
//!   replay, claim-run-record, answer; what a record holds and decides
//!   ([`idempotency::record`]).
//! * [`operation`]: what each business operation answers.
//! * [`store`]: the `Store` trait and the `Operation` each backend runs;
//!   [`store::sqlite`] the embedded backend (writer and group commit, read
//!   pool, schema, SQL), [`store::postgres`] the many-instance one.
//! * [`routes`]: one module per resource, each handler annotated with its
//!   OpenAPI description.
//! * [`openapi`]: `GET /openapi.json`, generated from those annotations,
//!   the answer types in [`openapi::responses`] and the schemas in
//!   [`openapi::schemas`].
//! * [`error`]: `ApiError`, rendered as `application/problem+json`; server
//!   errors logged once with their cause.
//! * [`chaos`]: `X-Chaos` fault injection for the demo and the tests.
//! * [`provider`]: the payment provider client (`--psp-url`), retried by
//!   the shared retry policy; [`completer`]: resumes abandoned operations;
//!   [`outbox`]: the receipt relay (`--smtp-url`).
//! * [`sweeper`]: deletes expired records in small batches; [`clock`]: the
//!   boot clock, which no one sets, for every duration that matters.
//! * [`metrics`]: Prometheus metrics; [`observe`]: the middleware that
//!   records each request's latency and logs its server error. Logs, the
//!   accept loop and the binary's `main` are the workspace's `serve` crate.
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
pub mod provider;
pub mod routes;
pub mod startup;
pub mod state;
pub mod steps;

pub use config::Config;
pub use startup::{Application, StartupError};
