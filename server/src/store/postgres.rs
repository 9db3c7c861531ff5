//! The PostgreSQL backend: how the server runs as many instances.
//!
//! Each request is one transaction on a pooled connection:
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

use super::{
    now_ms, ChargePage, ExecuteOptions, Execution, IdempotentRequest, Record, Store, StoreError,
};
use crate::config::Durability;
use crate::domain::{Caller, Charge, ChargeId, Fingerprint, IdempotencyKey, ItemId, Reservation};
use crate::operation::{Operation, Outcome, StoredResponse};
use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

/// The schema, in order, applied under an advisory lock so that instances
/// starting together migrate once.
const MIGRATIONS: &[(i64, &str)] = &[(1, include_str!("../../migrations/postgres/0001_init.sql"))];
/// Any number, the same for every instance: the migration lock.
const MIGRATION_LOCK: i64 = 0x1de3_9071;
/// Connections per instance.
const POOL_SIZE: usize = 32;
/// How long a request waits for another transaction holding its key (or
/// a stock row) before answering 409 / 503.
const LOCK_TIMEOUT: &str = "5s";

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
            .map_err(|e| StoreError::Unavailable(format!("bad PostgreSQL URL: {e}")))?;
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
            .map_err(|e| StoreError::Internal(format!("cannot build the pool: {e}")))?;
        let store = Self {
            pool,
            ttl_ms: i64::try_from(options.key_ttl.as_millis()).unwrap_or(i64::MAX),
        };
        store.migrate().await?;
        Ok(store)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool
            .get()
            .await
            .map_err(|e| StoreError::Unavailable(format!("no database connection: {e}")))
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(classify)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(classify)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
               version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
        )
        .await
        .map_err(classify)?;
        let current = schema_version(&tx).await?;
        for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
            tx.batch_execute(sql).await.map_err(classify)?;
            tx.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
                &[version, &now_ms()],
            )
            .await
            .map_err(classify)?;
            tracing::info!(version, "migration applied");
        }
        tx.commit().await.map_err(classify)
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
        let statement = client
            .prepare_cached(
                "SELECT fingerprint, status, headers, body FROM idempotency_keys
                 WHERE caller = $1 AND key = $2 AND expires_at > $3",
            )
            .await
            .map_err(classify)?;
        let row = client
            .query_opt(
                &statement,
                &[&&caller.as_bytes()[..], &key.as_ref(), &now_ms()],
            )
            .await
            .map_err(classify)?;
        row.map(|row| record_from(&row)).transpose()
    }

    async fn execute(
        &self,
        request: IdempotentRequest,
        operation: Operation,
        options: ExecuteOptions,
    ) -> Result<Execution, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(classify)?;
        let now = now_ms();
        let caller = &request.caller.as_bytes()[..];
        let key = request.key.as_ref();

        if !options.record {
            let outcome = run_operation(&tx, &request.caller, &operation, now).await?;
            tx.commit().await.map_err(classify)?;
            return Ok(Execution::Ran(outcome.render()));
        }

        tx.execute(
            &cached(
                &tx,
                "DELETE FROM idempotency_keys WHERE caller = $1 AND key = $2 AND expires_at <= $3",
            )
            .await?,
            &[&caller, &key, &now],
        )
        .await
        .map_err(classify)?;
        let claim = tx
            .query_opt(
                &cached(
                    &tx,
                    "INSERT INTO idempotency_keys
                   (caller, key, fingerprint, status, headers, body, created_at, expires_at)
                 VALUES ($1, $2, $3, 0, '', ''::bytea, $4, $5)
                 ON CONFLICT (caller, key) DO NOTHING RETURNING id",
                )
                .await?,
                &[
                    &caller,
                    &key,
                    &&request.fingerprint.as_bytes()[..],
                    &now,
                    &now.saturating_add(self.ttl_ms),
                ],
            )
            .await;
        let claim = match claim {
            Ok(claim) => claim,
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                return Ok(Execution::InUse)
            }
            Err(e) => return Err(classify(e)),
        };
        let Some(claim) = claim else {
            // The key is recorded, and committed: the claim waited for it.
            let row = tx
                .query_one(
                    &cached(
                        &tx,
                        "SELECT fingerprint, status, headers, body FROM idempotency_keys
                     WHERE caller = $1 AND key = $2",
                    )
                    .await?,
                    &[&caller, &key],
                )
                .await
                .map_err(classify)?;
            let record = record_from(&row)?;
            return Ok(if record.fingerprint == request.fingerprint {
                Execution::Replayed(record.response)
            } else {
                Execution::Mismatch
            });
        };
        let id: i64 = claim.get(0);

        let response = run_operation(&tx, &request.caller, &operation, now)
            .await?
            .render();
        tx.execute(
            &cached(
                &tx,
                "UPDATE idempotency_keys SET status = $2, headers = $3, body = $4 WHERE id = $1",
            )
            .await?,
            &[
                &id,
                &(response.status as i16),
                &response.headers_to_text(),
                &&response.body[..],
            ],
        )
        .await
        .map_err(classify)?;
        if options.roll_back {
            tx.rollback().await.map_err(classify)?;
            return Ok(Execution::RolledBack);
        }
        tx.commit().await.map_err(classify)?;
        Ok(Execution::Ran(response))
    }

    async fn list_charges(
        &self,
        caller: &Caller,
        limit: u32,
        starting_after: Option<&ChargeId>,
    ) -> Result<ChargePage, StoreError> {
        let client = self.client().await?;
        // Ids are `ch_` + hex in byte order ("C" collation): "ch_~" sorts last.
        let before = starting_after.map_or("ch_~", |id| id.as_ref());
        let rows = client
            .query(
                &cached(
                    &client,
                    "SELECT id, amount, currency, description, created FROM charges
                 WHERE caller = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
                )
                .await?,
                &[&&caller.as_bytes()[..], &before, &(i64::from(limit) + 1)],
            )
            .await
            .map_err(classify)?;
        let mut data: Vec<Charge> = rows
            .iter()
            .map(|r| Charge::from_stored(r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
            .collect();
        let has_more = data.len() > limit as usize;
        data.truncate(limit as usize);
        Ok(ChargePage { data, has_more })
    }

    async fn inventory(&self, item: &ItemId) -> Result<Option<i64>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &cached(
                    &client,
                    "SELECT available FROM inventory WHERE item_id = $1",
                )
                .await?,
                &[&item.as_ref()],
            )
            .await
            .map_err(classify)?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn sweep(&self, limit: u32) -> Result<u64, StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "DELETE FROM idempotency_keys WHERE id IN (
                   SELECT id FROM idempotency_keys WHERE expires_at <= $1
                   ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
                &[&now_ms(), &i64::from(limit)],
            )
            .await
            .map_err(classify)
    }

    async fn health(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(classify)?;
        let latest = MIGRATIONS.last().map_or(0, |(v, _)| *v);
        let version = schema_version(&tx).await?;
        if version != latest {
            return Err(StoreError::Unavailable(format!(
                "the database is at schema version {version}, this server needs {latest}"
            )));
        }
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

/// The business change of an operation, inside the request's transaction.
async fn run_operation(
    tx: &impl GenericClient,
    caller: &Caller,
    operation: &Operation,
    now_ms: i64,
) -> Result<Outcome, StoreError> {
    let caller = &caller.as_bytes()[..];
    match operation {
        Operation::CreateCharge(new) => {
            let charge = Charge::new(new.clone(), now_ms / 1000);
            tx.execute(
                &cached(
                    tx,
                    "INSERT INTO charges (id, caller, amount, currency, description, created)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .await?,
                &[
                    &charge.id.as_ref(),
                    &caller,
                    &charge.amount.get(),
                    &charge.currency.as_ref(),
                    &charge.description.as_ref().map(AsRef::as_ref),
                    &charge.created,
                ],
            )
            .await
            .map_err(classify)?;
            Ok(Outcome::ChargeCreated(charge))
        }
        Operation::Reserve(new) => {
            // The guard is in the UPDATE: the row lock serialises buyers and
            // the condition is re-checked after the wait.
            let taken = tx
                .execute(
                    &cached(
                        tx,
                        "UPDATE inventory SET available = available - $1
                     WHERE item_id = $2 AND available >= $1",
                    )
                    .await?,
                    &[&new.quantity.get(), &new.item_id.as_ref()],
                )
                .await
                .map_err(classify)?;
            if taken == 0 {
                let available: Option<i64> = tx
                    .query_opt(
                        &cached(tx, "SELECT available FROM inventory WHERE item_id = $1").await?,
                        &[&new.item_id.as_ref()],
                    )
                    .await
                    .map_err(classify)?
                    .map(|r| r.get(0));
                return Ok(Outcome::refused_reservation(new, available));
            }
            let reservation = Reservation::new(new.clone());
            tx.execute(
                &cached(
                    tx,
                    "INSERT INTO reservations (id, caller, item_id, quantity, created)
                 VALUES ($1, $2, $3, $4, $5)",
                )
                .await?,
                &[
                    &reservation.id,
                    &caller,
                    &reservation.item_id.as_ref(),
                    &reservation.quantity.get(),
                    &(now_ms / 1000),
                ],
            )
            .await
            .map_err(classify)?;
            Ok(Outcome::Reserved(reservation))
        }
    }
}

/// A statement prepared once per connection and cached with it, so each
/// request costs one round trip per statement, not two.
async fn cached(
    client: &impl GenericClient,
    sql: &str,
) -> Result<tokio_postgres::Statement, StoreError> {
    client.prepare_cached(sql).await.map_err(classify)
}

/// The latest migration applied (0 for none).
async fn schema_version(client: &impl GenericClient) -> Result<i64, StoreError> {
    Ok(client
        .query_one(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            &[],
        )
        .await
        .map_err(classify)?
        .get(0))
}

fn record_from(row: &tokio_postgres::Row) -> Result<Record, StoreError> {
    let fingerprint: &[u8] = row.get(0);
    let fingerprint: [u8; 32] = fingerprint
        .try_into()
        .map_err(|_| StoreError::Internal("a stored fingerprint is not 32 bytes".into()))?;
    let status: i16 = row.get(1);
    let headers: &str = row.get(2);
    let body: &[u8] = row.get(3);
    Ok(Record {
        fingerprint: Fingerprint::from_bytes(fingerprint),
        response: StoredResponse {
            status: status as u16,
            headers: StoredResponse::headers_from_text(headers),
            body: bytes::Bytes::copy_from_slice(body),
        },
    })
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
    if retryable {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Internal(e.to_string())
    }
}
