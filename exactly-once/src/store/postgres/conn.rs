//! What the PostgreSQL protocol's statements run on, whatever the driver:
//! a tokio-postgres client or transaction (the [`Postgres`](super::Postgres)
//! backend), or a sqlx connection (the [`Sqlx`](crate::Sqlx) backend,
//! feature `sqlx`). The protocol is written once, against [`Conn`]: its
//! statements are typed ([`super::Sql`]), their parameters tokio-postgres
//! values and their rows read as tokio-postgres reads them ([`PgRow`]).
//! Both drivers speak the same binary wire format, so a sqlx connection
//! carries a tokio-postgres value's bytes unchanged, and hands back the
//! bytes of each column for tokio-postgres to decode.

use crate::backend::{Backend, BoxFuture, Operation, RunContext};
use crate::record::PhaseEnd;
use std::fmt;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::GenericClient;

/// A statement's parameter and its type.
pub type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// A connection (or a transaction on one) that runs typed statements in
/// one round trip each. Sealed: the drivers are this crate's.
pub trait Conn: Send + Sync + sealed::Sealed {
    /// Runs `sql`; its rows.
    fn rows<'a>(
        &'a self,
        sql: &'a str,
        params: Vec<Param<'a>>,
    ) -> BoxFuture<'a, Result<Vec<PgRow>, DbError>>;

    /// Runs `sql`; how many rows it changed.
    fn changed<'a>(
        &'a self,
        sql: &'a str,
        params: Vec<Param<'a>>,
    ) -> BoxFuture<'a, Result<u64, DbError>>;

    /// Runs statements with no parameters (settings, DDL), as one.
    fn batch<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<(), DbError>>;
}

/// A PostgreSQL driver as the protocol uses it: its transaction (a
/// [`Conn`]), and how an operation of its backend runs in one.
pub(crate) trait Driver: Backend {
    /// A transaction with the engine's settings.
    type Tx<'c>: Conn;

    /// Runs `operation`'s phase in `tx`.
    fn run<'a>(
        operation: &'a dyn Operation<Self>,
        tx: &'a Self::Tx<'_>,
        at: &'a RunContext<'a>,
    ) -> BoxFuture<'a, crate::store::Result<PhaseEnd>>;
}

pub(crate) mod sealed {
    /// Only this crate's drivers are connections.
    pub trait Sealed {}
}

/// tokio-postgres's own clients and transactions: every statement
/// unnamed, with its types (`query_typed`).
macro_rules! tokio_conn {
    ($($ty:ty),*) => {$(
        impl sealed::Sealed for $ty {}

        impl Conn for $ty {
            fn rows<'a>(
                &'a self,
                sql: &'a str,
                params: Vec<Param<'a>>,
            ) -> BoxFuture<'a, Result<Vec<PgRow>, DbError>> {
                Box::pin(async move {
                    let rows = GenericClient::query_typed(self, sql, &params).await?;
                    Ok(rows.into_iter().map(PgRow::Tokio).collect())
                })
            }

            fn changed<'a>(
                &'a self,
                sql: &'a str,
                params: Vec<Param<'a>>,
            ) -> BoxFuture<'a, Result<u64, DbError>> {
                Box::pin(async move { Ok(unnamed_changed(self, sql, params).await?) })
            }

            fn batch<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<(), DbError>> {
                Box::pin(async move { Ok(GenericClient::batch_execute(self, sql).await?) })
            }
        }
    )*};
}

