//! The PostgreSQL backend: how the server runs as many instances.
//!
//! Each phase is one transaction on a pooled connection
//! (`protocol::execute`):
//!
//! 1. the key is **claimed** with `INSERT … ON CONFLICT (caller, key) DO
//!    UPDATE … WHERE` the existing record is finished and expired (an
//!    expired record counts as absent). If another transaction (in this
//!    process or another instance) holds the same key, PostgreSQL makes
//!    this statement wait for that transaction's outcome: committed, the
//!    claim finds its record and replays it (or answers 422 for another
//!    request); rolled back, the claim succeeds and the request runs.
//!    Waiting longer than `lock_timeout` answers 409
//!    `idempotency-key-in-use` with `Retry-After`;
//! 2. the business change runs in the same transaction;
//! 3. the response (or the recovery point and a lease) is written into the
//!    claimed record, and the transaction commits (`synchronous_commit=on`
//!    with `--durability full`) before the answer leaves.
//!
//! An operation whose rows and answer are made before the database is
//! touched can skip the transaction: its claim, rows and answer are one
//! statement (`one_statement`), and the requests that
//! arrive together share one, a row each (`batch`: group commit, as
//! SQLite's writer does it). Every expiry and lease is judged by the
//! database's clock (`now()`), so instances with wrong clocks still agree.
//!
//! - `protocol`: the keyed protocol's SQL; `one_statement`: its
//!   one-statement first phase; `batch`: many requests to a statement;
//!   `outbox`: the messages' SQL; `operator`: an operator's listing,
//!   takeover and settlement; `schema`: migrations under an advisory
//!   lock; `sslmode`: which TLS a URL gets (`verify-full` off loopback by
//!   default); [`connect`]: libpq's URL parameters (TLS, timeouts), each
//!   connection's bound on a silent server, and a commit whose wait for
//!   the synchronous standby was cancelled; `wire`: the socket, TLS and
//!   the tap that sees a server owe an answer.

