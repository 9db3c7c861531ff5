//! What your statements run on with the tokio-postgres driver (the
//! [`Postgres`](super::Postgres) backend): a tokio-postgres client or
//! transaction, or deadpool's wrappers of them ([`Conn`]), with
//! tokio-postgres values ([`Param`]) and rows ([`PgRow`]); and the engine's
//! own statements ([`Exec`]) carried on the same connections, their
//! values encoded by tokio-postgres ([`Arg`]'s `ToSql`).

use super::error::DbError;
use super::statement::Exec;
use super::value::{Arg, Row};
use crate::backend::BoxFuture;
use crate::Caller;
use std::fmt;
use tokio_postgres::types::{to_sql_checked, FromSql, IsNull, ToSql, Type};
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

pub(crate) mod sealed {
    /// Only this crate's drivers are connections.
    pub trait Sealed {}
}

/// Implements [`Conn`] for a driver type, through its `$parts`: the
/// statement cache it keeps, if any, with the client it prepares on, and
/// what runs statements. With a cache that holds a statement, named
/// statements, prepared once per connection; otherwise unnamed ones, with
/// their types (`query_typed`) ([`cached_statements`]).
macro_rules! conn {
    ($($ty:ty => $parts:ident),*) => {$(
        impl sealed::Sealed for $ty {}

        impl Conn for $ty {
            fn rows<'a>(
                &'a self,
                sql: &'a str,
                params: Vec<Param<'a>>,
            ) -> BoxFuture<'a, Result<Vec<PgRow>, DbError>> {
                Box::pin(async move {
                    let (cache, generic) = $parts(self);
                    let rows = match Prepared::get(cache, sql, &params).await? {
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
                    let (cache, generic) = $parts(self);
                    Ok(match Prepared::get(cache, sql, &params).await? {
                        Some(prepared) => generic.execute(&prepared.statement, &prepared.values()).await?,
                        None => unnamed_changed(generic, sql, params).await?,
                    })
                })
            }

            fn batch<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<(), DbError>> {
                Box::pin(async move { Ok($parts(self).1.batch_execute(sql).await?) })
            }
        }
    )*};
}

/// A connection's statement cache and the client it prepares on (none:
/// tokio-postgres's own types keep no cache), and what runs statements on
/// it.
type Parts<'a, G> = (Option<Cache<'a>>, &'a G);

/// A pooled connection's statement cache and its client.
pub(crate) type Cache<'a> = (
    &'a deadpool_postgres::StatementCache,
    &'a tokio_postgres::Client,
);

fn client_parts(client: &tokio_postgres::Client) -> Parts<'_, tokio_postgres::Client> {
    (None, client)
}

fn tokio_transaction_parts<'a, 't>(
    tx: &'a tokio_postgres::Transaction<'t>,
) -> Parts<'a, tokio_postgres::Transaction<'t>> {
    (None, tx)
}

fn object_parts(object: &deadpool_postgres::Object) -> Parts<'_, tokio_postgres::Client> {
    wrapper_parts(object)
}

fn wrapper_parts(wrapper: &deadpool_postgres::ClientWrapper) -> Parts<'_, tokio_postgres::Client> {
    (Some(cache(wrapper)), wrapper)
}

/// A pooled connection's statement cache, with its client.
pub(crate) fn cache(wrapper: &deadpool_postgres::ClientWrapper) -> Cache<'_> {
    (&wrapper.statement_cache, wrapper)
}

fn transaction_parts<'a, 't>(
    tx: &'a deadpool_postgres::Transaction<'t>,
) -> Parts<'a, tokio_postgres::Transaction<'t>> {
    (Some((&tx.statement_cache, tx.client())), tx)
}

conn!(
    tokio_postgres::Client => client_parts,
    tokio_postgres::Transaction<'_> => tokio_transaction_parts,
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
        cache: Option<Cache<'_>>,
        sql: &str,
        params: &'p [Param<'a>],
    ) -> Result<Option<Prepared<'p, 'a>>, tokio_postgres::Error> {
        let Some((cache, client)) = cache.filter(|(cache, _)| cached_statements(cache)) else {
            return Ok(None);
        };
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

/// A row of your statement ([`super::Sql`]), read as tokio-postgres reads
/// one.
pub enum PgRow {
    /// From tokio-postgres.
    Tokio(tokio_postgres::Row),
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
        }
    }
}

impl fmt::Debug for PgRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tokio(row) => row.fmt(f),
        }
    }
}

/// The engine's own statements on a tokio-postgres connection: its
/// values encoded by tokio-postgres, named or unnamed as the connection's
/// statements are ([`cached_statements`]).
impl<C: Conn> Exec for C {
    fn rows<'a>(
        &'a self,
        sql: &'a str,
        args: Vec<Arg<'a>>,
    ) -> BoxFuture<'a, Result<Vec<Row>, DbError>> {
        Box::pin(async move {
            let rows = Conn::rows(self, sql, params(&args)).await?;
            Ok(rows
                .into_iter()
                .map(|PgRow::Tokio(row)| Row::Tokio(row))
                .collect())
        })
    }

    fn changed<'a>(
        &'a self,
        sql: &'a str,
        args: Vec<Arg<'a>>,
    ) -> BoxFuture<'a, Result<u64, DbError>> {
        Box::pin(async move { Conn::changed(self, sql, params(&args)).await })
    }

    fn batch<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<(), DbError>> {
        Conn::batch(self, sql)
    }
}

/// The engine's values as tokio-postgres parameters.
fn params<'a>(args: &'a [Arg<'a>]) -> Vec<Param<'a>> {
    args.iter()
        .map(|arg| (arg as &(dyn ToSql + Sync), sql_type(arg)))
        .collect()
}

/// An engine value's type, as tokio-postgres names it.
fn sql_type(arg: &Arg<'_>) -> Type {
    use super::value::Kind;
    match arg.kind() {
        Kind::Bytea => Type::BYTEA,
        Kind::Text => Type::TEXT,
        Kind::Int2 => Type::INT2,
        Kind::Int4 => Type::INT4,
        Kind::Int8 => Type::INT8,
        Kind::Float8 => Type::FLOAT8,
        Kind::Bool => Type::BOOL,
        Kind::TextArray => Type::TEXT_ARRAY,
    }
}

/// An engine value, encoded by tokio-postgres.
impl ToSql for Arg<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match *self {
            Arg::Bytea(value) => value.to_sql(ty, out),
            Arg::Text(value) => value.to_sql(ty, out),
            Arg::Int2(value) => value.to_sql(ty, out),
            Arg::Int4(value) => value.to_sql(ty, out),
            Arg::Int8(value) => value.to_sql(ty, out),
            Arg::Float8(value) => value.to_sql(ty, out),
            Arg::Bool(value) => value.to_sql(ty, out),
            Arg::TextArray(value) => value.to_sql(ty, out),
        }
    }

    fn accepts(ty: &Type) -> bool {
        [
            Type::BYTEA,
            Type::TEXT,
            Type::INT2,
            Type::INT4,
            Type::INT8,
            Type::FLOAT8,
            Type::BOOL,
            Type::TEXT_ARRAY,
        ]
        .contains(ty)
    }

    to_sql_checked!();
}

/// A caller is stored as its hash, a 32-byte BYTEA.
impl ToSql for Caller {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        (&self.as_bytes()[..]).to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <&[u8] as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}
