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
//!   `outbox`: the messages' SQL; `schema`: migrations under an
//!   advisory lock; [`connect`]: libpq's URL parameters (TLS, timeouts),
//!   each connection's bound on a silent server, and a commit whose wait
//!   for the synchronous standby was cancelled; `wire`: the socket, TLS
//!   and the tap that sees a server owe an answer.

mod batch;
pub mod connect;
mod one_statement;
mod outbox;
mod protocol;
mod schema;
mod wire;

pub use deadpool_postgres::Transaction;
pub use one_statement::{OneStatement, Shape};
pub use outbox::enqueue;

use crate::record::Lease;
use crate::store::schema::Migrations;
use crate::store::Result;
use crate::store::{
    now_ms, stored_keys, Advanced, Durability, Execution, Finish, Finished, FirstPhase, Operation,
    OutboxItem, Store, StoreError,
};
use crate::{Caller, Fingerprint, IdempotencyKey};
use async_trait::async_trait;
use connect::{Bound, Connector, Settings};
use deadpool_postgres::{
    GenericClient, Hook, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime,
};
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
const SERVER_ADDRESS: &str = "SELECT host(inet_server_addr()) || ':' || inet_server_port()";

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// `postgres://user:password@host:port/database`, with libpq's TLS
    /// (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`) and timeout
    /// parameters and our `response_timeout` ([`connect`]).
    pub url: String,
    /// `synchronous_commit=on` or `off`.
    pub durability: Durability,
    /// How long a key's record lives.
    pub key_ttl: Duration,
    /// How long a stopped operation is its holder's.
    pub lease: Duration,
    /// Your own tables' migrations, applied before the engine's (under the
    /// same advisory lock) and recorded in `schema_migrations`.
    pub migrations: Migrations,
    /// How the connections name themselves to the server
    /// (`pg_stat_activity.application_name`); `exactly-once` by default.
    pub application_name: String,
}

impl PostgresOptions {
    /// The database at `url`, with the defaults (full durability, a
    /// 24-hour TTL, a 30-second lease) and no migrations of yours.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            durability: Durability::Full,
            key_ttl: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(30),
            migrations: Migrations::default(),
            application_name: "exactly-once".to_owned(),
        }
    }

    store_option_setters!();

    /// How the connections name themselves to the server.
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = name.into();
        self
    }
}

/// The PostgreSQL store: a connection pool.
pub struct PostgresStore {
    pool: Pool,
    /// One-statement first phases, many to a statement.
    batches: batch::Batches,
    ttl_secs: f64,
    lease_secs: f64,
    /// The application's schema, checked with the engine's.
    app: Migrations,
    /// What [`SERVER_ADDRESS`] said last (each new connection asks).
    host: Arc<std::sync::Mutex<Option<String>>>,
}

impl PostgresStore {
    /// Connects, checks the server is reachable and migrates the schema.
    pub async fn open(options: PostgresOptions) -> Result<Self> {
        let mut settings = Settings::parse(&options.url)
            .map_err(|e| StoreError::unavailable("bad PostgreSQL URL").caused_by(e))?;
        let synchronous_commit = match options.durability {
            Durability::Full => "on",
            Durability::Relaxed => "off",
        };
        settings.config.options(format!(
            "-c synchronous_commit={synchronous_commit} -c lock_timeout={LOCK_TIMEOUT}"
        ));
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
        schema::migrate(&mut first, options.migrations).await?;
        drop(first);
        let manager = Manager::from_connect(
            config,
            connector,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let host: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
        let seen = host.clone();
        let pool = Pool::builder(manager)
            .post_create(Hook::async_fn(move |client, _| {
                let seen = seen.clone();
                Box::pin(async move {
                    let address = client.query_one(SERVER_ADDRESS, &[]).await;
                    if let Ok(row) = address {
                        *seen.lock().unwrap_or_else(|e| e.into_inner()) = row.get(0);
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
        let store = Self {
            batches: batch::Batches::start(pool.clone()),
            pool,
            ttl_secs: options.key_ttl.as_secs_f64(),
            lease_secs: options.lease.as_secs_f64(),
            app: options.migrations,
            host,
        };
        Ok(store)
    }

    /// This call's times: every expiry and lease is the database's `now()`.
    fn clock(&self) -> Clock {
        Clock {
            now_ms: now_ms(),
            ttl_secs: self.ttl_secs,
            lease_secs: self.lease_secs,
        }
    }

    /// The connection pool, for your own reads (a listing, a lookup).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// A pooled connection; 503 when none can be had.
    pub async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool
            .get()
            .await
            .map_err(|e| StoreError::unavailable("no database connection").caused_by(e))
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn lookup(&self, caller: &Caller, key: &IdempotencyKey) -> Result<Option<Finished>> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &cached(
                    &client,
                    "SELECT fingerprint, status, headers, body,
                            extract(epoch FROM expires_at - now())::float8
                     FROM idempotency_keys
                     WHERE caller = $1 AND key = $2 AND expires_at > now()
                       AND recovery_point = 'finished'",
                )
                .await?,
                &[&caller, &key.as_ref()],
            )
            .await
            .map_err(classify)?;
        row.map(|row| {
            Ok(Finished {
                record: protocol::record(&row)?,
                life: Duration::from_secs_f64(row.get::<_, f64>(4).max(0.0)),
            })
        })
        .transpose()
    }

    async fn unfinished(
        &self,
        caller: &Caller,
        key: &IdempotencyKey,
    ) -> Result<Option<Fingerprint>> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &cached(
                    &client,
                    "SELECT fingerprint FROM idempotency_keys
                     WHERE caller = $1 AND key = $2
                       AND recovery_point NOT IN ('finished', 'claimed')",
                )
                .await?,
                &[&caller, &key.as_ref()],
            )
            .await
            .map_err(classify)?;
        row.map(|row| {
            let bytes: &[u8] = row.get(0);
            bytes
                .try_into()
                .map(Fingerprint::from_bytes)
                .map_err(|_| StoreError::internal("a stored fingerprint is not 32 bytes"))
        })
        .transpose()
    }

    fn key_ttl(&self) -> Duration {
        Duration::from_secs_f64(self.ttl_secs)
    }

    async fn execute(&self, phase: FirstPhase) -> Result<Execution> {
        let clock = self.clock();
        if phase.finish == Finish::Commit {
            if let Some(one) = phase.operation.one_statement() {
                return self.batches.execute(phase.request, one, clock).await;
            }
        }
        let mut client = self.client().await?;
        protocol::execute(&mut client, &phase, clock).await
    }

    async fn advance(&self, lease: &Lease, phase: Arc<dyn Operation>) -> Result<Advanced> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(classify)?;
        protocol::advance(tx, lease, phase.as_ref(), self.clock()).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        exec(
            &self.client().await?,
            "UPDATE idempotency_keys SET leased_until = now()
             WHERE caller = $1 AND key = $2 AND lease_token = $3",
            &[&lease.caller, &lease.key.as_ref(), &&lease.token[..]],
        )
        .await?;
        Ok(())
    }

    async fn abandoned(&self, limit: u32) -> Result<Vec<(Caller, IdempotencyKey)>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &cached(
                    &client,
                    "SELECT caller, key FROM idempotency_keys
                     WHERE recovery_point <> 'finished' AND leased_until <= now()
                     ORDER BY leased_until LIMIT $1",
                )
                .await?,
                &[&i64::from(limit)],
            )
            .await
            .map_err(classify)?;
        Ok(stored_keys(rows.iter().map(|row| {
            (row.get::<_, &[u8]>(0), row.get::<_, &str>(1))
        })))
    }

