//! [`Sqlx`]: PostgreSQL through the application's own `sqlx::PgPool`
//! (feature `sqlx`). The engine's statements are the PostgreSQL backend's
//! ([`Conn`]), carried over the pool's connections; an [`Operation<Sqlx>`]
//! writes with sqlx queries on the same connection, inside the engine's
//! transaction.
//!
//! ```no_run
//! use exactly_once::postgres::sqlx::SqlxOperation;
//! use exactly_once::postgres::Result;
//! use exactly_once::{Engine, PhaseEnd, RunContext, Sqlx, SqlxStore, StoreOptions, StoredResponse};
//!
//! #[derive(Debug)]
//! struct AddNote {
//!     text: String,
//! }
//!
//! impl SqlxOperation for AddNote {
//!     async fn run(&self, conn: &mut sqlx::PgConnection, _at: &RunContext<'_>) -> Result<PhaseEnd> {
//!         let (id,): (i64,) = sqlx::query_as("INSERT INTO notes (text) VALUES ($1) RETURNING id")
//!             .bind(&self.text)
//!             .fetch_one(&mut *conn)
//!             .await?;
//!         let body = serde_json::json!({ "id": id, "text": self.text });
//!         Ok(PhaseEnd::Finished(StoredResponse::json(http::StatusCode::CREATED, &body)))
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // The pool your service already has, and its own migrations (sqlx's).
//! let pool = sqlx::PgPool::connect("postgres://app@db/app").await?;
//! let store = SqlxStore::open(pool.clone(), StoreOptions::new()).await?;
//! let engine: Engine<Sqlx> = Engine::new(store);
//! # let _ = engine; Ok(()) }
//! ```

use super::conn::{sealed, Conn, DbError, Driver, Param, PgRow};
use super::operator;
use super::outbox;
use super::protocol::{self, classify_commit, rolls_back, Clock};
use super::schema;
use super::session::Session;
use super::{classify, LOCK_TIMEOUT};
use crate::backend::{Backend, BoxFuture, Operation, RunContext};
use crate::caller::Caller;
use crate::key::IdempotencyKey;
use crate::record::{Lease, PhaseEnd, StoredResponse};
use crate::store::operator::{Intervention, Settlement, Taken, Takeover};
use crate::store::schema::Migrations;
use crate::store::{
    now_ms, Advanced, Execution, FirstPhase, Message, Result, StoreError, StoreOptions, TimeLimits,
};
use sqlx::postgres::{PgArgumentBuffer, PgConnection, PgPool, PgTypeInfo, PgValueFormat};
use sqlx::{Postgres as SqlxPostgres, Row, TypeInfo, ValueRef};
use std::sync::Arc;
use tokio::sync::Mutex;
use tokio_postgres::types::{FromSql, ToSql, Type};

/// PostgreSQL through sqlx, from the application's own `sqlx::PgPool`: an
/// [`Operation<Sqlx>`](crate::Operation) writes with sqlx queries on the
/// engine's transaction's connection, and returns a future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sqlx;

impl crate::backend::sealed::Sealed for Sqlx {}

impl Backend for Sqlx {
    type Transaction<'t> = &'t mut PgConnection;
    type RunOutput<'t> = BoxFuture<'t, Result<PhaseEnd>>;
    type OneStatement = std::convert::Infallible;
    const NAME: &'static str = "sqlx";
}

impl Driver for Sqlx {
    type Tx<'c> = SqlxConn<'c>;

    fn run<'a>(
        operation: &'a dyn Operation<Self>,
        tx: &'a SqlxConn<'_>,
        at: &'a RunContext<'a>,
    ) -> BoxFuture<'a, Result<PhaseEnd>> {
        Box::pin(async move {
            let mut conn = tx.0.lock().await;
            operation.run(conn.connection(), at).await
        })
    }
}

/// An operation's sqlx errors, sorted as the engine's own: what a retry may
/// fix (503) and what it will not.
impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        classify(e)
    }
}

