//! The embedded backend: one SQLite file in WAL mode.
//!
//! * **One writer thread, group commit.** Every write goes through a single
//!   thread that takes whatever requests are queued, opens one `BEGIN
//!   IMMEDIATE` transaction, runs each request in its own `SAVEPOINT` (a
//!   failing request rolls back only itself), commits once (one fsync under
//!   `synchronous=FULL`) and only then releases the answers. Each request's
//!   key record and business rows stay atomic together; no answer leaves
//!   before its commit. A single writer also means two requests with the
//!   same key never run at once: the second finds the first's record.
//! * **Readers beside it.** Replays, listings and stock reads use a small
//!   pool of read connections and never queue behind the writer (WAL lets
//!   readers run during a write).
//! * **The file is checked before each batch.** If the database file
//!   disappears or is replaced, the writer refuses to write (503) instead of
//!   creating an empty database that would forget every key; when the file
//!   comes back, writing resumes.

use super::{
    now_ms, ChargePage, ExecuteOptions, Execution, IdempotentRequest, Record, Store, StoreError,
};
use crate::config::Durability;
use crate::domain::{Caller, Charge, ChargeId, Fingerprint, IdempotencyKey, ItemId, Reservation};
use crate::operation::{Operation, Outcome, StoredResponse};
use async_trait::async_trait;
use rusqlite::{config::DbConfig, params, Connection, ErrorCode, OpenFlags, OptionalExtension};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// The schema, in order. A version is applied once and recorded in
/// `schema_migrations`.
const MIGRATIONS: &[(i64, &str)] = &[(1, include_str!("../../migrations/0001_init.sql"))];

/// Most requests one commit may carry.
const MAX_BATCH: usize = 512;
/// Requests that may wait for the writer before senders wait too.
const QUEUE_DEPTH: usize = 8192;
/// How long `/healthz` keeps answering 503 after a write failed for a
/// reason a retry may fix (disk full, file gone), unless a write succeeds.
const FAILURE_MEMORY: Duration = Duration::from_secs(5);
/// How long a connection waits for another process's lock before giving up
/// with a 503.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

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
    jobs: mpsc::Sender<Job>,
    readers: ReadPool,
}

