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
//!   advisory lock.

mod batch;
mod one_statement;
mod outbox;
mod protocol;
mod schema;

pub use deadpool_postgres::Transaction;
pub use one_statement::{OneStatement, Shape};
pub use outbox::enqueue;

use crate::record::Lease;
use crate::store::schema::Migrations;
use crate::store::Result;
use crate::store::{
    now_ms, stored_keys, Abandoned, Advanced, AfterFailure, Durability, Execution, Finish,
    Finished, FirstPhase, Lifetimes, Operation, OutboxItem, Store, StoreError,
};
use crate::{Caller, Fingerprint, IdempotencyKey};
use async_trait::async_trait;
use deadpool_postgres::{
    GenericClient, Hook, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime,
};
use protocol::Clock;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use tokio_postgres::NoTls;

/// Connections per instance.
const POOL_SIZE: usize = 32;
/// How long a request waits for another transaction holding its key (or
/// a stock row) before answering 409 / 503.
pub(super) const LOCK_TIMEOUT: &str = "5s";
/// The server a connection reached, as `host:port` (NULL over a Unix
/// socket): with several hosts in the URL, the one that took writes.
const SERVER_ADDRESS: &str = "SELECT host(inet_server_addr()) || ':' || inet_server_port()";

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// `postgres://user:password@host:port/database`.
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
    /// How long after its start a failing operation is set aside (12
    /// hours by default).
    pub attention_after: Duration,
    /// How long an expired record's tombstone is kept (7 days by default).
    pub tombstone_ttl: Duration,
    /// How long a sent outbox message is kept (7 days by default).
    pub outbox_retention: Duration,
    /// Whether opening applies the migrations the database still needs;
    /// `false`: the database must be at a schema this release can serve
    /// on ([`schema`](crate::store::schema)).
    pub migrate: bool,
}

