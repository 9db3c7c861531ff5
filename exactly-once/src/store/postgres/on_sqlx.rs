//! [`Sqlx`]: PostgreSQL through the application's own `sqlx::PgPool`
//! (feature `sqlx`, which needs no other PostgreSQL driver). The engine's
//! statements are the PostgreSQL backend's, their values bound natively
//! by sqlx; an [`Operation<Sqlx>`] writes with sqlx queries on the same
//! connection, inside the engine's transaction.
//!
//! Statements are sqlx's own kind: named, prepared once per connection and
//! kept in the connection's statement cache, as your own sqlx queries on
//! that pool are. sqlx sends an unnamed statement only with
//! `persistent(false)`, and then as two exchanges (parse and describe, a
//! sync; bind and execute, another), which a pooler in transaction mode may
//! hand to two server connections outside a transaction; so behind
//! PgBouncer in transaction mode the engine on sqlx needs what sqlx itself
//! needs there: PgBouncer 1.21 or later with `max_prepared_statements`.
//! Settings are set in each of the engine's transactions (`SET LOCAL`), so
//! none stays on a connection the pool hands your handlers.
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

use super::citus::OnCitus;
use super::clock::Clock;
use super::error::{classify, DbError};
use super::leases;
use super::operator;
use super::outbox;
use super::protocol::{self, rolls_back};
use super::records;
use super::schema;
use super::server_seen::ServerSeen;
use super::session::{Session, LOCK_TIMEOUT};
use super::sqlx_commit::Committer;
use super::sqlx_timeouts::{answered, silent_server, POOL_WAIT, RESPONSE_TIMEOUT};
use super::statement::{Driver, Exec};
use super::value::{Arg, Row};
use crate::backend::{Backend, BoxFuture, Operation, RunContext};
use crate::record::{Lease, PhaseEnd, StoredResponse};
use crate::store::enqueue::Enqueue;
use crate::store::operator::{OperatorTake, Settlement, Taken};
use crate::store::schema::Migrations;
use crate::store::{
    now_ms, Advanced, Execution, FirstPhase, Message, Result, StoreError, StoreOptions, TimeLimits,
};
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::Postgres as SqlxPostgres;
use std::sync::Arc;
use tokio::sync::Mutex;

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
            tokio::time::timeout(RESPONSE_TIMEOUT, operation.run(conn.connection(), at))
                .await
                .unwrap_or_else(|_| Err(classify(silent_server())))
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
/// pool's) as what runs the protocol's statements: one at a time.
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

impl Exec for SqlxConn<'_> {
    fn rows<'a>(
        &'a self,
        sql: &'a str,
        args: Vec<Arg<'a>>,
    ) -> BoxFuture<'a, std::result::Result<Vec<Row>, DbError>> {
        Box::pin(async move {
            let mut conn = self.0.lock().await;
            let rows = answered(fetch_all(conn.connection(), bound(sql, args))).await?;
            Ok(rows.into_iter().map(Row::Sqlx).collect())
        })
    }

    fn changed<'a>(
        &'a self,
        sql: &'a str,
        args: Vec<Arg<'a>>,
    ) -> BoxFuture<'a, std::result::Result<u64, DbError>> {
        Box::pin(async move {
            let mut conn = self.0.lock().await;
            Ok(answered(execute(conn.connection(), bound(sql, args)))
                .await?
                .rows_affected())
        })
    }

    fn batch<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, std::result::Result<(), DbError>> {
        Box::pin(async move {
            let mut conn = self.0.lock().await;
            answered(raw(conn.connection(), sql)).await?;
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

/// `sql` (statements with no parameters) as a simple query; every row of
/// them.
fn raw_rows<'a>(
    conn: &'a mut PgConnection,
    sql: &'a str,
) -> BoxFuture<'a, std::result::Result<Vec<sqlx::postgres::PgRow>, sqlx::Error>> {
    sqlx::Executor::fetch_all(conn, sql)
}

fn raw<'a>(
    conn: &'a mut PgConnection,
    sql: &'a str,
) -> BoxFuture<'a, std::result::Result<sqlx::postgres::PgQueryResult, sqlx::Error>> {
    // No arguments: sqlx sends it as a simple query, which may hold
    // several statements.
    sqlx::Executor::execute(conn, sql)
}

/// `sql` with the engine's values bound as sqlx binds them.
fn bound<'a>(sql: &'a str, args: Vec<Arg<'a>>) -> Query<'a> {
    args.into_iter()
        .fold(sqlx::query(sql), |query, arg| match arg {
            Arg::Bytea(value) => query.bind(value),
            Arg::Text(value) => query.bind(value),
            Arg::Int2(value) => query.bind(value),
            Arg::Int4(value) => query.bind(value),
            Arg::Int8(value) => query.bind(value),
            Arg::Float8(value) => query.bind(value),
            Arg::Bool(value) => query.bind(value),
            Arg::TextArray(value) => query.bind(value),
        })
}

