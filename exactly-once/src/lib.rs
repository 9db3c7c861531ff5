#![doc = include_str!("../README.md")]
//!
//! # Layout
//!
//! * [`Engine`]: what handlers and tasks share; [`Engine::execute`], the
//!   flow with no HTTP types (replay, claim, run, record, answer);
//!   [`Keyed`], a keyed JSON request, and its adapters: the axum extractor
//!   with [`Engine::run`] (feature `axum`), and [`KeyedLayer`] for any
//!   tower service (feature `tower`).
//! * [`Backend`]: the database an engine runs on, as a type: [`Sqlite`]
//!   (feature `sqlite`), [`Postgres`] (feature `postgres`), `Sqlx`
//!   (feature `sqlx`) and [`Any`] (both: whichever the URL names at
//!   start-up); each opens with [`StoreOptions`].
//! * [`Operation<B>`](Operation) and [`PhaseEnd`]: your SQL inside the
//!   engine's transaction on backend `B`, and how a phase ends; [`Steps`]:
//!   your work between phases. [`sqlite`] and [`postgres`]: what an
//!   operation writes with on each.
//! * [`outbox`]: messages written with your transaction and relayed by a
//!   [`Transport`](outbox::Transport) of yours.
//! * [`Engine::completer`], [`Engine::sweeper`], [`Engine::relay`]: the
//!   background tasks.
//! * [`operator`]: what an operator does: list unfinished operations, show,
//!   retry and settle one ([`Engine::list_operations`] and the rest).
//! * [`Error`] and [`Problem`]: `application/problem+json` answers;
//!   [`StoreError`]: a store's failure, sorted.
//! * [`Metrics`]: Prometheus metrics; [`faults`]: fault injection.
//! * [`Caller`], [`IdempotencyKey`], [`Fingerprint`], [`OperationId`]:
//!   what identifies an operation.
//! * [`secrets`]: URLs and log lines with their passwords hidden; `tls`
//!   (feature `tls`): rustls clients that trust the platform's roots and
//!   `SSL_CERT_FILE`.
//!
//! The design, for contributors: `docs/ENGINE.md` in the repository.

#![warn(missing_docs)]
// With no backend the crate is its types alone: the flow's machinery is
// there, unused.
#![cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "sqlx")),
    allow(dead_code, unused_imports, unreachable_pub)
)]

#[macro_use]
mod macros;

#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod any;
mod backend;
mod cache;
mod caller;
mod clock;
mod completer;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod database_url;
mod engine;
mod error;
pub mod faults;
mod fingerprint;
mod flow;
mod key;
mod metrics;
mod operation_id;
pub mod operator;
pub mod outbox;
#[cfg(feature = "postgres")]
mod postgres_operation;
mod record;
pub mod secrets;
#[cfg(feature = "sqlx")]
mod sqlx_operation;
mod store;
mod sweeper;
#[cfg(feature = "tls")]
pub mod tls;
pub mod workspace;

#[cfg(all(feature = "sqlite", feature = "postgres"))]
pub use any::{Any, AnyStore};
pub use backend::{Backend, Operation, RunContext};
pub use caller::Caller;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
pub use database_url::DatabaseUrl;
pub use engine::{Engine, EngineBuilder, NoSteps, Replay, Steps};
pub use error::{Error, Problem, StepUnavailable};
pub use faults::{Faults, NoFaults};
pub use fingerprint::Fingerprint;
pub use flow::keyed::{Keyed, MAX_BODY_BYTES};
#[cfg(feature = "tower")]
pub use flow::layer::{KeyedLayer, KeyedService};
pub use flow::Refused;
pub use key::{IdempotencyKey, IdempotencyKeyError};
pub use metrics::Metrics;
pub use operation_id::OperationId;
pub use record::{Answer, Lease, PhaseEnd, StoredResponse, IDEMPOTENT_REPLAYED};
pub use store::placement::Placement;
#[cfg(feature = "sqlx")]
pub use store::postgres::on_sqlx::{Sqlx, SqlxStore};
#[cfg(feature = "postgres")]
pub use store::postgres::{Postgres, PostgresStore};
pub use store::schema::Migration;
#[cfg(feature = "sqlite")]
pub use store::sqlite::{Sqlite, SqliteStore};
pub use store::{Durability, IdempotentRequest, StoreError, StoreErrorKind, StoreOptions};

#[cfg(feature = "sqlite")]
pub mod sqlite {
    //! What an [`Operation<Sqlite>`](crate::Operation) writes with besides
    //! its `&rusqlite::Connection`: how SQLite's errors are sorted
    //! ([`classify`]; `?` does it too). Its messages:
    //! [`outbox::enqueue`](crate::outbox::enqueue).
    pub use crate::store::sqlite::{classify, Sqlite, SqliteStore};
}

#[cfg(any(feature = "postgres", feature = "sqlx"))]
pub mod postgres {
    //! What an [`Operation<Postgres>`](crate::Operation) writes with
    //! (feature `postgres`): the request's `Transaction`, statements said
    //! once (`Sql`), the one-statement first phase (`OneStatement`); its
    //! messages: [`outbox::enqueue`](crate::outbox::enqueue); how errors are sorted ([`classify`]; `?` does it
    //! too); and, in [`sqlx`] (feature `sqlx`, standalone), the same on
    //! your `sqlx::PgPool`.
    pub use crate::backend::BoxFuture;
    #[cfg(feature = "postgres")]
    pub use crate::postgres_operation::PostgresOperation;
    pub use crate::store::postgres::{classify, DbError};
    #[cfg(feature = "postgres")]
    pub use crate::store::postgres::{
        Conn, Index, Insert, OneStatement, Param, PgRow, Postgres, PostgresStore, Shape, Sql,
        Transaction, Values,
    };
    pub use crate::store::Result;

    #[cfg(feature = "sqlx")]
    pub mod sqlx {
        //! The engine on your `sqlx::PgPool` ([`SqlxStore`]): operations
        //! write with sqlx queries in the engine's transaction.
        pub use crate::sqlx_operation::SqlxOperation;
        pub use crate::store::postgres::on_sqlx::{Sqlx, SqlxConn, SqlxStore};
    }
}