tokio_conn!(tokio_postgres::Client, tokio_postgres::Transaction<'_>);

/// deadpool's clients and transactions: named statements, prepared once
/// per connection and kept in its statement cache, on a connection whose
/// cache already holds one; unnamed ones otherwise ([`cached_statements`]).
macro_rules! deadpool_conn {
    ($($ty:ty => $parts:ident),*) => {$(
        impl sealed::Sealed for $ty {}

        impl Conn for $ty {
            fn rows<'a>(
                &'a self,
                sql: &'a str,
                params: Vec<Param<'a>>,
            ) -> BoxFuture<'a, Result<Vec<PgRow>, DbError>> {
                Box::pin(async move {
                    let (cache, client, generic) = $parts(self);
                    let rows = match Prepared::get(cache, client, sql, &params).await? {
                        Some(prepared) => generic.query(&prepared.statement, &prepared.values()).await?,
                        None => generic.query_typed(sql, &params).await?,
                    };
                    Ok(rows.into_iter().map(PgRow::Tokio).collect())
                })
            }

            fn changed<'a>(
                &'a self,
                sql: &'a str,
                params: Vec<Param<'a>>,
            ) -> BoxFuture<'a, Result<u64, DbError>> {
                Box::pin(async move {
                    let (cache, client, generic) = $parts(self);
                    Ok(match Prepared::get(cache, client, sql, &params).await? {
                        Some(prepared) => generic.execute(&prepared.statement, &prepared.values()).await?,
                        None => unnamed_changed(generic, sql, params).await?,
                    })
                })
            }

            fn batch<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<(), DbError>> {
                Box::pin(async move {
                    let (_, _, generic) = $parts(self);
                    Ok(generic.batch_execute(sql).await?)
                })
            }
        }
    )*};
}

/// A pooled connection's statement cache, its client, and what runs
/// statements on it.
type Parts<'a, G> = (
    &'a deadpool_postgres::StatementCache,
    &'a tokio_postgres::Client,
    &'a G,
);

fn object_parts(object: &deadpool_postgres::Object) -> Parts<'_, tokio_postgres::Client> {
    wrapper_parts(object)
}

fn wrapper_parts(wrapper: &deadpool_postgres::ClientWrapper) -> Parts<'_, tokio_postgres::Client> {
    (&wrapper.statement_cache, wrapper, wrapper)
}

fn transaction_parts<'a, 't>(
    tx: &'a deadpool_postgres::Transaction<'t>,
) -> Parts<'a, tokio_postgres::Transaction<'t>> {
    (&tx.statement_cache, tx.client(), tx)
}

deadpool_conn!(
    deadpool_postgres::Object => object_parts,
    deadpool_postgres::ClientWrapper => wrapper_parts,
    deadpool_postgres::Transaction<'_> => transaction_parts
);

/// Whether a pooled connection runs named statements: whether its
/// statement cache holds one already. The store's own pool, on a URL
/// without `pgbouncer=true`, prepares one as each connection is made
/// (`PostgresStore::open`); behind a pooler, and on a pool of yours whose
/// code prepares none, the cache stays empty and every statement is
/// unnamed, as a pooler in transaction mode needs.
pub(crate) fn cached_statements(cache: &deadpool_postgres::StatementCache) -> bool {
    cache.size() > 0
}

/// A named statement of a connection that keeps them, and its values.
pub(crate) struct Prepared<'p, 'a> {
    /// The statement, prepared on this connection (once: then cached).
    pub(crate) statement: tokio_postgres::Statement,
    params: &'p [Param<'a>],
}

impl<'p, 'a> Prepared<'p, 'a> {
    /// `sql` prepared with its parameters' types, when the connection
    /// keeps named statements ([`cached_statements`]); `None` when it runs
    /// them unnamed.
    pub(crate) async fn get(
        cache: &deadpool_postgres::StatementCache,
        client: &tokio_postgres::Client,
        sql: &str,
        params: &'p [Param<'a>],
    ) -> Result<Option<Prepared<'p, 'a>>, tokio_postgres::Error> {
        if !cached_statements(cache) {
            return Ok(None);
        }
        let types: Vec<Type> = params.iter().map(|(_, ty)| ty.clone()).collect();
        let statement = cache.prepare_typed(client, sql, &types).await?;
        Ok(Some(Self { statement, params }))
    }

    /// The values, in order.
    pub(crate) fn values(&self) -> Vec<&'a (dyn ToSql + Sync)> {
        self.params.iter().map(|(value, _)| *value).collect()
    }
}