/// The [`Store`] of a PostgreSQL driver: the calls given, and every call
/// that is a statement or two on a connection of the pool, the same on
/// every driver (each store has `conn()`, a pooled [`Conn`], and
/// `lifetimes`).
macro_rules! store_on_a_pool {
    (impl Store<$backend:ty> for $store:ty { $($calls:tt)* }) => {
        #[async_trait::async_trait]
        impl $crate::store::Store<$backend> for $store {
            $($calls)*

            async fn lookup(
                &self,
                caller: &$crate::caller::Caller,
                key: &$crate::key::IdempotencyKey,
            ) -> $crate::store::Result<Option<$crate::store::LiveRecord>> {
                protocol::lookup(&self.conn().await?, caller, key).await
            }

            async fn unfinished(
                &self,
                caller: &$crate::caller::Caller,
                key: &$crate::key::IdempotencyKey,
            ) -> $crate::store::Result<Option<$crate::fingerprint::Fingerprint>> {
                protocol::unfinished(&self.conn().await?, caller, key).await
            }

            fn key_ttl(&self) -> std::time::Duration {
                self.lifetimes.key_ttl
            }

            fn lease(&self) -> std::time::Duration {
                self.lifetimes.lease
            }

            async fn renew(
                &self,
                lease: &$crate::record::Lease,
                length: std::time::Duration,
            ) -> $crate::store::Result<bool> {
                protocol::renew(&self.conn().await?, lease, length.as_secs_f64()).await
            }

            async fn release(&self, lease: &$crate::record::Lease) -> $crate::store::Result<bool> {
                protocol::release(&self.conn().await?, lease).await
            }

            async fn step_failed(
                &self,
                lease: &$crate::record::Lease,
                error: &str,
            ) -> $crate::store::Result<$crate::store::AfterFailure> {
                protocol::step_failed(&self.conn().await?, lease, error, self.clock()).await
            }

            async fn set_aside(
                &self,
                lease: &$crate::record::Lease,
                reason: &str,
            ) -> $crate::store::Result<bool> {
                protocol::set_aside(&self.conn().await?, lease, reason).await
            }

            async fn needing_attention(&self) -> $crate::store::Result<u64> {
                protocol::needing_attention(&self.conn().await?).await
            }

            async fn abandoned(
                &self,
                limit: u32,
                skip: &[String],
            ) -> $crate::store::Result<Vec<$crate::store::Abandoned>> {
                protocol::abandoned(&self.conn().await?, limit, skip).await
            }

            async fn take_over(
                &self,
                caller: &$crate::caller::Caller,
                key: &$crate::key::IdempotencyKey,
            ) -> $crate::store::Result<Option<$crate::record::Lease>> {
                let lease_secs = self.clock().lease_secs;
                protocol::take_over(&self.conn().await?, caller, key, lease_secs).await
            }

            async fn sweep(&self, limit: u32) -> $crate::store::Result<u64> {
                let (clock, retention) = (self.clock(), self.lifetimes.outbox_retention);
                protocol::sweep(&self.conn().await?, clock, limit, retention).await
            }

            async fn due_messages(
                &self,
                limit: u32,
                claim: std::time::Duration,
            ) -> $crate::store::Result<Vec<$crate::store::OutboxItem>> {
                outbox::claim(&self.conn().await?, limit, claim).await
            }

            async fn message_sent(
                &self,
                item: &$crate::store::OutboxItem,
            ) -> $crate::store::Result<bool> {
                outbox::settle(&self.conn().await?, item, None).await
            }

            async fn message_failed(
                &self,
                item: &$crate::store::OutboxItem,
                retry_in: Option<std::time::Duration>,
                error: &str,
            ) -> $crate::store::Result<bool> {
                outbox::settle(&self.conn().await?, item, Some((retry_in, error))).await
            }

            async fn messages_waiting(&self) -> $crate::store::Result<u64> {
                outbox::waiting(&self.conn().await?).await
            }

            async fn messages_dead(&self) -> $crate::store::Result<u64> {
                outbox::dead(&self.conn().await?).await
            }

            async fn operations(
                &self,
                filter: &$crate::operator::ListFilter,
            ) -> $crate::store::Result<Vec<$crate::operator::OperationRecord>> {
                operator::operations(&self.conn().await?, filter).await
            }

            async fn operation(
                &self,
                caller: &$crate::caller::Caller,
                key: &$crate::key::IdempotencyKey,
            ) -> $crate::store::Result<Option<$crate::operator::OperationRecord>> {
                operator::operation(&self.conn().await?, caller, key).await
            }

            async fn find_operations(
                &self,
                prefix: &[u8],
            ) -> $crate::store::Result<Vec<($crate::caller::Caller, $crate::key::IdempotencyKey)>> {
                operator::find(&self.conn().await?, prefix).await
            }

            async fn census(&self) -> $crate::store::Result<$crate::operator::Census> {
                operator::census(&self.conn().await?).await
            }

            async fn outbox_census(&self) -> $crate::store::Result<$crate::operator::OutboxCensus> {
                operator::outbox_census(&self.conn().await?).await
            }

            async fn actions(
                &self,
                operation: &$crate::operation_id::OperationId,
            ) -> $crate::store::Result<Vec<$crate::operator::ActionRecord>> {
                operator::actions(&self.conn().await?, operation).await
            }
        }
    };
}

mod batch;
mod citus;
mod conn;
pub(crate) mod connect;
#[cfg(feature = "sqlx")]
pub(crate) mod on_sqlx;
mod one_statement;
mod operator;
mod outbox;
mod protocol;
mod schema;
mod session;
mod sql;
mod sslmode;
mod wire;

pub use conn::{Conn, DbError, Index, Param, PgRow};
pub use deadpool_postgres::Transaction;
pub use one_statement::{Insert, OneStatement, Shape, Values};
pub use outbox::enqueue;
pub(crate) use session::Session;
pub use sql::Sql;

/// The backend of many instances: PostgreSQL, through tokio-postgres and a
/// deadpool pool (the store's, or your own: [`PostgresStore::with_pool`]).
/// An [`Operation<Postgres>`](crate::Operation) writes with the request's
/// own transaction, and returns a future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Postgres;

impl crate::backend::sealed::Sealed for Postgres {}

impl Backend for Postgres {
    type Transaction<'t> = &'t Transaction<'t>;
    type RunOutput<'t> = BoxFuture<'t, Result<PhaseEnd>>;
    type OneStatement = OneStatement;
    const NAME: &'static str = "postgres";
}

impl conn::Driver for Postgres {
    type Tx<'c> = Transaction<'c>;

