//! The database an engine runs on, as a type: [`Backend`], and what your
//! operations write on it, [`Operation`].
//!
//! An [`Engine<B>`](crate::Engine) runs operations that implement
//! [`Operation<B>`]: an operation that does not say how it runs on the
//! engine's database is a compile error, not a 500 at run time. Each
//! backend is a type of its own module, with its store:
//!
//! | backend | you implement | your operation receives | its run returns | store |
//! |---|---|---|---|---|
//! | [`Sqlite`](crate::Sqlite) | `Operation<Sqlite>` | `&rusqlite::Connection`, inside the writer's savepoint | `rusqlite::Result<PhaseEnd>` | [`SqliteStore`](crate::SqliteStore) |
//! | [`Postgres`](crate::Postgres) | [`PostgresOperation`](crate::postgres::PostgresOperation) (an `async fn`) | `&deadpool_postgres::Transaction`, the request's own | [`Result<PhaseEnd>`](crate::postgres::Result) | [`PostgresStore`](crate::PostgresStore) |
//! | [`Any`](crate::Any) | both of the above | either, as the URL says at start-up | either | [`AnyStore`](crate::AnyStore) |
//!
//! [`Any`](crate::Any) is for an application that picks its database at
//! run time (the demo shop: SQLite by default, PostgreSQL by URL): its
//! operations implement both `Operation<Sqlite>` and `Operation<Postgres>`,
//! and get `Operation<Any>` from them.
//!
//! An operation that forgot a backend does not compile where an engine
//! over that backend runs it. This one says how it runs on SQLite alone,
//! and an `Engine<Any>` (which may be on PostgreSQL) refuses it:
//!
//! ```compile_fail
//! use exactly_once::{Any, IdempotentRequest, Engine, NoFaults, Operation, PhaseEnd, RunContext, Sqlite};
//!
//! #[derive(Debug)]
//! struct SqliteOnly;
//!
//! impl Operation<Sqlite> for SqliteOnly {
//!     fn run(&self, _: &rusqlite::Connection, _: &RunContext<'_>) -> rusqlite::Result<PhaseEnd> {
//!         Ok(PhaseEnd::stop("never", &()))
//!     }
//! }
//!
//! async fn handle(engine: Engine<Any>, request: IdempotentRequest) {
//!     let body = serde_json::Value::Null;
//!     let _ = engine.execute(request, &body, &NoFaults, |_| Ok::<_, ()>(SqliteOnly)).await;
//! }
//! ```
//!
//! With its PostgreSQL half it does (the same code, one impl more):
//!
//! ```
//! # #[cfg(all(feature = "sqlite", feature = "postgres"))] mod demo {
//! use exactly_once::postgres::{PostgresOperation, Result, Transaction};
//! use exactly_once::{Any, Engine, IdempotentRequest, NoFaults, Operation, PhaseEnd, RunContext, Sqlite};
//!
//! #[derive(Debug)]
//! struct Both;
//!
//! impl Operation<Sqlite> for Both {
//!     fn run(&self, _: &rusqlite::Connection, _: &RunContext<'_>) -> rusqlite::Result<PhaseEnd> {
//!         Ok(PhaseEnd::stop("never", &()))
//!     }
//! }
//!
//! impl PostgresOperation for Both {
//!     async fn run(&self, _: &Transaction<'_>, _: &RunContext<'_>) -> Result<PhaseEnd> {
//!         Ok(PhaseEnd::stop("never", &()))
//!     }
//! }
//!
//! async fn handle(engine: Engine<Any>, request: IdempotentRequest) {
//!     let body = serde_json::Value::Null;
//!     let _ = engine.execute(request, &body, &NoFaults, |_| Ok::<_, ()>(Both)).await;
//! }
//! # }
//! ```
//!
//! The backends are sealed: the engine's protocol on each (how it claims
//! a key, records a phase, holds a lease) lives inside its store, private
//! to this crate.

use crate::caller::Caller;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A future that may move between threads, borrowing for `'a`: what an
/// operation's run returns on an asynchronous backend.
#[cfg_attr(
    not(any(feature = "postgres", feature = "sqlx")),
    allow(unreachable_pub, dead_code)
)]
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A database the engine runs on ([`Operation`] says what runs on it). Sealed: the
/// backends are this crate's.
pub trait Backend: sealed::Sealed + Send + Sync + Sized + 'static {
    /// What an operation writes with: the backend's own transaction (or,
    /// on SQLite, the writer's connection inside the operation's
    /// savepoint).
    type Transaction<'t>;

    /// What an operation's run returns: the phase's end at once on SQLite
    /// (its writer thread runs it), a future of it on PostgreSQL.
    type RunOutput<'t>;

    /// An operation's first phase said as one statement, which the backend
    /// may batch with other requests' ([`Operation::one_statement`]); on a
    /// backend that has no such form, a type with no values.
    type OneStatement: Send;

    /// The backend's name, for messages: `"sqlite"`, `"postgres"`.
    const NAME: &'static str;
}