impl SqliteStore {
    /// Creates the file (and its folder) if missing, migrates it and starts
    /// the writer thread. Fails if the database cannot be opened.
    pub fn open(options: SqliteOptions) -> Result<Self, StoreError> {
        if let Some(dir) = options.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let mut conn = Connection::open(&options.path).map_err(classify)?;
        configure_writer(&conn, options.durability).map_err(classify)?;
        migrate(&mut conn).map_err(classify)?;
        let identity = file_identity(&options.path)?;

        let generation = Arc::new(AtomicU64::new(0));
        let (jobs, queue) = mpsc::channel(QUEUE_DEPTH);
        let writer = Writer {
            path: options.path.clone(),
            durability: options.durability,
            ttl_ms: i64::try_from(options.key_ttl.as_millis()).unwrap_or(i64::MAX),
            conn: Some(conn),
            identity: Some(identity),
            generation: generation.clone(),
            last_failure: None,
        };
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || writer.run(queue))
            .map_err(|e| StoreError::Internal(format!("cannot start the writer thread: {e}")))?;
        Ok(Self {
            jobs,
            readers: ReadPool {
                path: options.path,
                idle: Mutex::new(Vec::new()),
                generation,
            },
        })
    }

    async fn submit(&self, work: Work) -> Result<Output, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job { work, reply })
            .await
            .map_err(|_| StoreError::Unavailable("the writer has stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Internal("the writer dropped a request".into()))?
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn lookup(
        &self,
        caller: &Caller,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        self.readers.with(|conn| {
            conn.prepare_cached(
                "SELECT fingerprint, status, headers, body FROM idempotency_keys
                 WHERE caller = ?1 AND key = ?2 AND expires_at > ?3",
            )?
            .query_row(
                params![&caller.as_bytes()[..], key.as_ref(), now_ms()],
                |row| {
                    Ok(Record {
                        fingerprint: Fingerprint::from_bytes(row.get(0)?),
                        response: stored_response(
                            row.get(1)?,
                            &row.get::<_, String>(2)?,
                            row.get(3)?,
                        ),
                    })
                },
            )
            .optional()
        })
    }

    async fn execute(
        &self,
        request: IdempotentRequest,
        operation: Operation,
        options: ExecuteOptions,
    ) -> Result<Execution, StoreError> {
        match self
            .submit(Work::Execute {
                request,
                operation,
                options,
            })
            .await?
        {
            Output::Execution(execution) => Ok(execution),
            other => Err(unexpected(other)),
        }
    }

    async fn list_charges(
        &self,
        caller: &Caller,
        limit: u32,
        starting_after: Option<&ChargeId>,
    ) -> Result<ChargePage, StoreError> {
        // Ids are `ch_` + hex, so "ch_~" sorts after every id.
        let before = starting_after.map_or("ch_~", |id| id.as_ref());
        let mut data = self.readers.with(|conn| {
            conn.prepare_cached(
                "SELECT id, amount, currency, description, created FROM charges
                 WHERE caller = ?1 AND id < ?2 ORDER BY id DESC LIMIT ?3",
            )?
            .query_map(
                params![&caller.as_bytes()[..], before, i64::from(limit) + 1],
                |row| {
                    Ok(Charge::from_stored(
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                    ))
                },
            )?
            .collect::<Result<Vec<_>, _>>()
        })?;
        let has_more = data.len() > limit as usize;
        data.truncate(limit as usize);
        Ok(ChargePage { data, has_more })
    }

    async fn inventory(&self, item: &ItemId) -> Result<Option<i64>, StoreError> {
        self.readers.with(|conn| {
            conn.prepare_cached("SELECT available FROM inventory WHERE item_id = ?1")?
                .query_row([item.as_ref()], |row| row.get(0))
                .optional()
        })
    }

    async fn sweep(&self, limit: u32) -> Result<u64, StoreError> {
        match self.submit(Work::Sweep { limit }).await? {
            Output::Swept(n) => Ok(n),
            other => Err(unexpected(other)),
        }
    }

    async fn health(&self) -> Result<(), StoreError> {
        match self.submit(Work::Ping).await? {
            Output::Pong => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

fn unexpected(output: Output) -> StoreError {
    StoreError::Internal(format!(
        "the writer answered {output:?} to another question"
    ))
}

/// A request to the writer thread.
struct Job {
    work: Work,
    reply: oneshot::Sender<Result<Output, StoreError>>,
}

#[derive(Debug)]
enum Work {
    Execute {
        request: IdempotentRequest,
        operation: Operation,
        options: ExecuteOptions,
    },
    Sweep {
        limit: u32,
    },
    Ping,
}

#[derive(Debug)]
enum Output {
    Execution(Execution),
    Swept(u64),
    Pong,
}

/// The one thread that writes.
struct Writer {
    path: PathBuf,
    durability: Durability,
    ttl_ms: i64,
    conn: Option<Connection>,
    identity: Option<FileIdentity>,
    generation: Arc<AtomicU64>,
    /// When a write last failed with [`StoreError::Unavailable`], and why.
    last_failure: Option<(Instant, StoreError)>,
}

impl Writer {
    fn run(mut self, mut queue: mpsc::Receiver<Job>) {
        while let Some(first) = queue.blocking_recv() {
            let mut batch = Vec::with_capacity(16);
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            self.run_batch(batch);
        }
        tracing::debug!("writer stopped: no senders left");
    }

    /// Runs a batch in one transaction and answers every job once it is
    /// committed (or with the error that rolled it back).
    fn run_batch(&mut self, batch: Vec<Job>) {
        let results = match self.ensure_open() {
            Ok(()) => self.commit_batch(&batch),
            Err(e) => batch.iter().map(|_| Err(e.clone())).collect(),
        };
        let writes = batch
            .iter()
            .any(|job| matches!(job.work, Work::Execute { .. }));
        match results.iter().find_map(|r| match r {
            Err(e @ StoreError::Unavailable(_)) => Some(e.clone()),
            _ => None,
        }) {
            Some(e) => {
                // Reopen before the next batch: the connection may be unusable.
                self.conn = None;
                self.last_failure = Some((Instant::now(), e));
            }
            None if writes => self.last_failure = None,
            None => {}
        }
        for (job, result) in batch.into_iter().zip(results) {
            // A sender that gave up (its client went away) is no error here:
            // its work is committed and the next retry replays it.
            let _ = job.reply.send(result);
        }
    }

    fn commit_batch(&mut self, batch: &[Job]) -> Vec<Result<Output, StoreError>> {
        let conn = self.conn.as_mut().expect("ensure_open leaves a connection");
        let mut tx = match conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        {
            Ok(tx) => tx,
            Err(e) => {
                let e = classify(e);
                return batch.iter().map(|_| Err(e.clone())).collect();
            }
        };
        let recent_failure = self
            .last_failure
            .as_ref()
            .filter(|(at, _)| at.elapsed() < FAILURE_MEMORY)
            .map(|(_, e)| e.clone());
        let mut results = Vec::with_capacity(batch.len());
        for job in batch {
            if let (Work::Ping, Some(e)) = (&job.work, &recent_failure) {
                // Healthy means requests can commit, not just that a probe can.
                results.push(Err(e.clone()));
                continue;
            }
            let result = tx.savepoint().map_err(classify).and_then(|mut savepoint| {
                let (output, keep) = run_work(&savepoint, &job.work, self.ttl_ms)?;
                if keep {
                    savepoint.commit().map_err(classify)?;
                } else {
                    savepoint.rollback().map_err(classify)?;
                }
                Ok(output)
            });
            results.push(result);
        }
        match tx.commit() {
            Ok(()) => results,
            Err(e) => {
                let e = classify(e);
                tracing::error!(error = %e, jobs = batch.len(), "commit failed; the batch is rolled back");
                batch.iter().map(|_| Err(e.clone())).collect()
            }
        }
    }

    /// Makes sure the connection writes to the file at `path`: the same file
    /// it opened, or, if that file was replaced, the new one. A missing file
    /// is never recreated here (that would forget every key).
    fn ensure_open(&mut self) -> Result<(), StoreError> {
        let identity = file_identity(&self.path)?;
        if self.conn.is_some() && self.identity == Some(identity) {
            return Ok(());
        }
        self.conn = None;
        let conn = Connection::open_with_flags(&self.path, OpenFlags::SQLITE_OPEN_READ_WRITE)
            .map_err(classify)?;
        configure_writer(&conn, self.durability).map_err(classify)?;
        check_migrated(&conn)?;
        tracing::warn!(path = %self.path.display(), "database (re)opened");
        self.conn = Some(conn);
        self.identity = Some(identity);
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

/// Runs one job inside its savepoint; `keep` says whether to release it.
fn run_work(conn: &Connection, work: &Work, ttl_ms: i64) -> Result<(Output, bool), StoreError> {
    match work {
        Work::Execute {
            request,
            operation,
            options,
        } => {
            let execution = if options.record {
                execute(conn, request, operation, ttl_ms)
            } else {
                run_operation(conn, &request.caller, operation, now_ms())
                    .map(|o| Execution::Ran(o.render()))
            }
            .map_err(classify)?;
            if options.roll_back && matches!(execution, Execution::Ran(_)) {
                return Ok((Output::Execution(Execution::RolledBack), false));
            }
            Ok((Output::Execution(execution), true))
        }
        Work::Sweep { limit } => {
            let deleted = conn
                .prepare_cached(
                    "DELETE FROM idempotency_keys WHERE id IN (
                       SELECT id FROM idempotency_keys WHERE expires_at <= ?1
                       ORDER BY expires_at LIMIT ?2)",
                )
                .and_then(|mut s| s.execute(params![now_ms(), limit]))
                .map_err(classify)?;
            Ok((Output::Swept(deleted as u64), true))
        }
        Work::Ping => {
            check_migrated(conn)?;
            // A write probe: "healthy" means a write can commit (not just
            // that the file opens), so a full disk reports 503.
            conn.prepare_cached(
                "UPDATE schema_migrations SET applied_at = applied_at
                 WHERE version = (SELECT max(version) FROM schema_migrations)",
            )
            .and_then(|mut s| s.execute([]))
            .map_err(classify)?;
            Ok((Output::Pong, true))
        }
    }
}

/// The heart of it, inside one savepoint of the batch's transaction:
/// find the key's record; replay or refuse if it exists; otherwise run the
/// operation and write the record with its response.
fn execute(
    conn: &Connection,
    request: &IdempotentRequest,
    operation: &Operation,
    ttl_ms: i64,
) -> rusqlite::Result<Execution> {
    let now = now_ms();
    let caller = &request.caller.as_bytes()[..];
    let existing = conn
        .prepare_cached(
            "SELECT id, fingerprint, status, headers, body, expires_at FROM idempotency_keys
             WHERE caller = ?1 AND key = ?2",
        )?
        .query_row(params![caller, request.key.as_ref()], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                Fingerprint::from_bytes(row.get(1)?),
                stored_response(row.get(2)?, &row.get::<_, String>(3)?, row.get(4)?),
                row.get::<_, i64>(5)?,
            ))
        })
        .optional()?;
    if let Some((id, fingerprint, response, expires_at)) = existing {
        if expires_at > now {
            return Ok(if fingerprint == request.fingerprint {
                Execution::Replayed(response)
            } else {
                Execution::Mismatch
            });
        }
        // Expired: it counts as absent, and makes room for the new record.
        conn.prepare_cached("DELETE FROM idempotency_keys WHERE id = ?1")?
            .execute([id])?;
    }

    let outcome = run_operation(conn, &request.caller, operation, now)?;
    let response = outcome.render();
    conn.prepare_cached(
        "INSERT INTO idempotency_keys
           (caller, key, fingerprint, status, headers, body, created_at, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        caller,
        request.key.as_ref(),
        &request.fingerprint.as_bytes()[..],
        response.status,
        response.headers_to_text(),
        &response.body[..],
        now,
        now.saturating_add(ttl_ms),
    ])?;
    Ok(Execution::Ran(response))
}

/// The business change of an operation.
fn run_operation(
    conn: &Connection,
    caller: &Caller,
    operation: &Operation,
    now_ms: i64,
) -> rusqlite::Result<Outcome> {
    let caller = &caller.as_bytes()[..];
    match operation {
        Operation::CreateCharge(new) => {
            let charge = Charge::new(new.clone(), now_ms / 1000);
            conn.prepare_cached(
                "INSERT INTO charges (id, caller, amount, currency, description, created)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                charge.id.as_ref(),
                caller,
                charge.amount.get(),
                charge.currency.as_ref(),
                charge.description.as_ref().map(AsRef::as_ref),
                charge.created,
            ])?;
            Ok(Outcome::ChargeCreated(charge))
        }
        Operation::Reserve(new) => {
            // The guard is in the UPDATE itself: stock never goes below zero,
            // whatever runs beside it.
            let taken = conn
                .prepare_cached(
                    "UPDATE inventory SET available = available - ?1
                     WHERE item_id = ?2 AND available >= ?1",
                )?
                .execute(params![new.quantity.get(), new.item_id.as_ref()])?;
            if taken == 0 {
                let available: Option<i64> = conn
                    .prepare_cached("SELECT available FROM inventory WHERE item_id = ?1")?
                    .query_row([new.item_id.as_ref()], |row| row.get(0))
                    .optional()?;
                return Ok(Outcome::refused_reservation(new, available));
            }
            let reservation = Reservation::new(new.clone());
            conn.prepare_cached(
                "INSERT INTO reservations (id, caller, item_id, quantity, created)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                reservation.id,
                caller,
                reservation.item_id.as_ref(),
                reservation.quantity.get(),
                now_ms / 1000,
            ])?;
            Ok(Outcome::Reserved(reservation))
        }
    }
}