    fn run<'a>(
        operation: &'a dyn Operation<Self>,
        tx: &'a Transaction<'_>,
        at: &'a RunContext<'a>,
    ) -> BoxFuture<'a, Result<PhaseEnd>> {
        operation.run(tx, at)
    }
}

use crate::backend::{Backend, BoxFuture, Operation, RunContext};
use crate::caller::Caller;
use crate::key::IdempotencyKey;
use crate::record::{Lease, PhaseEnd, StoredResponse};
use crate::store::operator::{Intervention, Settlement, Taken, Takeover};
use crate::store::schema::Migrations;
use crate::store::{
    now_ms, Advanced, Execution, FirstPhase, StoreError, TimeLimits, TransactionEnd,
};
use crate::store::{Result, StoreOptions};
use connect::{Bound, Connector, Settings};
use deadpool_postgres::{Hook, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use protocol::Clock;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

/// Connections per instance.
const POOL_SIZE: usize = 32;
/// How long a request waits for a pooled connection when all are busy
/// (a hung primary holds them until `response_timeout` ends them).
const POOL_WAIT: Duration = Duration::from_secs(3);
/// How long a request waits for another transaction holding its key (or
/// a stock row) before answering 409 / 503.
pub(super) const LOCK_TIMEOUT: &str = "5s";
/// The server a connection reached, as `host:port` (NULL over a Unix
/// socket): with several hosts in the URL, the one that took writes.
pub(super) const SERVER_ADDRESS: Sql = Sql::new(
    "SELECT host(inet_server_addr()) || ':' || inet_server_port()",
    &[],
);

/// Checks that this release serves on the database's schema, and says so
/// in the log. In a transaction: behind a pooler, the only place a
/// statement's parse and its execution reach the same server connection.
async fn check_schema(client: &mut tokio_postgres::Client, app: Migrations) -> Result<()> {
    let tx = client.transaction().await.map_err(classify)?;
    crate::store::schema::report(&schema::check(&tx, app).await?.fits);
    tx.commit().await.map_err(classify)
}

/// The PostgreSQL store: a connection pool.
pub struct PostgresStore {
    pool: Pool,
    /// One-statement first phases, many to a statement.
    batches: batch::Batches,
    lifetimes: TimeLimits,
    /// How each transaction gets its settings.
    session: Session,
    /// The application's schema, checked with the engine's.
    app: Migrations,
    /// The server this instance writes to, and how often it changed.
    host: Arc<ServerSeen>,
    /// Whether the database is a Citus coordinator's, once asked.
    citus: tokio::sync::OnceCell<bool>,
}

impl PostgresStore {
    /// Connects, checks the server is reachable and migrates the schema
    /// ([`StoreOptions::migrate`]); fails if the schema is one this
    /// release cannot serve on (a later release's migration that does not
    /// run beside it, named in the error). `url`:
    /// `postgres://user:password@host:port/database`, with libpq's TLS
    /// (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`) and timeout
    /// parameters and our `response_timeout`.
    pub async fn open(url: &str, options: StoreOptions) -> Result<Self> {
        let (url, pooled) = session::pooler_in(url)?;
        let mut settings = Settings::parse(&url)
            .map_err(|e| StoreError::unavailable("bad PostgreSQL URL").caused_by(e))?;
        if let Some(downgrade) = settings.downgrade() {
            tracing::warn!("{downgrade}");
        }
        let session = Session::new(pooled, options.durability);
        if let Some(options) = session.startup_options() {
            settings.config.options(options);
        }
        settings.config.application_name(&options.application_name);
        let hosts = settings.config.get_hosts().len().max(1) as u32;
        // Creating a connection tries each host for connect_timeout.
        let create = settings
            .connect_timeout
            .map(|each| each * hosts + Duration::from_secs(1));
        let config = settings.config.clone();
        let connector = Connector::new(settings)
            .map_err(|e| StoreError::unavailable("cannot set up TLS").caused_by(e))?;
        // Migrations on a connection of their own, with no bound on a
        // statement's silence (one may build an index for minutes).
        let (mut first, _driver) = connector
            .connect(Bound::None)
            .await
            .map_err(|e| StoreError::unavailable("cannot connect to PostgreSQL").caused_by(e))?;
        if options.migrate {
            schema::migrate(&mut first, options.migrations, session.pooled()).await?;
        }
        // In a transaction: behind a pooler, the only place a statement's
        // parse and its execution reach the same server connection.
        check_schema(&mut first, options.migrations).await?;
        drop(first);
        let manager = Manager::from_connect(
            config,
            connector,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let host: Arc<ServerSeen> = Arc::default();
        let seen = host.clone();
        let named = session.named_statements();
        let pool = Pool::builder(manager)
            .post_create(Hook::async_fn(move |client, _| {
                let seen = seen.clone();
                Box::pin(async move {
                    if named {
                        // Its first named statement in its cache: from now
                        // on every statement on it is named and cached
                        // (`conn::cached_statements`). If this fails, the
                        // connection runs them unnamed; the query below
                        // finds out whether it works at all.
                        let _ = client
                            .prepare_typed_cached(SERVER_ADDRESS.text(), &[])
                            .await;
                    }
                    let address = SERVER_ADDRESS.query_one(&**client, &[]).await;
                    if let Ok(row) = address {
                        seen.reached(row.get(0));
                    }
                    Ok(())
                })
            }))
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(create)
            .build()
            .map_err(|e| StoreError::internal("cannot build the pool").caused_by(e))?;
        Ok(Self::over(pool, &options, session, host))
    }

    /// A store on your application's own deadpool `pool` (the one your
    /// handlers already read with), rather than a pool of its own: the
    /// engine's transactions and yours share its connections. The pool's
    /// configuration decides where and how to connect (TLS included), so
    /// [`StoreOptions::application_name`] is not read. Its
    /// connections carry none of the engine's settings, so every
    /// transaction sets its own (`SET LOCAL`, as behind PgBouncer:
    /// `Session`), and its statements are unnamed unless your code keeps
    /// named ones on the connections ([`Sql`]); migrations run as `open`
    /// runs them behind a pooler (one transaction, under a transaction
    /// lock). What the store's own pool
    /// adds and yours may not: a bound on a silent server (a hung primary,
    /// `response_timeout`) and the server it writes to in `database_host_info`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use exactly_once::{PostgresStore, StoreOptions};
    ///
    /// let config: tokio_postgres::Config = "postgres://app@db/app".parse()?;
    /// let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    /// let pool = deadpool_postgres::Pool::builder(manager).max_size(16).build()?;
    /// let store = PostgresStore::with_pool(pool.clone(), StoreOptions::new()).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn with_pool(pool: Pool, options: StoreOptions) -> Result<Self> {
        let session = Session::new(true, options.durability);
        let mut first = pool
            .get()
            .await
            .map_err(|e| StoreError::unavailable("cannot connect to PostgreSQL").caused_by(e))?;
        let client: &mut tokio_postgres::Client = &mut first;
        if options.migrate {
            schema::migrate(client, options.migrations, true).await?;
        }
        check_schema(client, options.migrations).await?;
        drop(first);
        Ok(Self::over(pool, &options, session, Arc::default()))
    }

    fn over(pool: Pool, options: &StoreOptions, session: Session, host: Arc<ServerSeen>) -> Self {
        Self {
            batches: batch::Batches::start(pool.clone()),
            pool,
            lifetimes: options.limits,
            app: options.migrations,
            host,
            session,
            citus: tokio::sync::OnceCell::new(),
        }
    }

    /// Whether the database is a Citus coordinator's (asked once): there a
    /// one-statement first phase is not batched, since a statement over
    /// many callers' rows spans shards, and even one request's statement
    /// (its rows from `unnest`) is planned through intermediate results
    /// sent to every worker.
    async fn on_citus(&self) -> Result<bool> {
        let asked = self
            .citus
            .get_or_try_init(|| async { citus::present(&self.client().await?).await });
        asked.await.copied()
    }

    /// The clock of a phase of `operation`: its records live for its own
    /// TTL when it has one.
    fn clock_for(&self, operation: &dyn Operation<Postgres>) -> Clock {
        self.clock().for_operation(operation.key_ttl())
    }

    /// This call's times: every expiry and lease is the database's `now()`.
    fn clock(&self) -> Clock {
        Clock::new(now_ms(), &self.lifetimes, self.session)
    }

    /// The connection pool, for your own reads (a listing, a lookup).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// A pooled connection for the protocol's statements.
    async fn conn(&self) -> Result<deadpool_postgres::Object> {
        self.client().await
    }

    /// A pooled connection; 503 when none can be had.
    pub async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool
            .get()
            .await
            .map_err(|e| StoreError::unavailable("no database connection").caused_by(e))
    }
}

