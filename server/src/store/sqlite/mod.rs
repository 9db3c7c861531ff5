//! The embedded backend: one SQLite file in WAL mode.
//!
//! - [`writer`]: one writer thread, group commit, a savepoint per job.
//! - [`readers`]: read connections beside it, for replays and listings.
//! - [`schema`]: connection settings, migrations, the file's identity
//!   (a missing or replaced file is never silently recreated: 503 until it
//!   is back).
//! - [`operations`] and [`queries`]: the SQL of the writes and of the reads.

mod operations;
mod queries;
mod readers;
mod schema;
mod writer;

use crate::config::Durability;
use crate::domain::{Caller, IdempotencyKey, ItemId};
use crate::idempotency::record::{Record, StoredResponse};
use crate::store::schema::Migrations;
use crate::store::{
    millis, now_ms, ChargePage, ChargeQuery, Execution, Finish, IdempotentRequest, Operation,
    RunContext, Store, StoreError,
};
use async_trait::async_trait;
use readers::ReadPool;
use rusqlite::{Connection, ErrorCode};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use writer::{Keep, Kind, Writer};

/// The schema, in order.
const MIGRATIONS: Migrations =
    Migrations(&[(1, include_str!("../../../migrations/0001_init.sql"))]);

/// An operation's business change in SQLite, inside the savepoint that
/// also records its key.
pub trait Run {
    /// Runs the change and returns the answer to record.
    fn run_sqlite(
        &self,
        conn: &Connection,
        at: &RunContext<'_>,
    ) -> rusqlite::Result<StoredResponse>;
}

/// Where and how to open the database.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// The database file; its folder is created if missing.
    pub path: PathBuf,
    /// `synchronous=FULL` or `NORMAL`.
    pub durability: Durability,
    /// How long a key's record lives.
    pub key_ttl: Duration,
}

/// The SQLite store: a handle to the writer thread and the read pool.
pub struct SqliteStore {
    writer: Writer,
    readers: ReadPool,
    ttl_ms: i64,
}

impl SqliteStore {
    /// Creates the file (and its folder) if missing, migrates it and starts
    /// the writer thread. Fails if the database cannot be opened.
    pub fn open(options: SqliteOptions) -> Result<Self, StoreError> {
        if let Some(dir) = options.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::unavailable(format!("cannot create {}", dir.display())).caused_by(e)
            })?;
        }
        let mut conn = Connection::open(&options.path).map_err(classify)?;
        schema::configure_writer(&conn, options.durability).map_err(classify)?;
        schema::migrate(&mut conn).map_err(classify)?;
        let generation = Arc::new(AtomicU64::new(0));
        let writer = Writer::start(
            conn,
            options.path.clone(),
            options.durability,
            generation.clone(),
        )?;
        Ok(Self {
            writer,
            readers: ReadPool::new(options.path, generation),
            ttl_ms: millis(options.key_ttl),
        })
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn lookup(
        &self,
        caller: &Caller,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        self.readers
            .with(|conn| queries::live_record(conn, caller, key, now_ms()))
    }

    async fn execute(
        &self,
        request: IdempotentRequest,
        operation: Arc<dyn Operation>,
        finish: Finish,
    ) -> Result<Execution, StoreError> {
        let ttl_ms = self.ttl_ms;
        self.writer
            .submit(Kind::Write, move |batch| {
                let execution =
                    operations::execute(batch.conn, &request, operation.as_ref(), now_ms(), ttl_ms)
                        .map_err(classify)?;
                Ok(match (execution, finish) {
                    (Execution::Ran(_), Finish::RollBack) => (Execution::RolledBack, Keep::No),
                    (execution, _) => (execution, Keep::Yes),
                })
            })
            .await
    }

    async fn list_charges(&self, query: ChargeQuery<'_>) -> Result<ChargePage, StoreError> {
        let rows = self.readers.with(|conn| queries::charges(conn, &query))?;
        Ok(query.page(rows))
    }

    async fn inventory(&self, item: &ItemId) -> Result<Option<i64>, StoreError> {
        self.readers.with(|conn| queries::available(conn, item))
    }

    async fn sweep(&self, limit: u32) -> Result<u64, StoreError> {
        self.writer
            .submit(Kind::Other, move |batch| {
                let deleted = operations::sweep(batch.conn, now_ms(), limit).map_err(classify)?;
                Ok((deleted, Keep::Yes))
            })
            .await
    }

    async fn health(&self) -> Result<(), StoreError> {
        self.writer
            .submit(Kind::Other, |batch| {
                if let Some(e) = batch.recent_failure {
                    // Healthy means requests can commit, not just that a probe can.
                    return Err(e.clone());
                }
                MIGRATIONS.check(schema::version(batch.conn)?)?;
                operations::probe_write(batch.conn).map_err(classify)?;
                Ok(((), Keep::Yes))
            })
            .await
    }
}

/// Sorts SQLite errors: what a retry may fix (503) and what it will not (500).
fn classify(e: rusqlite::Error) -> StoreError {
    let retryable = matches!(
        e.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::CannotOpen
                | ErrorCode::SystemIoFailure
                | ErrorCode::DiskFull
                | ErrorCode::ReadOnly
                | ErrorCode::NotADatabase
                | ErrorCode::FileLockingProtocolFailed
                | ErrorCode::OutOfMemory
                | ErrorCode::PermissionDenied
        )
    );
    let error = if retryable {
        StoreError::unavailable("SQLite")
    } else {
        StoreError::internal("SQLite")
    };
    error.caused_by(e)
}