/// Runs an unnamed `sql`; how many rows it changed.
async fn unnamed_changed(
    client: &impl GenericClient,
    sql: &str,
    params: Vec<Param<'_>>,
) -> Result<u64, tokio_postgres::Error> {
    use futures_util::TryStreamExt;
    let stream = client.query_typed_raw(sql, params).await?;
    futures_util::pin_mut!(stream);
    while stream.try_next().await?.is_some() {}
    Ok(stream.rows_affected().unwrap_or(0))
}

/// Runs `sql` on `client`; its one row (none, or more, is an error).
pub(crate) async fn one(
    client: &impl Conn,
    sql: &str,
    params: Vec<Param<'_>>,
) -> Result<PgRow, DbError> {
    let mut rows = client.rows(sql, params).await?;
    match rows.len() {
        1 => Ok(rows.pop().expect("one row")),
        n => Err(DbError::Value(format!(
            "{n} rows where one was expected: {sql}"
        ))),
    }
}

/// A row, read as tokio-postgres reads one, whichever driver brought it.
pub enum PgRow {
    /// From tokio-postgres.
    Tokio(tokio_postgres::Row),
    /// From sqlx: each column's type and binary value.
    #[cfg(feature = "sqlx")]
    Sqlx(sqlx::postgres::PgRow),
}

/// A column's position in a row.
pub trait Index: sealed_index::Sealed {
    /// The position.
    fn at(&self) -> usize;
}

mod sealed_index {
    pub trait Sealed {}
    impl Sealed for usize {}
}

impl Index for usize {
    fn at(&self) -> usize {
        *self
    }
}

impl PgRow {
    /// Column `idx` as `T`; panics when it is not one (as tokio-postgres's
    /// `Row::get` does).
    pub fn get<'a, I: Index, T: FromSql<'a>>(&'a self, idx: I) -> T {
        match self.try_get(idx.at()) {
            Ok(value) => value,
            Err(e) => panic!("error reading column {}: {e}", idx.at()),
        }
    }

    /// Column `idx` as `T`.
    pub fn try_get<'a, T: FromSql<'a>>(&'a self, idx: usize) -> Result<T, DbError> {
        match self {
            Self::Tokio(row) => Ok(row.try_get(idx)?),
            #[cfg(feature = "sqlx")]
            Self::Sqlx(row) => super::on_sqlx::column(row, idx),
        }
    }
}

impl fmt::Debug for PgRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tokio(row) => row.fmt(f),
            #[cfg(feature = "sqlx")]
            Self::Sqlx(_) => f.write_str("PgRow(sqlx)"),
        }
    }
}

/// A driver's error, as the protocol sorts it ([`super::classify`]).
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// tokio-postgres's.
    #[error(transparent)]
    Tokio(#[from] tokio_postgres::Error),
    /// sqlx's.
    #[cfg(feature = "sqlx")]
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
    /// A value that did not decode or encode.
    #[error("{0}")]
    Value(String),
}

impl DbError {
    /// The server's SQLSTATE, when the server answered with one.
    pub fn code(&self) -> Option<SqlState> {
        match self {
            Self::Tokio(e) => e.code().cloned(),
            #[cfg(feature = "sqlx")]
            Self::Sqlx(e) => e
                .as_database_error()
                .and_then(|db| db.code())
                .map(|code| SqlState::from_code(&code)),
            Self::Value(_) => None,
        }
    }

    /// Whether the statement's connection (its backend) was lost or never
    /// reached: the server said nothing about the statement itself.
    pub fn connection_lost(&self) -> bool {
        match self {
            Self::Tokio(e) => e.code().is_none(),
            #[cfg(feature = "sqlx")]
            Self::Sqlx(e) => matches!(
                e,
                sqlx::Error::Io(_)
                    | sqlx::Error::Tls(_)
                    | sqlx::Error::Protocol(_)
                    | sqlx::Error::PoolTimedOut
                    | sqlx::Error::PoolClosed
                    | sqlx::Error::WorkerCrashed
            ),
            Self::Value(_) => false,
        }
    }
}