store_on_a_pool! {
    impl Store<Postgres> for PostgresStore {
        async fn execute(&self, phase: FirstPhase<Postgres>) -> Result<Execution> {
            let clock = self.clock_for(phase.operation.as_ref());
            // A batch records every key in it for the store's TTL.
            if phase.end == TransactionEnd::Commit
                && phase.operation.key_ttl().is_none()
                && !self.on_citus().await?
            {
                if let Some(one) = phase.operation.one_statement() {
                    return self.batches.execute(phase.request, one, clock).await;
                }
            }
            let mut client = self.client().await?;
            protocol::execute(&mut client, &phase, clock).await
        }

        async fn advance(
            &self,
            lease: &Lease,
            phase: Arc<dyn Operation<Postgres>>,
        ) -> Result<Advanced> {
            let clock = self.clock_for(phase.as_ref());
            let mut client = self.client().await?;
            let tx = protocol::begin(&mut client, clock).await?;
            protocol::advance(tx, lease, phase.as_ref(), clock).await
        }

        async fn health(&self) -> Result<()> {
            let mut client = self.client().await?;
            let tx = protocol::begin(&mut client, self.clock()).await?;
            let address = schema::probe(&tx, self.app).await?;
            tx.commit().await.map_err(classify)?;
            self.host.reached(address);
            Ok(())
        }

        async fn operator_take(
            &self,
            caller: &Caller,
            key: &IdempotencyKey,
            takeover: Takeover,
            by: Option<&Intervention>,
        ) -> Result<Taken> {
            let mut client = self.client().await?;
            operator::take(&mut client, caller, key, takeover, by, self.clock()).await
        }

        async fn settle(
            &self,
            lease: &Lease,
            phase: Arc<dyn Operation<Postgres>>,
            settlement: &Settlement,
        ) -> Result<Option<StoredResponse>> {
            let mut client = self.client().await?;
            let clock = self.clock_for(phase.as_ref());
            operator::settle(&mut client, lease, phase.as_ref(), settlement, clock).await
        }

        fn database_host(&self) -> Option<String> {
            self.host.current()
        }

        fn epoch(&self) -> u64 {
            self.host.changes()
        }
    }
}