    async fn take_over(&self, caller: &Caller, key: &IdempotencyKey) -> Result<Option<Lease>> {
        protocol::take_over(&self.client().await?, caller, key, self.lease_secs).await
    }

    async fn sweep(&self, limit: u32) -> Result<u64> {
        exec(
            &self.client().await?,
            "DELETE FROM idempotency_keys WHERE ctid IN (
               SELECT ctid FROM idempotency_keys
               WHERE expires_at <= now() AND recovery_point = 'finished'
               ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
            &[&i64::from(limit)],
        )
        .await
    }

    async fn due_messages(&self, limit: u32, claim: Duration) -> Result<Vec<OutboxItem>> {
        outbox::claim(&self.client().await?, limit, claim).await
    }

    async fn message_sent(&self, item: &OutboxItem) -> Result<bool> {
        outbox::settle(&self.client().await?, item, None).await
    }

    async fn message_failed(
        &self,
        item: &OutboxItem,
        retry_in: Duration,
        error: &str,
    ) -> Result<bool> {
        outbox::settle(&self.client().await?, item, Some((retry_in, error))).await
    }

    async fn messages_waiting(&self) -> Result<u64> {
        outbox::waiting(&self.client().await?).await
    }

    async fn health(&self) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(classify)?;
        let version = schema::check(&tx, self.app).await?;
        // A write probe: healthy means a write can commit.
        exec(
            &tx,
            "UPDATE exactly_once_migrations SET applied_at = applied_at WHERE version = $1",
            &[&version],
        )
        .await?;
        let address = tx.query_one(SERVER_ADDRESS, &[]).await.map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        *self.host.lock().unwrap_or_else(|e| e.into_inner()) = address.get(0);
        Ok(())
    }

    fn database_host(&self) -> Option<String> {
        self.host.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Runs a cached statement; how many rows it changed.
pub async fn exec(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64> {
    client
        .execute(&cached(client, sql).await?, params)
        .await
        .map_err(classify)
}

/// A statement prepared once per connection and cached with it, so each
/// request costs one round trip per statement, not two.
pub async fn cached(client: &impl GenericClient, sql: &str) -> Result<tokio_postgres::Statement> {
    client.prepare_cached(sql).await.map_err(classify)
}

/// Sorts PostgreSQL errors: what a retry may fix (503) and what it will
/// not. Your reads and operations can use it for theirs.
pub fn classify(e: tokio_postgres::Error) -> StoreError {
    let retryable = match e.code() {
        // No SQLSTATE: the connection broke, or the server is gone.
        None => true,
        Some(state) => {
            let class = &state.code()[..2];
            // connection exception, insufficient resources, operator
            // intervention (shutdown), transaction rollback (serialisation,
            // deadlock), lock not available.
            matches!(class, "08" | "53" | "57" | "40") || *state == SqlState::LOCK_NOT_AVAILABLE
        }
    };
    StoreError::sorted(retryable, "PostgreSQL", e)
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
