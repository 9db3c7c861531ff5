//! The PostgreSQL backend: how the server runs as many instances.
//!
//! Each request is one transaction on a pooled connection
//! ([`operations::execute`]):
//!
//! 1. an expired record of the key is deleted (it counts as absent);
//! 2. the key is **claimed** with `INSERT … ON CONFLICT (caller, key) DO
//!    NOTHING`. If another transaction (in this process or another
//!    instance) holds the same key, PostgreSQL makes this statement wait
//!    for that transaction's outcome: committed, the claim finds its record
//!    and replays it (or answers 422 for another request); rolled back, the
//!    claim succeeds and the request runs. Waiting longer than
//!    `lock_timeout` answers 409 `idempotency-key-in-use` with `Retry-After`;
//! 3. the business change runs in the same transaction;
//! 4. the response is written into the claimed record, and the transaction
//!    commits (`synchronous_commit=on` with `--durability full`) before
//!    the answer leaves.
//!
//! Group commit is PostgreSQL's own: concurrent commits share WAL flushes.
//! [`schema`] migrates under an advisory lock.

mod operations;
mod schema;

use crate::config::Durability;
use crate::domain::{Caller, Charge, IdempotencyKey, ItemId};
use crate::idempotency::record::{Record, StoredResponse};
use crate::store::{
    millis, now_ms, ChargePage, ChargeQuery, Execution, Finish, IdempotentRequest, Operation,
    RunContext, Store, StoreError,
};
use async_trait::async_trait;
use deadpool_postgres::Transaction;
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

/// Connections per instance.
const POOL_SIZE: usize = 32;
/// How long a request waits for another transaction holding its key (or
/// a stock row) before answering 409 / 503.
const LOCK_TIMEOUT: &str = "5s";

/// An operation's business change in PostgreSQL, inside the transaction
/// that also records its key.
#[async_trait]
pub trait Run {
    /// Runs the change and returns the answer to record.
    async fn run_postgres(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> Result<StoredResponse, StoreError>;
}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// `postgres://user:password@host:port/database`.
    pub url: String,
    /// `synchronous_commit=on` or `off`.
    pub durability: Durability,
    /// How long a key's record lives.
    pub key_ttl: Duration,
}

/// The PostgreSQL store: a connection pool.
pub struct PostgresStore {
    pool: Pool,
    ttl_ms: i64,
}

impl PostgresStore {
    /// Connects, checks the server is reachable and migrates the schema.
    pub async fn open(options: PostgresOptions) -> Result<Self, StoreError> {
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
        config.application_name("idempotent-checkout");
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(5)))
            .create_timeout(Some(Duration::from_secs(5)))
            .build()
            .map_err(|e| StoreError::internal("cannot build the pool").caused_by(e))?;
        let store = Self {
            pool,
            ttl_ms: millis(options.key_ttl),
        };
        schema::migrate(&mut store.client().await?).await?;
        Ok(store)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool
            .get()
            .await
            .map_err(|e| StoreError::unavailable("no database connection").caused_by(e))
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn lookup(
        &self,
        caller: &Caller,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &cached(
                    &client,
                    "SELECT fingerprint, status, headers, body FROM idempotency_keys
                     WHERE caller = $1 AND key = $2 AND expires_at > $3",
                )
                .await?,
                &[&&caller.as_bytes()[..], &key.as_ref(), &now_ms()],
            )
            .await
            .map_err(classify)?;
        row.map(|row| operations::record(&row)).transpose()
    }

    async fn execute(
        &self,
        request: IdempotentRequest,
        operation: Arc<dyn Operation>,
        finish: Finish,
    ) -> Result<Execution, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(classify)?;
        operations::execute(
            tx,
            &request,
            operation.as_ref(),
            finish,
            now_ms(),
            self.ttl_ms,
        )
        .await
    }

    async fn list_charges(&self, query: ChargeQuery<'_>) -> Result<ChargePage, StoreError> {
        let client = self.client().await?;
        // Ids are compared as bytes: the column's collation is "C".
        let rows = client
            .query(
                &cached(
                    &client,
                    "SELECT id, amount, currency, description, created FROM charges
                     WHERE caller = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
                )
                .await?,
                &[
                    &&query.caller.as_bytes()[..],
                    &query.before(),
                    &query.rows(),
                ],
            )
            .await
            .map_err(classify)?;
        Ok(query.page(
            rows.iter()
                .map(|r| Charge::from_stored(r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
                .collect(),
        ))
    }

    async fn inventory(&self, item: &ItemId) -> Result<Option<i64>, StoreError> {
        available(&self.client().await?, item).await
    }

    async fn sweep(&self, limit: u32) -> Result<u64, StoreError> {
        operations::sweep(&self.client().await?, now_ms(), limit).await
    }

    async fn health(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(classify)?;
        let version = schema::version(&tx).await?;
        schema::MIGRATIONS.check(version)?;
        // A write probe: healthy means a write can commit.
        tx.execute(
            "UPDATE schema_migrations SET applied_at = applied_at WHERE version = $1",
            &[&version],
        )
        .await
        .map_err(classify)?;
        tx.commit().await.map_err(classify)
    }
}

/// The stock left of an item, `None` if there is no such item.
async fn available(client: &impl GenericClient, item: &ItemId) -> Result<Option<i64>, StoreError> {
    let row = client
        .query_opt(
            &cached(client, "SELECT available FROM inventory WHERE item_id = $1").await?,
            &[&item.as_ref()],
        )
        .await
        .map_err(classify)?;
    Ok(row.map(|r| r.get(0)))
}

/// A statement prepared once per connection and cached with it, so each
/// request costs one round trip per statement, not two.
async fn cached(
    client: &impl GenericClient,
    sql: &str,
) -> Result<tokio_postgres::Statement, StoreError> {
    client.prepare_cached(sql).await.map_err(classify)
}

/// Sorts PostgreSQL errors: what a retry may fix (503) and what it will not.
fn classify(e: tokio_postgres::Error) -> StoreError {
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
    let error = if retryable {
        StoreError::unavailable("PostgreSQL")
    } else {
        StoreError::internal("PostgreSQL")
    };
    error.caused_by(e)
}
