#![doc = include_str!("../README.md")]
//!
//! # Layout
//!
//! * [`Engine`]: what handlers and tasks share; [`Engine::execute`], the
//!   flow with no HTTP types (replay, claim, run, record, answer);
//!   [`Keyed`], a keyed JSON request, and its adapters: the axum extractor
//!   with [`Engine::run`], and [`KeyedLayer`] for any tower service.
//! * [`Backend`]: the database an engine runs on, as a type: [`Sqlite`]
//!   (feature `sqlite`), [`Postgres`] (feature `postgres`), and [`Any`]
//!   (both: whichever the URL names at start-up).
//! * [`Operation<B>`](Operation) and [`PhaseEnd`]: your SQL inside the
//!   engine's transaction on backend `B`, and how a phase ends; [`Steps`]:
//!   your work between phases.
//! * [`store`]: the [`Store`] protocol; [`SqliteStore`], [`PostgresStore`]
//!   and [`AnyStore`].
//! * [`outbox`]: messages written with your transaction and relayed by a
//!   [`Transport`](outbox::Transport) of yours.
//! * [`Engine::completer`], [`Engine::sweeper`], [`Engine::relay`]: the
//!   background tasks.
//! * [`operator`]: what an operator does: list unfinished operations, show,
//!   retry and settle one ([`Engine::list_operations`] and the rest).
//! * [`Error`] and [`Problem`]: `application/problem+json` answers.
//! * [`Metrics`]: Prometheus metrics; [`Faults`]: fault injection.
//! * [`Caller`], [`IdempotencyKey`], [`Fingerprint`], [`OperationId`]:
//!   what identifies an operation; [`clock`]: the boot clock.
//! * `tls` (feature `tls`, with `postgres`): rustls clients that trust
//!   the platform's roots and `SSL_CERT_FILE`.
//!
//! The design, for contributors: `docs/ENGINE.md` in the repository.

#![warn(missing_docs)]

#[macro_use]
mod macros;

#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod any;
pub mod backend;
mod cache;
mod caller;
pub mod clock;
mod completer;
mod engine;
pub mod error;
pub mod faults;
mod fingerprint;
mod flow;
pub mod key;
pub mod metrics;
mod operation_id;
pub mod operator;
pub mod outbox;
pub mod record;
pub mod secrets;
pub mod store;
pub mod sweep;
mod sweeper;
#[cfg(feature = "tls")]
pub mod tls;

#[cfg(all(feature = "sqlite", feature = "postgres"))]
pub use any::{Any, AnyStore};
pub use backend::{Backend, Operation, RunContext};
pub use caller::Caller;
pub use engine::{Engine, EngineBuilder, NoSteps, Replay, Shared, Steps};
pub use error::{Error, Problem, StepUnavailable};
pub use faults::{Faults, NoFaults};
pub use fingerprint::Fingerprint;
pub use flow::keyed::{Keyed, MAX_BODY_BYTES};
pub use flow::layer::{KeyedLayer, KeyedService};
pub use flow::{respond, Refused};
pub use key::{IdempotencyKey, IdempotencyKeyError};
pub use metrics::Metrics;
pub use operation_id::OperationId;
pub use record::{Answer, Lease, PhaseEnd, Record, StoredResponse, IDEMPOTENT_REPLAYED};
#[cfg(feature = "sqlx")]
pub use store::postgres::on_sqlx::{Sqlx, SqlxStore};
#[cfg(feature = "postgres")]
pub use store::postgres::{Postgres, PostgresStore};
pub use store::schema::Migration;
#[cfg(feature = "sqlite")]
pub use store::sqlite::{Sqlite, SqliteStore};
pub use store::{Durability, Store, StoreError, StoreOptions};
