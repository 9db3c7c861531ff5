//! The one thread that writes, and its group commit.
//!
//! It takes every job already queued, opens one `BEGIN IMMEDIATE`
//! transaction, runs each job in its own `SAVEPOINT` (a failing job rolls
//! back only itself), commits once (one fsync under `synchronous=FULL`) and
//! only then answers every job. A single writer also means two requests
//! with the same key never run at once: the second finds the first's record.
//!
//! It does not checkpoint inside its commits: after each batch it lets the
//! [`Checkpointer`] decide, which copies the WAL into the database file
//! beside it.
//!
//! Each job carries its own typed reply ([`Writer::submit`] is generic over
//! the job's result), so the thread never answers a question with the
//! wrong kind of value.

use super::backend::{classify, MIGRATIONS};
use super::checkpointer::{Checkpointer, Thresholds};
use super::schema::{self, FileIdentity};
use crate::store::schema::Migrations;
use crate::store::Durability;
use crate::store::Result;
use crate::store::StoreError;
use rusqlite::Connection;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Most jobs one commit may carry.
const MAX_BATCH: usize = 512;
/// Jobs that may wait for the writer before senders wait too.
const QUEUE_DEPTH: usize = 8192;
/// How long `/healthz` keeps answering 503 after a write failed for a
/// reason a retry may fix (disk full, file gone), unless a write succeeds.
const FAILURE_MEMORY: Duration = Duration::from_secs(5);

/// Whether a job's savepoint is kept or undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keep {
    /// Release the savepoint: the job's writes commit with the batch.
    Yes,
    /// Roll the savepoint back: the job ran, nothing of it is stored.
    No,
}

/// What a job may know about the batch it runs in.
pub(super) struct Batch<'a> {
    /// The transaction's connection (inside the job's savepoint).
    pub(super) conn: &'a Connection,
    /// A retryable write failure seen in the last few seconds, if any: a
    /// health probe reports it, since "healthy" means requests can commit.
    pub(super) recent_failure: Option<&'a StoreError>,
}

/// The kind of a job, as far as the failure memory cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A request's write: a successful one clears the failure memory.
    Write,
    /// Maintenance or a probe.
    Other,
}

/// A job with its reply, type-erased for the queue.
trait Job: Send {
    fn kind(&self) -> Kind;
    /// Runs inside the job's savepoint; keeps its result for the reply.
    fn run(&mut self, batch: &Batch<'_>) -> Result<Keep>;
    /// The job's savepoint could not be kept: it answers `error`.
    fn fail(&mut self, error: StoreError);
    /// Answers with the kept result (the batch committed) or `error`.
    fn answer(self: Box<Self>, error: Option<StoreError>);
}

struct Typed<T, F> {
    kind: Kind,
    work: Option<F>,
    result: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Job for Typed<T, F>
where
    T: Send,
    F: FnOnce(&Batch<'_>) -> Result<(T, Keep)> + Send,
{
    fn kind(&self) -> Kind {
        self.kind
    }

    fn run(&mut self, batch: &Batch<'_>) -> Result<Keep> {
        let work = self.work.take().expect("a job runs once");
        let (output, keep) = work(batch)?;
        self.result = Some(Ok(output));
        Ok(keep)
    }

    fn fail(&mut self, error: StoreError) {
        self.result = Some(Err(error));
    }

    fn answer(self: Box<Self>, error: Option<StoreError>) {
        let result = match (error, self.result) {
            (Some(e), _) => Err(e),
            (None, Some(result)) => result,
            (None, None) => Err(StoreError::internal(
                "the writer answered a job it never ran",
            )),
        };
        // A sender that gave up (its client went away) is no error here:
        // its work is committed and the next retry replays it.
        let _ = self.reply.send(result);
    }
}

/// The handle requests use: a queue to the writer thread.
pub(super) struct Writer {
    jobs: mpsc::Sender<Box<dyn Job>>,
}

impl Writer {
    /// Starts the writer thread on an open, migrated connection.
    /// `generation` is bumped whenever the writer reopens the file, so read
    /// connections to a replaced file are dropped.
    pub(super) fn start(
        mut conn: Connection,
        path: PathBuf,
        durability: Durability,
        app: Migrations,
        generation: Arc<AtomicU64>,
        checkpoints: Thresholds,
    ) -> Result<Self> {
        let identity = schema::file_identity(&path)?;
        let (jobs, queue) = mpsc::channel(QUEUE_DEPTH);
        let checkpointer = Checkpointer::start(path.clone(), checkpoints)
            .map_err(|e| StoreError::internal("cannot start the checkpoint thread").caused_by(e))?;
        checkpointer.watch(&mut conn).map_err(classify)?;
        let thread = WriterThread {
            path,
            durability,
            app,
            conn: Some(conn),
            identity: Some(identity),
            generation,
            last_failure: None,
            checkpointer,
        };
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || thread.run(queue))
            .map_err(|e| StoreError::internal("cannot start the writer thread").caused_by(e))?;
        Ok(Self { jobs })
    }

    /// Runs `work` in the next batch, inside its own savepoint, and answers
    /// once that batch has committed (or with the error that undid it).
    pub(super) async fn submit<T, F>(&self, kind: Kind, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Batch<'_>) -> Result<(T, Keep)> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Box::new(Typed {
            kind,
            work: Some(work),
            result: None,
            reply,
        });
        self.jobs
            .send(job)
            .await
            .map_err(|_| StoreError::unavailable("the writer has stopped"))?;
        answer
            .await
            .map_err(|_| StoreError::internal("the writer dropped a job"))?
    }
}