/// A sqlx connection (the connection of a sqlx transaction, or one of the
/// pool's) as the protocol's [`Conn`]: one statement at a time.
pub struct SqlxConn<'c>(Mutex<Held<'c>>);

/// The connection a [`SqlxConn`] runs on.
enum Held<'c> {
    /// A transaction's.
    Borrowed(&'c mut PgConnection),
    /// One of the pool's, for a statement or two.
    Pooled(sqlx::pool::PoolConnection<SqlxPostgres>),
}

impl Held<'_> {
    fn connection(&mut self) -> &mut PgConnection {
        match self {
            Self::Borrowed(conn) => conn,
            Self::Pooled(conn) => conn,
        }
    }
}

impl<'c> SqlxConn<'c> {
    /// The protocol's statements on `conn`.
    pub(crate) fn new(conn: &'c mut PgConnection) -> Self {
        Self(Mutex::new(Held::Borrowed(conn)))
    }
}

impl sealed::Sealed for SqlxConn<'_> {}

impl Conn for SqlxConn<'_> {
    fn rows<'a>(
        &'a self,
        sql: &'a str,
        params: Vec<Param<'a>>,
    ) -> BoxFuture<'a, std::result::Result<Vec<PgRow>, DbError>> {
        Box::pin(async move {
            let mut conn = self.0.lock().await;
            let rows = fetch_all(conn.connection(), bound(sql, params)).await?;
            Ok(rows.into_iter().map(PgRow::Sqlx).collect())
        })
    }

    fn changed<'a>(
        &'a self,
        sql: &'a str,
        params: Vec<Param<'a>>,
    ) -> BoxFuture<'a, std::result::Result<u64, DbError>> {
        Box::pin(async move {
            let mut conn = self.0.lock().await;
            Ok(execute(conn.connection(), bound(sql, params))
                .await?
                .rows_affected())
        })
    }

    fn batch<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, std::result::Result<(), DbError>> {
        Box::pin(async move {
            let mut conn = self.0.lock().await;
            raw(conn.connection(), sql).await?;
            Ok(())
        })
    }
}

// The three calls below return sqlx's own boxed futures from plain
// functions: awaited inside an `async` block, sqlx's `Executor` bounds
// would otherwise have to hold for every lifetime of the borrowed
// connection, which rustc cannot show for a `Send` future.

type Query<'a> = sqlx::query::Query<'a, SqlxPostgres, sqlx::postgres::PgArguments>;

fn fetch_all<'a>(
    conn: &'a mut PgConnection,
    query: Query<'a>,
) -> BoxFuture<'a, std::result::Result<Vec<sqlx::postgres::PgRow>, sqlx::Error>> {
    Box::pin(query.fetch_all(conn))
}

fn execute<'a>(
    conn: &'a mut PgConnection,
    query: Query<'a>,
) -> BoxFuture<'a, std::result::Result<sqlx::postgres::PgQueryResult, sqlx::Error>> {
    Box::pin(query.execute(conn))
}

fn raw<'a>(
    conn: &'a mut PgConnection,
    sql: &'a str,
) -> BoxFuture<'a, std::result::Result<sqlx::postgres::PgQueryResult, sqlx::Error>> {
    // No arguments: sqlx sends it as a simple query, which may hold
    // several statements.
    sqlx::Executor::execute(conn, sql)
}

/// `sql` with its parameters bound as tokio-postgres encodes them.
fn bound<'a>(sql: &'a str, params: Vec<Param<'a>>) -> Query<'a> {
    params
        .into_iter()
        .fold(sqlx::query(sql), |query, (value, ty)| {
            query.bind(Encoded { value, ty })
        })
}

/// A tokio-postgres value, bound to a sqlx query as its binary encoding
/// with its type's OID: the wire format is the same.
struct Encoded<'a> {
    value: &'a (dyn ToSql + Sync),
    ty: Type,
}

