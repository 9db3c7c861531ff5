//! [`PostgresOperation`]: an operation on PostgreSQL written as a plain
//! `async fn`; the engine boxes the future it needs
//! ([`Operation<Postgres>`](crate::Operation) comes from it).

use crate::backend::{BoxFuture, Operation, RunContext};
use crate::record::PhaseEnd;
use crate::store::postgres::{OneStatement, Postgres, Transaction};
use crate::store::Result;
use std::fmt;
use std::future::Future;
use std::time::Duration;

/// An operation (or one phase of one) on PostgreSQL: your SQL in the
/// request's own transaction, as an `async fn`. A type that implements it
/// is an [`Operation<Postgres>`](crate::Operation) (and, with
/// `Operation<Sqlite>`, an `Operation<Any>`).
///
/// ```
/// use exactly_once::postgres::{PostgresOperation, Result, Transaction};
/// use exactly_once::{PhaseEnd, RunContext, StoredResponse};
///
/// #[derive(Debug)]
/// struct AddNote { text: String }
///
/// impl PostgresOperation for AddNote {
///     async fn run(&self, tx: &Transaction<'_>, at: &RunContext<'_>) -> Result<PhaseEnd> {
///         let sql = "INSERT INTO notes (text, at) VALUES ($1, $2)";
///         tx.execute(sql, &[&self.text, &at.now_ms]).await?;
///         Ok(PhaseEnd::Finished(StoredResponse::json(http::StatusCode::CREATED, &())))
///     }
/// }
/// ```
pub trait PostgresOperation: fmt::Debug + Send + Sync + 'static {
    /// Runs the change in `tx` and says how the phase ended.
    fn run(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> impl Future<Output = Result<PhaseEnd>> + Send;

    /// The first phase as part of its key's claim, in one statement
    /// ([`Operation::one_statement`]); `None` by default.
    fn one_statement(&self) -> Option<OneStatement> {
        None
    }

    /// How long this operation's key is remembered once it finished, when
    /// not the store's ([`Operation::key_ttl`]); `None` by default.
    fn key_ttl(&self) -> Option<Duration> {
        None
    }
}

impl<T: PostgresOperation> Operation<Postgres> for T {
    fn run<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        at: &'a RunContext<'a>,
    ) -> BoxFuture<'a, Result<PhaseEnd>> {
        Box::pin(PostgresOperation::run(self, tx, at))
    }

    fn one_statement(&self) -> Option<OneStatement> {
        PostgresOperation::one_statement(self)
    }

    fn key_ttl(&self) -> Option<Duration> {
        PostgresOperation::key_ttl(self)
    }
}