fn stored_response(status: u16, headers: &str, body: Vec<u8>) -> StoredResponse {
    StoredResponse {
        status,
        headers: StoredResponse::headers_from_text(headers),
        body: body.into(),
    }
}

/// Read connections, reused; opened on demand, dropped when the writer
/// reopens the file.
struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<(u64, Connection)>>,
    generation: Arc<AtomicU64>,
}

impl ReadPool {
    /// Runs a short read on a pooled connection. Reads are point lookups
    /// and small pages, so they run inline rather than hopping threads.
    fn with<R>(
        &self,
        read: impl FnOnce(&Connection) -> rusqlite::Result<R>,
    ) -> Result<R, StoreError> {
        let generation = self.generation.load(Ordering::Acquire);
        let pooled = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.retain(|(g, _)| *g == generation);
            idle.pop()
        };
        let conn = match pooled {
            Some((_, conn)) => conn,
            None => open_reader(&self.path).map_err(classify)?,
        };
        let result = read(&conn).map_err(classify);
        if !matches!(result, Err(StoreError::Unavailable(_))) {
            self.idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((generation, conn));
        }
        result
    }
}

fn configure_writer(conn: &Connection, durability: Durability) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    let synchronous = match durability {
        Durability::Full => "FULL",
        Durability::Relaxed => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(())
}

fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "query_only", "ON")?;
    // Keep cached plans: without it SQLite re-prepares statements with a
    // bound LIMIT on every run.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    conn.set_prepared_statement_cache_capacity(16);
    Ok(conn)
}

fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
           version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
    )?;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let current: i64 = tx.query_row(
        "SELECT coalesce(max(version), 0) FROM schema_migrations",
        [],
        |r| r.get(0),
    )?;
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)",
            params![version, now_ms()],
        )?;
        tracing::info!(version, "migration applied");
    }
    tx.commit()
}

fn check_migrated(conn: &Connection) -> Result<(), StoreError> {
    let latest = MIGRATIONS.last().map_or(0, |(v, _)| *v);
    let version: i64 = conn
        .query_row(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            [],
            |r| r.get(0),
        )
        .map_err(classify)?;
    if version == latest {
        Ok(())
    } else {
        Err(StoreError::Unavailable(format!(
            "the database is at schema version {version}, this server needs {latest}"
        )))
    }
}

/// Which file a path names right now (device and inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    dev: u64,
    ino: u64,
}

fn file_identity(path: &Path) -> Result<FileIdentity, StoreError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| StoreError::Unavailable(format!("{}: {e}", path.display())))?;
    Ok(FileIdentity {
        dev: meta.dev(),
        ino: meta.ino(),
    })
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
    if retryable {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Internal(e.to_string())
    }
}