impl sqlx::Type<SqlxPostgres> for Encoded<'_> {
    /// Unused: each value says its own type ([`Encoded::produces`]).
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(sqlx::postgres::types::Oid(0))
    }
}

impl<'q> sqlx::Encode<'q, SqlxPostgres> for Encoded<'_> {
    fn encode_by_ref(
        &self,
        buf: &mut PgArgumentBuffer,
    ) -> std::result::Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        let mut bytes = bytes::BytesMut::new();
        match self.value.to_sql_checked(&self.ty, &mut bytes)? {
            tokio_postgres::types::IsNull::Yes => Ok(sqlx::encode::IsNull::Yes),
            tokio_postgres::types::IsNull::No => {
                buf.extend_from_slice(&bytes);
                Ok(sqlx::encode::IsNull::No)
            }
        }
    }

    fn produces(&self) -> Option<PgTypeInfo> {
        Some(PgTypeInfo::with_oid(sqlx::postgres::types::Oid(
            self.ty.oid(),
        )))
    }
}

/// Column `idx` of a sqlx row, decoded by tokio-postgres from its binary
/// value and its type.
pub(super) fn column<'a, T: FromSql<'a>>(
    row: &'a sqlx::postgres::PgRow,
    idx: usize,
) -> std::result::Result<T, DbError> {
    let value = row.try_get_raw(idx)?;
    let info = value.type_info();
    let oid = info.oid().map_or(0, |oid| oid.0);
    let ty = Type::from_oid(oid).ok_or_else(|| {
        DbError::Value(format!(
            "column {idx} is of a type this driver does not know ({}, oid {oid})",
            info.name()
        ))
    })?;
    let wrong = |e: Box<dyn std::error::Error + Send + Sync>| {
        DbError::Value(format!("column {idx} ({ty}): {e}"))
    };
    if !T::accepts(&ty) {
        return Err(DbError::Value(format!(
            "column {idx} is {ty}, not {}",
            std::any::type_name::<T>()
        )));
    }
    if value.is_null() {
        return T::from_sql_null(&ty).map_err(wrong);
    }
    if value.format() != PgValueFormat::Binary {
        return Err(DbError::Value(format!("column {idx} came as text")));
    }
    let bytes = value.as_bytes().map_err(wrong)?;
    T::from_sql(&ty, bytes).map_err(wrong)
}

/// The engine's records on the application's `sqlx::PgPool`.
#[derive(Debug)]
pub struct SqlxStore {
    pool: PgPool,
    lifetimes: TimeLimits,
    app: Migrations,
    session: Session,
}

impl SqlxStore {
    /// The store on `pool`, with `options`' migrations, durability and
    /// time limits (the pool is connected already).
    /// Unless `options.migrate` is false, applies the migrations the
    /// database still needs (the application's given here, then the
    /// engine's own) in one transaction under PostgreSQL's migration lock;
    /// either way refuses a schema this build cannot serve on. Every
    /// transaction of the engine's sets its own settings (`SET LOCAL`), so
    /// none stays on a connection the pool hands your handlers.
    pub async fn open(pool: PgPool, options: StoreOptions) -> Result<Self> {
        let store = Self {
            pool,
            lifetimes: options.limits,
            app: options.migrations,
            session: Session::new(true, options.durability),
        };
        let mut tx = store.begin(store.clock()).await?;
        let conn = SqlxConn::new(&mut tx);
        if options.migrate {
            schema::migrate_in(&conn, store.app).await?;
        }
        for (ledger, fit) in schema::check(&conn, store.app).await?.fits {
            tracing::info!(ledger, ?fit, "schema");
        }
        tx.commit().await.map_err(classify)?;
        Ok(store)
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn clock(&self) -> Clock {
        Clock::new(now_ms(), &self.lifetimes, self.session)
    }

    fn clock_for(&self, operation: &dyn Operation<Sqlx>) -> Clock {
        self.clock().for_operation(operation.key_ttl())
    }

    /// A transaction with the engine's settings.
    async fn begin(&self, clock: Clock) -> Result<sqlx::Transaction<'static, SqlxPostgres>> {
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        if let Some(settings) = clock.session.per_transaction(LOCK_TIMEOUT) {
            raw(&mut tx, &settings).await.map_err(classify)?;
        }
        Ok(tx)
    }

