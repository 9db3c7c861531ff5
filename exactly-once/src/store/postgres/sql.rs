//! Statements as this backend sends them: each with its parameters'
//! types, in one round trip; named and cached on a direct connection,
//! unnamed behind a pooler.
//!
//! A named prepared statement lives on one server connection. On a URL
//! without `pgbouncer=true` the store's connections are the server's own
//! for life, so each statement is prepared once per connection (deadpool's
//! statement cache) and later uses only bind and run it: the server parses
//! and analyses it once. Behind PgBouncer in transaction mode
//! (`pgbouncer=true`) consecutive transactions of one client connection
//! run on different server connections, so a statement prepared in one is
//! missing in the next (`prepared statement "s3" does not exist`), and two
//! clients' names collide on a third: there every statement is unnamed
//! (tokio-postgres's `query_typed`), parsed, bound and run in the one
//! message sequence that uses it, which works behind any pooler. On a
//! pool of yours ([`super::PostgresStore::with_pool`]) statements are
//! unnamed unless your code keeps named ones on its connections (their
//! statement cache holds some). docs/BENCHMARKS.md has what each costs.
//!
//! Your own queries inside the engine's transaction use [`Sql`] the same
//! way ([`Sql::query`], [`Sql::execute`]), so they are named where the
//! engine's are, and work behind a pooler too.

use super::conn::{Conn, PgRow};
use super::error::DbError;
use super::statement::at_most_one;
use crate::store::{Result, StoreError};
use tokio_postgres::types::{ToSql, Type};

/// A statement and the types of its parameters (`$1`, `$2`, … in order).
///
/// ```
/// use exactly_once::postgres::Sql;
/// use tokio_postgres::types::Type;
///
/// const STOCK: Sql = Sql::new(
///     "SELECT available FROM inventory WHERE item_id = $1",
///     &[Type::TEXT],
/// );
/// assert_eq!(STOCK.text(), "SELECT available FROM inventory WHERE item_id = $1");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Sql {
    text: &'static str,
    types: &'static [Type],
}

impl Sql {
    /// `text` whose parameters are of `types`, in order.
    pub const fn new(text: &'static str, types: &'static [Type]) -> Self {
        Self { text, types }
    }

    /// The statement's text.
    pub fn text(&self) -> &'static str {
        self.text
    }

    /// Runs it; its rows. Errors are the driver's, for the caller to sort
    /// ([`super::classify`], or as a commit's).
    pub async fn rows(
        &self,
        client: &impl Conn,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Vec<PgRow>, DbError> {
        client.rows(self.text, self.typed(params)).await
    }

    /// Runs it; its rows, errors sorted by [`super::classify`].
    pub async fn query(
        &self,
        client: &impl Conn,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<PgRow>> {
        self.rows(client, params)
            .await
            .map_err(super::error::classify)
    }

    /// Runs it; its one row, if any (more than one is an error).
    pub async fn query_opt(
        &self,
        client: &impl Conn,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<PgRow>> {
        at_most_one(self.query(client, params).await?, self.text)
    }

    /// Runs it; its one row (none, or more, is an error).
    pub async fn query_one(
        &self,
        client: &impl Conn,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<PgRow> {
        let mut rows = self.query(client, params).await?;
        match rows.len() {
            1 => Ok(rows.pop().expect("one row")),
            n => Err(StoreError::internal(format!(
                "{n} rows where one was expected: {}",
                self.text
            ))),
        }
    }

    /// Runs it; how many rows it changed.
    pub async fn execute(&self, client: &impl Conn, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        self.changed(client, params)
            .await
            .map_err(super::error::classify)
    }

    /// Runs it; how many rows it changed, errors unsorted.
    pub async fn changed(
        &self,
        client: &impl Conn,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<u64, DbError> {
        client.changed(self.text, self.typed(params)).await
    }

    fn typed<'a>(&self, params: &[&'a (dyn ToSql + Sync)]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
        debug_assert_eq!(
            params.len(),
            self.types.len(),
            "one value per parameter of {:?}",
            self.text
        );
        params
            .iter()
            .zip(self.types)
            .map(|(param, ty)| (*param, ty.clone()))
            .collect()
    }
}
