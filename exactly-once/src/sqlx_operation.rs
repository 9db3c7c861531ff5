//! [`SqlxOperation`]: an operation on your `sqlx::PgPool` written as a
//! plain `async fn`; the engine boxes the future it needs
//! ([`Operation<Sqlx>`](crate::Operation) comes from it).

use crate::backend::{BoxFuture, Operation, RunContext};
use crate::record::PhaseEnd;
use crate::store::postgres::on_sqlx::Sqlx;
use crate::store::Result;
use sqlx::PgConnection;
use std::fmt;
use std::future::Future;
use std::time::Duration;

/// An operation (or one phase of one) on sqlx: your sqlx queries on the
/// connection of the engine's transaction, as an `async fn`. A type that
/// implements it is an [`Operation<Sqlx>`](crate::Operation).
///
/// ```
/// use exactly_once::postgres::sqlx::SqlxOperation;
/// use exactly_once::postgres::Result;
/// use exactly_once::{PhaseEnd, RunContext, StoredResponse};
///
/// #[derive(Debug)]
/// struct AddNote { text: String }
///
/// impl SqlxOperation for AddNote {
///     async fn run(&self, conn: &mut sqlx::PgConnection, _at: &RunContext<'_>) -> Result<PhaseEnd> {
///         let (id,): (i64,) = sqlx::query_as("INSERT INTO notes (text) VALUES ($1) RETURNING id")
///             .bind(&self.text)
///             .fetch_one(&mut *conn)
///             .await?;
///         let note = serde_json::json!({ "id": id, "text": self.text });
///         Ok(PhaseEnd::Finished(StoredResponse::json(http::StatusCode::CREATED, &note)))
///     }
/// }
/// ```
pub trait SqlxOperation: fmt::Debug + Send + Sync + 'static {
    /// Runs the change on `conn`, inside the engine's transaction, and
    /// says how the phase ended.
    fn run(
        &self,
        conn: &mut PgConnection,
        at: &RunContext<'_>,
    ) -> impl Future<Output = Result<PhaseEnd>> + Send;

    /// How long this operation's key is remembered once it finished, when
    /// not the store's ([`Operation::key_ttl`]); `None` by default.
    fn key_ttl(&self) -> Option<Duration> {
        None
    }
}

impl<T: SqlxOperation> Operation<Sqlx> for T {
    fn run<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        at: &'a RunContext<'a>,
    ) -> BoxFuture<'a, Result<PhaseEnd>> {
        Box::pin(SqlxOperation::run(self, conn, at))
    }

    fn key_ttl(&self) -> Option<Duration> {
        SqlxOperation::key_ttl(self)
    }
}