/// Runs `job` inside a savepoint of its own (statements prepared once per
/// connection, not parsed per job): released when the job keeps its work,
/// rolled back when it does not or fails, so a failing job undoes only
/// itself.
fn in_savepoint(conn: &Connection, job: impl FnOnce(&Connection) -> Result<Keep>) -> Result<()> {
    let statement = |sql: &str| {
        conn.prepare_cached(sql)
            .and_then(|mut s| s.execute([]))
            .map_err(classify)
    };
    statement("SAVEPOINT job")?;
    match job(conn) {
        Ok(Keep::Yes) => statement("RELEASE job").map(drop),
        outcome => {
            // After an error that rolled the whole transaction back there is
            // no savepoint left to undo: the caller sees that by itself.
            let undone = statement("ROLLBACK TO job").and_then(|_| statement("RELEASE job"));
            match outcome {
                Err(e) => Err(e),
                Ok(_) => undone.map(drop),
            }
        }
    }
}

impl WriterThread {
    /// Copies the WAL of the file `old` has open into that file and
    /// truncates it, so that nothing of it is read as another file's.
    fn empty_old_wal(&self, old: &Connection) -> rusqlite::Result<()> {
        let _running = self.checkpointer.hold();
        let (busy, _, _): (i64, i64, i64) =
            old.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })?;
        match busy {
            0 => Ok(()),
            _ => Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                Some("a reader still holds the old file's WAL".into()),
            )),
        }
    }
}

/// Sorts an error returned by COMMIT. An I/O error (a failed `fsync` of
/// the WAL, above all) comes after the batch's frames, its commit frame
/// included, were written to the WAL: this process no longer sees them
/// (SQLite appends them to the WAL index only once synced, and its next
/// commit writes over them), but if it dies first, the next start replays
/// them from the file, and the batch did happen. So its outcome is not
/// known, and every request of it is told so (retry with the same key),
/// never "nothing was done". Whatever happens next is then told true by
/// the retry: overwritten, it runs afresh; replayed, it is found. Any other
/// error (the disk full, a lock) comes before the commit frame is written:
/// nothing was done.
fn commit_failure(e: rusqlite::Error) -> StoreError {
    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::SystemIoFailure) {
        StoreError::outcome_unknown("an I/O error at COMMIT (a failed fsync?)").caused_by(e)
    } else {
        classify(e)
    }
}

/// How a batch ended.
enum End {
    /// Committed; some jobs may have failed on their own (each rolled back
    /// only its savepoint).
    Committed { failures: Vec<StoreError> },
    /// Nothing of the batch is kept: the transaction could not begin or
    /// commit (`culprit: None`), or job `culprit`'s failure rolled it back.
    RolledBack {
        cause: StoreError,
        culprit: Option<usize>,
    },
}

/// The writer thread's own state.
struct WriterThread {
    path: PathBuf,
    durability: Durability,
    /// The application's schema, checked with the engine's on a reopen.
    app: Migrations,
    conn: Option<Connection>,
    identity: Option<FileIdentity>,
    generation: Arc<AtomicU64>,
    /// When a write last failed with a retryable error, and why.
    last_failure: Option<(Instant, StoreError)>,
    checkpointer: Checkpointer,
}