pub(crate) mod sealed {
    /// Only this crate's backends are backends.
    pub trait Sealed {}
}

/// An operation (or one phase of one) an idempotency key protects, on the
/// backend `B`: your own type, whose SQL runs inside the transaction that
/// records its key, ending in a [`PhaseEnd`](crate::PhaseEnd).
///
/// On SQLite the connection is the writer's, inside a savepoint of its
/// own: the engine commits many requests together (group commit), and an
/// error rolls back this operation's savepoint alone. Keep it short: it
/// holds the writer.
///
/// ```
/// # #[cfg(feature = "sqlite")] mod demo {
/// use exactly_once::{Operation, RunContext, Sqlite, PhaseEnd, StoredResponse};
///
/// #[derive(Debug)]
/// struct AddNote { text: String }
///
/// impl Operation<Sqlite> for AddNote {
///     fn run(&self, conn: &rusqlite::Connection, at: &RunContext<'_>) -> rusqlite::Result<PhaseEnd> {
///         conn.execute("INSERT INTO notes (text, at) VALUES (?1, ?2)", (&self.text, at.now_ms))?;
///         Ok(PhaseEnd::Finished(StoredResponse::new(http::StatusCode::CREATED, "application/json", "{}")))
///     }
/// }
/// # }
/// ```
///
/// On PostgreSQL the transaction is the request's own, and the run an
/// `async fn`: implement
/// [`PostgresOperation`](crate::postgres::PostgresOperation), which makes
/// the type an `Operation<Postgres>`.
pub trait Operation<B: Backend>: fmt::Debug + Send + Sync + 'static {
    /// Runs the change in `tx` and says how the phase ended.
    fn run<'a>(&'a self, tx: B::Transaction<'a>, at: &'a RunContext<'a>) -> B::RunOutput<'a>;

    /// The first phase as part of its key's claim, in one statement, when
    /// the operation's answer is known before the database is touched;
    /// many such requests share one statement (PostgreSQL:
    /// [`OneStatement`](crate::store::postgres::OneStatement)). `None` (the
    /// default): it runs in a transaction ([`run`](Operation::run)).
    fn one_statement(&self) -> Option<B::OneStatement> {
        None
    }

    /// How long this operation's key is remembered once it finished, when
    /// it is not the store's `key_ttl`: a payment's key for a week, a
    /// cart's for an hour. `None` (the default): the store's. Read when
    /// the record is written: the phase that finishes the operation
    /// decides.
    fn key_ttl(&self) -> Option<Duration> {
        None
    }
}

/// A route that runs one of several operations (in one phase or in two,
/// by configuration, say) returns it boxed.
impl<B: Backend> Operation<B> for Box<dyn Operation<B>> {
    fn run<'a>(&'a self, tx: B::Transaction<'a>, at: &'a RunContext<'a>) -> B::RunOutput<'a> {
        (**self).run(tx, at)
    }

    fn one_statement(&self) -> Option<B::OneStatement> {
        (**self).one_statement()
    }

    fn key_ttl(&self) -> Option<Duration> {
        (**self).key_ttl()
    }
}

/// What an operation sees of the request running it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RunContext<'a> {
    /// Whose operation.
    pub caller: &'a Caller,
    /// Its key (with the caller: [`crate::OperationId`]), for
    /// a row that should say which operation wrote it.
    pub key: &'a IdempotencyKey,
    /// The transaction's time on the wall clock, Unix milliseconds, for
    /// what people read (a row's creation time).
    pub now_ms: i64,
    /// The transaction's time on the store's own clock, milliseconds, for
    /// what is scheduled (a message due now); on PostgreSQL the SQL uses
    /// `now()` and this is the wall clock.
    pub store_ms: i64,
    /// The request that started the operation.
    pub fingerprint: &'a Fingerprint,
    /// Which life of the key this is (see
    /// [`Lease::generation`](crate::Lease::generation)).
    pub generation: u64,
}

impl RunContext<'_> {
    /// The operation's downstream key
    /// ([`Lease::downstream_key`](crate::Lease::downstream_key)), for a
    /// first phase that records it or names a row after it.
    pub fn downstream_key(&self) -> String {
        crate::operation_id::OperationId::new(self.caller, self.key)
            .downstream_key_for(self.fingerprint, self.generation)
    }
}
