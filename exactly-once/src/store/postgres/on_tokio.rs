//! The [`Postgres`] backend: the engine on tokio-postgres, through a
//! deadpool pool (the store's own, or yours: [`PostgresStore::with_pool`]).

use super::batch;
use super::citus;
use super::clock::Clock;
use super::connect::{Bound, Connector};
use super::error::classify;
use super::error::classify_commit;
use super::leases;
use super::one_statement::OneStatement;
use super::operator;
use super::outbox;
use super::protocol;
use super::records;
use super::schema::{self, SERVER_ADDRESS};
use super::server_seen::ServerSeen;
use super::session::{self, Session, LOCK_TIMEOUT};
use super::statement::Driver;
use super::url_params::Settings;
use crate::backend::{Backend, BoxFuture, Operation, RunContext};
use crate::record::{Lease, PhaseEnd, StoredResponse};
use crate::store::operator::{OperatorTake, Settlement, Taken};
use crate::store::schema::Migrations;
use crate::store::{
    now_ms, Advanced, Execution, FirstPhase, StoreError, TimeLimits, TransactionEnd,
};
use crate::store::{Result, StoreOptions};
use deadpool_postgres::Transaction;
use deadpool_postgres::{Hook, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use std::sync::Arc;
use std::time::Duration;

/// Connections per instance.
const POOL_SIZE: usize = 32;
/// How long a request waits for a pooled connection when all are busy
/// (a hung primary holds them until `response_timeout` ends them).
const POOL_WAIT: Duration = Duration::from_secs(3);

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

impl Driver for Postgres {
    type Tx<'c> = Transaction<'c>;

    fn run<'a>(
        operation: &'a dyn Operation<Self>,
        tx: &'a Transaction<'_>,
        at: &'a RunContext<'a>,
    ) -> BoxFuture<'a, Result<PhaseEnd>> {
        operation.run(tx, at)
    }
}

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
    citus: citus::OnCitus,
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
    /// named ones on the connections ([`super::Sql`]); migrations run as `open`
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
            citus: citus::OnCitus::default(),
        }
    }

    /// Whether the database is a Citus coordinator's (asked once): there a
    /// one-statement first phase is not batched, since a statement over
    /// many callers' rows spans shards, and even one request's statement
    /// (its rows from `unnest`) is planned through intermediate results
    /// sent to every worker.
    ///
    /// Once known, answered without a connection: asked on every first
    /// phase, it must not take one from the pool each time.
    async fn on_citus(&self) -> Result<bool> {
        if let Some(known) = self.citus.known() {
            return Ok(known);
        }
        self.citus.ask(&self.client().await?).await
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
            execute(&mut client, &phase, clock).await
        }

        async fn advance(
            &self,
            lease: &Lease,
            phase: Arc<dyn Operation<Postgres>>,
        ) -> Result<Advanced> {
            let clock = self.clock_for(phase.as_ref());
            let mut client = self.client().await?;
            let tx = begin(&mut client, clock).await?;
            advance(tx, lease, phase.as_ref(), clock).await
        }

        async fn health(&self) -> Result<()> {
            let mut client = self.client().await?;
            let tx = begin(&mut client, self.clock()).await?;
            let address = schema::probe(&tx, self.app).await?;
            tx.commit().await.map_err(classify)?;
            self.host.reached(address);
            Ok(())
        }

        async fn operator_take(&self, take: OperatorTake) -> Result<Taken> {
            let mut client = self.client().await?;
            operator_take(&mut client, &take, self.clock()).await
        }

        async fn settle(
            &self,
            lease: &Lease,
            phase: Arc<dyn Operation<Postgres>>,
            settlement: &Settlement,
        ) -> Result<Option<StoredResponse>> {
            let mut client = self.client().await?;
            let clock = self.clock_for(phase.as_ref());
            operator_settle(&mut client, lease, phase.as_ref(), settlement, clock).await
        }

        fn database_host(&self) -> Option<String> {
            self.host.current()
        }

        fn epoch(&self) -> u64 {
            self.host.changes()
        }
    }
}

/// Opens a transaction with the engine's settings: behind a pooler it sets
/// them itself (`SET LOCAL`), elsewhere the connection's session has them.
async fn begin(
    client: &mut deadpool_postgres::Object,
    clock: Clock,
) -> Result<deadpool_postgres::Transaction<'_>> {
    let tx = client.transaction().await.map_err(classify)?;
    if let Some(settings) = clock.session.per_transaction(LOCK_TIMEOUT) {
        tx.batch_execute(&settings).await.map_err(classify)?;
    }
    Ok(tx)
}

/// Claims the key (waiting for a transaction that holds it) and runs the
/// operation's first phase, or finds the key's record and decides; commits
/// (or, as the phase asks, rolls back).
async fn execute(
    client: &mut deadpool_postgres::Object,
    phase: &FirstPhase<Postgres>,
    clock: Clock,
) -> Result<Execution> {
    let tx = begin(client, clock).await?;
    match protocol::execute_in::<Postgres>(&tx, phase, clock).await? {
        Execution::InUse => Ok(Execution::InUse),
        execution if protocol::rolls_back(&execution, phase.end) => {
            tx.rollback().await.map_err(classify)?;
            Ok(execution.rolled_back())
        }
        execution => {
            commit(tx).await?;
            Ok(execution)
        }
    }
}

/// Commits. A commit that fails by losing its backend leaves its outcome
/// unknown: it may have committed. That is never answered as "nothing was
/// done" ([`StoreErrorKind::OutcomeUnknown`](crate::store::StoreErrorKind::OutcomeUnknown)): the retry learns which.
async fn commit(tx: deadpool_postgres::Transaction<'_>) -> Result<()> {
    tx.commit().await.map_err(|e| classify_commit(e, "COMMIT"))
}

/// The next phase of the lease's operation, if the lease is still its
/// holder's (the row stays locked until the commit, so nobody takes it
/// over meanwhile); records how the phase ended.
async fn advance(
    tx: deadpool_postgres::Transaction<'_>,
    lease: &Lease,
    phase: &dyn Operation<Postgres>,
    clock: Clock,
) -> Result<Advanced> {
    let advanced = leases::advance_in::<Postgres>(&tx, lease, phase, clock).await?;
    if !matches!(advanced, Advanced::LeaseLost) {
        commit(tx).await?;
    }
    Ok(advanced)
}

/// Takes the key's operation over for an operator, in one transaction.
async fn operator_take(
    client: &mut deadpool_postgres::Object,
    take: &OperatorTake,
    clock: Clock,
) -> Result<Taken> {
    let tx = begin(client, clock).await?;
    let taken = operator::take_in(&tx, take, clock).await?;
    if matches!(taken, Taken::Lease(_)) {
        commit(tx).await?;
    }
    Ok(taken)
}

/// Settles the lease's operation: its phase, its answer, its audit row,
/// one transaction.
async fn operator_settle(
    client: &mut deadpool_postgres::Object,
    lease: &Lease,
    phase: &dyn Operation<Postgres>,
    settlement: &Settlement,
    clock: Clock,
) -> Result<Option<StoredResponse>> {
    let tx = begin(client, clock).await?;
    let settled = operator::settle_in::<Postgres>(&tx, lease, phase, settlement, clock).await?;
    if settled.is_some() {
        commit(tx).await?;
    }
    Ok(settled)
}

/// `?` on a tokio-postgres call (in an operation, a read of yours): the
/// error sorted by [`classify`].
impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        classify(e)
    }
}