/// The server (`host:port`) this instance's connections reach, as each new
/// connection (and each health check) finds it, and how many times it
/// changed: a new primary after a failover. An asynchronous standby
/// promoted in its place may lack records a copy in memory still holds
/// (the replay cache), so a change is a new epoch of the store, and copies
/// of the last are not served: the database decides again.
#[derive(Debug, Default)]
struct ServerSeen {
    current: std::sync::Mutex<Option<String>>,
    changes: std::sync::atomic::AtomicU64,
}

impl ServerSeen {
    fn reached(&self, address: Option<String>) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.is_some() && address.is_some() && *current != address {
            self.changes
                .fetch_add(1, std::sync::atomic::Ordering::Release);
            tracing::warn!(was = ?*current, now = ?address, "the database server changed (a failover?): copies of records in memory are no longer served");
        }
        *current = address;
    }

    fn current(&self) -> Option<String> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn changes(&self) -> u64 {
        self.changes.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Sorts PostgreSQL errors: what a retry may fix (503) and what it will
/// not. Your reads and operations can use it for theirs.
pub fn classify(e: impl Into<DbError>) -> StoreError {
    let e = e.into();
    let retryable = match e.code() {
        // No SQLSTATE: the connection broke, or the server is gone.
        None => e.connection_lost(),
        Some(state) => {
            let class = &state.code()[..2];
            // connection exception, insufficient resources, operator
            // intervention (shutdown), transaction rollback (serialisation,
            // deadlock), lock not available.
            matches!(class, "08" | "53" | "57" | "40")
                || state == SqlState::LOCK_NOT_AVAILABLE
                || citus::node_unreachable(&e)
        }
    };
    StoreError::sorted(retryable, "PostgreSQL", e)
}

/// `?` on a tokio-postgres call (in an operation, a read of yours): the
/// error sorted by [`classify`].
impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        classify(e)
    }
}

/// A caller is stored as its hash, a 32-byte BYTEA.
impl ToSql for Caller {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        (&self.as_bytes()[..]).to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <&[u8] as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}
