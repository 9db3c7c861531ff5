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

/// tokio-postgres's clients and transactions, and deadpool's wrappers of
/// them.
macro_rules! tokio_conn {
    ($($ty:ty => $client:ident),*) => {$(
        impl sealed::Sealed for $ty {}

        impl Conn for $ty {
            fn rows<'a>(
                &'a self,
                sql: &'a str,
                params: Vec<Param<'a>>,
            ) -> BoxFuture<'a, Result<Vec<PgRow>, DbError>> {
                Box::pin(async move {
                    let rows = GenericClient::query_typed($client(self), sql, &params).await?;
                    Ok(rows.into_iter().map(PgRow::Tokio).collect())
                })
            }

            fn changed<'a>(
                &'a self,
                sql: &'a str,
                params: Vec<Param<'a>>,
            ) -> BoxFuture<'a, Result<u64, DbError>> {
                Box::pin(async move {
                    use futures_util::TryStreamExt;
                    let stream = GenericClient::query_typed_raw($client(self), sql, params).await?;
                    futures_util::pin_mut!(stream);
                    while stream.try_next().await?.is_some() {}
                    Ok(stream.rows_affected().unwrap_or(0))
                })
            }

            fn batch<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<(), DbError>> {
                Box::pin(async move { Ok(GenericClient::batch_execute($client(self), sql).await?) })
            }
        }
    )*};
}

fn itself<T>(client: &T) -> &T {
    client
}

fn inner<T: std::ops::Deref>(client: &T) -> &T::Target {
    client
}

fn pooled(object: &deadpool_postgres::Object) -> &tokio_postgres::Client {
    object
}

tokio_conn!(
    deadpool_postgres::Object => pooled,
    tokio_postgres::Client => itself,
    tokio_postgres::Transaction<'_> => itself,
    deadpool_postgres::ClientWrapper => inner,
    deadpool_postgres::Transaction<'_> => inner
);

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