/// The engine's records on the application's `sqlx::PgPool`.
#[derive(Debug)]
pub struct SqlxStore {
    pool: PgPool,
    lifetimes: TimeLimits,
    app: Migrations,
    session: Session,
    /// How its transactions commit.
    committer: Committer,
    /// The server its transactions reach, and how often it changed.
    host: ServerSeen,
    /// Whether the database is a Citus coordinator's, once asked.
    citus: OnCitus,
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
            committer: Committer::new(),
            host: ServerSeen::default(),
            citus: OnCitus::default(),
        };
        let mut tx = store.begin(store.clock()).await?;
        let conn = SqlxConn::new(&mut tx);
        if options.migrate {
            schema::migrate_in(&conn, store.app).await?;
        }
        crate::store::schema::report(&schema::check(&conn, store.app).await?.fits);
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

    /// A transaction with the engine's settings, sent with a question of
    /// the server it reached (one round trip): a new one (a failover) is a
    /// new epoch of the store, whose records in memory are not served.
    async fn begin(&self, clock: Clock) -> Result<sqlx::Transaction<'static, SqlxPostgres>> {
        let begun = tokio::time::timeout(POOL_WAIT, self.pool.begin()).await;
        let mut tx = begun
            .unwrap_or(Err(sqlx::Error::PoolTimedOut))
            .map_err(unavailable)?;
        let settings = clock.session.per_transaction(LOCK_TIMEOUT);
        let sql = format!(
            "{}; {}",
            settings.as_deref().unwrap_or("SELECT 1 WHERE false"),
            schema::SERVER_ADDRESS.text()
        );
        let rows = answered(raw_rows(&mut tx, &sql)).await.map_err(classify)?;
        let address = rows.last().and_then(|row| {
            sqlx::Row::try_get::<Option<String>, _>(row, 0)
                .ok()
                .flatten()
        });
        self.host.reached(address);
        Ok(tx)
    }

    /// A connection of the pool, for the protocol's statements.
    async fn conn(&self) -> Result<SqlxConn<'static>> {
        let acquired = tokio::time::timeout(POOL_WAIT, self.pool.acquire()).await;
        let pooled = acquired
            .unwrap_or(Err(sqlx::Error::PoolTimedOut))
            .map_err(unavailable)?;
        Ok(SqlxConn(Mutex::new(Held::Pooled(pooled))))
    }
}

fn unavailable(e: sqlx::Error) -> StoreError {
    StoreError::unavailable("no database connection").caused_by(e)
}

impl crate::store::enqueue::sealed::Sealed for &mut PgConnection {}

/// sqlx's: a future, on the connection the operation's run was given.
impl<'a> Enqueue<'a> for &'a mut PgConnection {
    type Written = BoxFuture<'a, Result<()>>;

    fn enqueue(self, message: &'a Message, at: &RunContext<'_>) -> Self::Written {
        let caller = at.caller.as_bytes().to_vec();
        Box::pin(async move { outbox::enqueue_on(&SqlxConn::new(self), message, &caller).await })
    }
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
                    answered(tx.rollback()).await.map_err(classify)?;
                    Ok(execution.rolled_back())
                }
                execution => {
                    self.committer.commit(tx).await?;
                    Ok(execution)
                }
            }
        }

        async fn advance(&self, lease: &Lease, phase: Arc<dyn Operation<Sqlx>>) -> Result<Advanced> {
            let clock = self.clock_for(phase.as_ref());
            let mut tx = self.begin(clock).await?;
            let conn = SqlxConn::new(&mut tx);
            let advanced = leases::advance_in::<Sqlx>(&conn, lease, phase.as_ref(), clock).await?;
            if !matches!(advanced, Advanced::LeaseLost) {
                self.committer.commit(tx).await?;
            }
            Ok(advanced)
        }

        async fn health(&self) -> Result<()> {
            let mut tx = self.begin(self.clock()).await?;
            let conn = SqlxConn::new(&mut tx);
            let address = schema::probe(&conn, self.app).await?;
            drop(conn);
            answered(tx.commit()).await.map_err(classify)?;
            self.host.reached(address);
            Ok(())
        }

        fn database_host(&self) -> Option<String> {
            self.host.current()
        }

        fn epoch(&self) -> u64 {
            self.host.changes()
        }

        async fn operator_take(&self, take: OperatorTake) -> Result<Taken> {
            let clock = self.clock();
            let mut tx = self.begin(clock).await?;
            let conn = SqlxConn::new(&mut tx);
            let taken = operator::take_in(&conn, &take, clock).await?;
            if matches!(taken, Taken::Lease(_)) {
                self.committer.commit(tx).await?;
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
                self.committer.commit(tx).await?;
            }
            Ok(settled)
        }
    }
}