impl WriterThread {
    fn run(mut self, mut queue: mpsc::Receiver<Box<dyn Job>>) {
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
            if let Some(conn) = &self.conn {
                let generation = self.generation.load(Ordering::Acquire);
                self.checkpointer.after_batch(conn, generation);
            }
        }
        tracing::debug!("writer stopped: no senders left");
    }

    /// Runs a batch in one transaction and answers every job once it is
    /// committed (or with the error that rolled it back).
    fn run_batch(&mut self, mut batch: Vec<Box<dyn Job>>) {
        let end = match self.ensure_open() {
            Ok(()) => self.commit_batch(&mut batch),
            Err(cause) => End::RolledBack {
                cause,
                culprit: None,
            },
        };
        let writes = batch.iter().any(|job| job.kind() == Kind::Write);
        match &end {
            End::Committed { failures } => match failures.iter().find(|e| e.is_unavailable()) {
                Some(e) => self.remember_failure(e.clone()),
                None if writes => self.last_failure = None,
                None => {}
            },
            End::RolledBack { cause, .. } if cause.is_unavailable() => {
                self.remember_failure(cause.clone())
            }
            End::RolledBack { .. } => {}
        }
        for (i, job) in batch.into_iter().enumerate() {
            let error = match &end {
                End::Committed { .. } => None,
                // The job whose failure undid the transaction answers with
                // its own error.
                End::RolledBack {
                    culprit: Some(culprit),
                    ..
                } if *culprit == i => None,
                // Everyone else was undone by another's failure: nothing
                // of theirs is kept, and a retry runs it afresh.
                End::RolledBack {
                    cause,
                    culprit: Some(_),
                } => Some(
                    StoreError::unavailable(
                        "another request in the same transaction failed and took it down; \
                         nothing of this one was kept",
                    )
                    .caused_by(cause.clone()),
                ),
                End::RolledBack {
                    cause,
                    culprit: None,
                } => Some(cause.clone()),
            };
            job.answer(error);
        }
    }

    fn remember_failure(&mut self, error: StoreError) {
        // Reopen before the next batch: the connection may be unusable.
        self.conn = None;
        self.last_failure = Some((Instant::now(), error));
    }

    /// Runs every job in its savepoint and commits.
    ///
    /// A job that fails rolls back only its savepoint, unless its error
    /// made SQLite roll back the whole transaction (a full disk or an I/O
    /// error while spilling, out of memory, a trigger's `RAISE(ROLLBACK)`):
    /// then the batch stops there. Going on would run the next jobs outside
    /// any transaction, each `SAVEPOINT … RELEASE` committing on its own.
    fn commit_batch(&mut self, batch: &mut [Box<dyn Job>]) -> End {
        let recent_failure = self
            .last_failure
            .as_ref()
            .filter(|(at, _)| at.elapsed() < FAILURE_MEMORY)
            .map(|(_, e)| e.clone());
        let conn = self.conn.as_mut().expect("ensure_open leaves a connection");
        let tx = match conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate) {
            Ok(tx) => tx,
            Err(e) => {
                return End::RolledBack {
                    cause: classify(e),
                    culprit: None,
                }
            }
        };
        let mut failures = Vec::new();
        for (i, job) in batch.iter_mut().enumerate() {
            let result = in_savepoint(&tx, |conn| {
                job.run(&Batch {
                    conn,
                    recent_failure: recent_failure.as_ref(),
                })
            });
            if let Err(e) = &result {
                job.fail(e.clone());
            }
            if tx.is_autocommit() {
                let cause = result.err().unwrap_or_else(|| {
                    StoreError::internal("the transaction ended inside a request")
                });
                tracing::error!(error = %cause, jobs = batch.len(), "the transaction was rolled back mid-batch; nothing of the batch is kept");
                return End::RolledBack {
                    cause,
                    culprit: Some(i),
                };
            }
            if let Err(e) = result {
                failures.push(e);
            }
        }
        match tx.commit() {
            Ok(()) => End::Committed { failures },
            Err(e) => {
                let cause = commit_failure(e);
                tracing::error!(error = %cause, jobs = batch.len(), "commit failed; its outcome is not known: retries with the same keys will tell");
                End::RolledBack {
                    cause,
                    culprit: None,
                }
            }
        }
    }

    /// Makes sure the connection writes to the file at `path`: the same file
    /// it opened, or, if that file was replaced, the new one. A missing file
    /// is never recreated here (that would forget every key).
    ///
    /// A file replaced while this process has the old one open (a backup
    /// renamed over it) has the old file's `-wal` beside it: SQLite names
    /// the WAL after the path, not the file, and a connection opened on the
    /// new file would read the old file's frames as its own (an earlier
    /// release did, and served a restore mixed with what it was to undo).
    /// So before the new file is opened, the old file's WAL is copied into
    /// the old file and emptied (`wal_checkpoint(TRUNCATE)` on the old
    /// connection); until that succeeds (a reader may hold the old WAL),
    /// every write is answered 503.
    fn ensure_open(&mut self) -> Result<()> {
        let identity = schema::file_identity(&self.path)?;
        if self.conn.is_some() && self.identity == Some(identity) {
            return Ok(());
        }
        if let Some(old) = self.conn.take() {
            // Readers and the checkpoint thread let go of the old file.
            self.generation.fetch_add(1, Ordering::Release);
            if let Err(e) = self.empty_old_wal(&old) {
                self.conn = Some(old);
                return Err(StoreError::unavailable(format!(
                    "the database file {} was replaced while the server ran, and the old \
                     file's WAL beside it cannot be emptied yet; writes wait",
                    self.path.display()
                ))
                .caused_by(e));
            }
            tracing::warn!(path = %self.path.display(), "the database file was replaced while the server ran: the old file's WAL was checkpointed into the old file and emptied before the new file is opened");
        }
        let mut conn = schema::open_existing(&self.path).map_err(classify)?;
        schema::configure_writer(&conn, self.durability).map_err(classify)?;
        schema::check(&conn, self.app, MIGRATIONS)?;
        self.checkpointer.watch(&mut conn).map_err(classify)?;
        tracing::warn!(path = %self.path.display(), "database (re)opened");
        self.conn = Some(conn);
        self.identity = Some(identity);
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }
}
