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
//! * [`serve`]: the accept loop, graceful shutdown, connection control.
//! * [`domain`]: `Caller`, `IdempotencyKey`, `Fingerprint`, `Amount`, …
//!   parsed once at the edge.
//! * [`idempotency`]: the flow: parse, replay, run once, answer.
//! * [`operation`]: the business operations and the responses they record.
//! * [`store`]: the `Store` trait; [`store::sqlite`] the embedded backend
//!   with its single writer and group commit.
//! * [`routes`]: one module per resource.
//! * [`error`]: `ApiError`, rendered as `application/problem+json`.
//! * [`chaos`]: `X-Chaos` fault injection for the demo and the tests.
//! * [`sweeper`]: deletes expired records in small batches.
//! * [`metrics`], [`telemetry`]: Prometheus metrics and structured logs.

pub mod chaos;
pub mod config;
pub mod domain;
pub mod error;
/// The bodies of the `cargo fuzz` targets in `fuzz/` (docs/FUZZING.md).
#[doc(hidden)]
pub mod fuzzing;
pub mod idempotency;
pub mod metrics;
pub mod operation;
pub mod routes;
pub mod serve;
pub mod startup;
pub mod state;
pub mod store;
pub mod sweeper;
pub mod telemetry;

pub use config::Config;
pub use startup::{Application, StartupError};