    /// A connection of the pool, for the protocol's statements.
    async fn conn(&self) -> Result<SqlxConn<'static>> {
        let pooled = self.pool.acquire().await.map_err(unavailable)?;
        Ok(SqlxConn(Mutex::new(Held::Pooled(pooled))))
    }
}

fn unavailable(e: sqlx::Error) -> StoreError {
    StoreError::unavailable("no database connection").caused_by(e)
}

/// Commits `tx`; a commit whose connection was lost has an unknown outcome.
async fn commit(tx: sqlx::Transaction<'static, SqlxPostgres>) -> Result<()> {
    tx.commit().await.map_err(|e| classify_commit(e, "COMMIT"))
}

/// Writes `message` to the outbox from inside an operation's phase (the
/// `conn` its run was given), due at once: it is sent if and only if the
/// transaction commits. A second message with the same id is never written.
pub async fn enqueue(conn: &mut PgConnection, message: &Message) -> Result<()> {
    outbox::enqueue_on(&SqlxConn::new(conn), message).await
}

store_on_a_pool! {
    impl Store<Sqlx> for SqlxStore {
        async fn execute(&self, phase: FirstPhase<Sqlx>) -> Result<Execution> {
            let clock = self.clock_for(phase.operation.as_ref());
            let mut tx = self.begin(clock).await?;
            let conn = SqlxConn::new(&mut tx);
            let execution = protocol::execute_in::<Sqlx>(&conn, &phase, clock).await?;
            match execution {
                Execution::InUse => Ok(Execution::InUse),
                execution if rolls_back(&execution, phase.end) => {
                    tx.rollback().await.map_err(classify)?;
                    Ok(execution.rolled_back())
                }
                execution => {
                    commit(tx).await?;
                    Ok(execution)
                }
            }
        }

        async fn advance(&self, lease: &Lease, phase: Arc<dyn Operation<Sqlx>>) -> Result<Advanced> {
            let clock = self.clock_for(phase.as_ref());
            let mut tx = self.begin(clock).await?;
            let conn = SqlxConn::new(&mut tx);
            let advanced = protocol::advance_in::<Sqlx>(&conn, lease, phase.as_ref(), clock).await?;
            if !matches!(advanced, Advanced::LeaseLost) {
                commit(tx).await?;
            }
            Ok(advanced)
        }

        async fn health(&self) -> Result<()> {
            let mut tx = self.begin(self.clock()).await?;
            let conn = SqlxConn::new(&mut tx);
            schema::probe(&conn, self.app).await?;
            tx.commit().await.map_err(classify)
        }

        async fn operator_take(
            &self,
            caller: &Caller,
            key: &IdempotencyKey,
            takeover: Takeover,
            by: Option<&Intervention>,
        ) -> Result<Taken> {
            let clock = self.clock();
            let mut tx = self.begin(clock).await?;
            let conn = SqlxConn::new(&mut tx);
            let taken = operator::take_in(&conn, caller, key, takeover, by, clock).await?;
            if matches!(taken, Taken::Lease(_)) {
                commit(tx).await?;
            }
            Ok(taken)
        }

        async fn settle(
            &self,
            lease: &Lease,
            phase: Arc<dyn Operation<Sqlx>>,
            settlement: &Settlement,
        ) -> Result<Option<StoredResponse>> {
            let clock = self.clock_for(phase.as_ref());
            let mut tx = self.begin(clock).await?;
            let conn = SqlxConn::new(&mut tx);
            let settled =
                operator::settle_in::<Sqlx>(&conn, lease, phase.as_ref(), settlement, clock).await?;
            if settled.is_some() {
                commit(tx).await?;
            }
            Ok(settled)
        }
    }
}
