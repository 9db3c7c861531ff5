//! A payment provider simulator with Stripe's conventions, for the
//! checkout server's tests and demo (CONTRACT section 6, docs/PSP.md).
//!
//! `POST /v1/charges` charges a test card once per `Idempotency-Key`: the
//! same key with the same parameters replays the stored answer (a decline
//! included) with `Idempotent-Replayed: true`, with other parameters it is
//! refused (`400` `idempotency_error`). `GET /v1/charges` lists the ledger.
//! `POST /admin/faults` makes the next charge requests fail, drop their
//! answer, wait, or find the provider down.
//!
//! # Decisions
//!
//! * Flags `--listen`, `--database sqlite://PATH`, `--latency`; their
//!   environment variables are `PSP_LISTEN`, `PSP_DATABASE_URL` and
//!   `PSP_LATENCY` (not the server's `LISTEN`/`DATABASE_URL`: the demo
//!   starts both in one shell). Flags win.
//! * A charge request is parsed, waits `--latency` holding nothing, then
//!   runs in ONE SQLite transaction on the ledger's single writer thread:
//!   look the key up (replay or mismatch), or insert the ledger row and the
//!   key's stored answer together and commit before answering. Concurrent
//!   duplicates serialize there; the later ones replay.
//! * Refused requests (bad key, body or parameters: `400`
//!   `invalid_request_error`) store nothing; successes (`201`) and
//!   declines (`402`) are stored with the key for 24 hours.
//! * The fingerprint is all the parameters as canonical JSON.
//! * Faults live in memory only and count charge requests of any kind.
//!
//! # Layout
//!
//! * [`config`]: flags and `PSP_*` environment variables.
//! * [`startup`]: opens the ledger, builds the router, binds.
//! * [`domain`]: `IdempotencyKey`, `ChargeParams` (amount, currency, test
//!   card, metadata) and their fingerprint, `ChargeId`, the stored `Answer`.
//! * [`ledger`]: the SQLite file and its one writer thread.
//! * [`routes`]: `charges` (create, list) and `faults` (admin).
//! * [`faults`]: the pending fault and the middleware that applies it.
//! * [`error`]: `ApiError`, rendered in Stripe's error shape.
//! * Logs, the accept loop (with the connection handle `drop-after-charge`
//!   uses) and the binary's `main` are the workspace's `serve` crate.

pub mod config;
pub mod domain;
pub mod error;
pub mod faults;
pub mod ledger;
pub mod routes;
pub mod startup;

pub use config::Config;
pub use startup::{Application, StartupError};