impl PostgresOptions {
    /// The database at `url`, with the defaults (full durability, a
    /// 24-hour TTL, a 30-second lease) and no migrations of yours.
    pub fn new(url: impl Into<String>) -> Self {
        let defaults = Lifetimes::default();
        Self {
            url: url.into(),
            durability: Durability::Full,
            key_ttl: defaults.key_ttl,
            lease: defaults.lease,
            migrations: Migrations::default(),
            application_name: "exactly-once".to_owned(),
            attention_after: defaults.attention_after,
            tombstone_ttl: defaults.tombstone_ttl,
            outbox_retention: defaults.outbox_retention,
            migrate: true,
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
    lifetimes: Lifetimes,
    /// The application's schema, checked with the engine's.
    app: Migrations,
    /// What [`SERVER_ADDRESS`] said last (each new connection asks).
    host: Arc<std::sync::Mutex<Option<String>>>,
}

impl PostgresStore {
    /// Connects, checks the server is reachable and migrates the schema
    /// ([`PostgresOptions::migrate`]); fails if the schema is one this
    /// release cannot serve on (a later release's migration that does not
    /// run beside it, named in the error).
    pub async fn open(options: PostgresOptions) -> Result<Self> {
        let mut config: tokio_postgres::Config = options
            .url
            .parse()
            .map_err(|e| StoreError::unavailable("bad PostgreSQL URL").caused_by(e))?;
        let synchronous_commit = match options.durability {
            Durability::Full => "on",
            Durability::Relaxed => "off",
        };
        config.options(format!(
            "-c synchronous_commit={synchronous_commit} -c lock_timeout={LOCK_TIMEOUT}"
        ));
        config.connect_timeout(Duration::from_secs(5));
        // A database that stops answering without closing anything (its
        // host lost power, a firewall dropped the flow) is noticed: probes
        // on idle connections, and unacknowledged writes time out.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(10));
        config.tcp_user_timeout(Duration::from_secs(15));
        config.application_name(&options.application_name);
        let manager = Manager::from_config(
            config,
            NoTls,
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
            .wait_timeout(Some(Duration::from_secs(5)))
            .create_timeout(Some(Duration::from_secs(5)))
            .build()
            .map_err(|e| StoreError::internal("cannot build the pool").caused_by(e))?;
        let store = Self {
            batches: batch::Batches::start(pool.clone()),
            pool,
            lifetimes: Lifetimes {
                key_ttl: options.key_ttl,
                lease: options.lease,
                attention_after: options.attention_after,
                tombstone_ttl: options.tombstone_ttl,
                outbox_retention: options.outbox_retention,
            },
            app: options.migrations,
            host,
        };
        let mut client = store.client().await?;
        if options.migrate {
            schema::migrate(&mut client, store.app).await?;
        }
        crate::store::schema::report(&schema::check(&**client, store.app).await?.fits);
        drop(client);
        Ok(store)
    }

    /// This call's times: every expiry and lease is the database's `now()`.
    fn clock(&self) -> Clock {
        Clock::new(now_ms(), &self.lifetimes)
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
                       AND recovery_point NOT IN ('finished', 'claimed', 'expired')",
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
        self.lifetimes.key_ttl
    }

    fn lease(&self) -> Duration {
        self.lifetimes.lease
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

    async fn renew(&self, lease: &Lease) -> Result<bool> {
        protocol::renew(&self.client().await?, lease, self.clock().lease_secs).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        protocol::release(&self.client().await?, lease).await
    }

    async fn step_failed(&self, lease: &Lease, error: &str) -> Result<AfterFailure> {
        protocol::step_failed(&self.client().await?, lease, error, self.clock()).await
    }

    async fn set_aside(&self, lease: &Lease, reason: &str) -> Result<bool> {
        protocol::set_aside(&self.client().await?, lease, reason).await
    }

    async fn needing_attention(&self) -> Result<u64> {
        let client = self.client().await?;
        let row = client
            .query_one(
                &cached(
                    &client,
                    "SELECT count(*) FROM idempotency_keys WHERE attention IS NOT NULL",
                )
                .await?,
                &[],
            )
            .await
            .map_err(classify)?;
        Ok(row.get::<_, i64>(0).unsigned_abs())
    }

    async fn abandoned(&self, limit: u32, skip: &[String]) -> Result<Vec<Abandoned>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &cached(
                    &client,
                    "SELECT caller, key, recovery_point FROM idempotency_keys
                     WHERE recovery_point <> 'finished' AND leased_until <= now()
                       AND recovery_point <> ALL($2::text[])
                     ORDER BY leased_until LIMIT $1",
                )
                .await?,
                &[&i64::from(limit), &skip],
            )
            .await
            .map_err(classify)?;
        Ok(stored_keys(rows.iter().map(|row| {
            (
                row.get::<_, &[u8]>(0),
                row.get::<_, &str>(1),
                row.get::<_, String>(2),
            )
        })))
    }

    async fn take_over(&self, caller: &Caller, key: &IdempotencyKey) -> Result<Option<Lease>> {
        protocol::take_over(&self.client().await?, caller, key, self.clock().lease_secs).await
    }

    async fn sweep(&self, limit: u32) -> Result<u64> {
        let client = self.client().await?;
        outbox::prune_sent(&client, self.lifetimes.outbox_retention, limit).await?;
        protocol::sweep(&client, self.clock(), limit).await
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
        retry_in: Option<Duration>,
        error: &str,
    ) -> Result<bool> {
        outbox::settle(&self.client().await?, item, Some((retry_in, error))).await
    }

    async fn messages_waiting(&self) -> Result<u64> {
        outbox::waiting(&self.client().await?).await
    }

    async fn messages_dead(&self) -> Result<u64> {
        outbox::dead(&self.client().await?).await
    }

    async fn health(&self) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(classify)?;
        let version = schema::check(&*tx, self.app).await?.engine;
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
