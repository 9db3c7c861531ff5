//! Copying the WAL into the database file, beside the writer.
//!
//! SQLite checkpoints on the connection that commits: the commit that
//! crosses the threshold copies every page of the WAL into the database
//! file and syncs it before its batch is answered, and no other batch runs
//! meanwhile. With random keys (UUIDs, as clients send them) nearly every
//! new key dirties a page of its own, so that copy grows with every key.
//! Here a thread of its own does it on its own connection while the writer
//! goes on committing: a `PASSIVE` checkpoint never blocks a write.
//!
//! The writer still checkpoints by itself once the WAL has grown past
//! [`Thresholds::writer_at`]: SQLite only restarts a WAL from its
//! beginning once every frame is in the database file, which a checkpoint
//! running beside a busy writer never quite catches up with. Every batch
//! it answers in between is held up by that pass, so the writer makes it
//! short: past `writer_at` it asks this thread for passes back to back
//! and keeps committing until one has left at most
//! [`Thresholds::writer_copies`] frames behind, then copies those itself
//! (if no pass of this thread is running: it never waits for one). Only a
//! WAL twice `writer_at` long makes it copy whatever is left, waiting.
//! docs/BENCHMARKS.md has what this measured: a writer that copied up to
//! `every` frames held every connection's answer for 60-90 ms, about one
//! request in a thousand.

use super::schema;
use rusqlite::wal::CheckpointMode;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// When the WAL is copied, in frames (one changed page each, 4 KiB).
#[derive(Debug, Clone, Copy)]
pub(super) struct Thresholds {
    /// New frames after which the writer asks this thread for a checkpoint.
    pub(super) every: i32,
    /// Frames after which the writer checkpoints by itself, between
    /// batches, so that the WAL restarts from its beginning, once this
    /// thread has left at most `writer_copies` frames to copy. It bounds
    /// the WAL file: twice this many frames at most, plus one batch's.
    pub(super) writer_at: i32,
    /// The most frames the writer copies itself while the WAL is under
    /// twice `writer_at`.
    pub(super) writer_copies: i32,
}

impl Default for Thresholds {
    /// 10 000 and 40 000 frames: a WAL of at most about 160 MiB. SQLite's
    /// own default, one checkpoint per 1 000 frames inside the commit, made
    /// new keys half as fast on a file of two million records;
    /// docs/BENCHMARKS.md has what each setting measured.
    fn default() -> Self {
        Self {
            every: 10_000,
            writer_at: 40_000,
            writer_copies: 1_000,
        }
    }
}

/// The writer's side: counts the WAL's frames, asks the thread for a
/// checkpoint without waiting, and checkpoints by itself when it must.
pub(super) struct Checkpointer {
    thresholds: Thresholds,
    /// Frames in the WAL after the writer's last commit.
    frames: Arc<AtomicI32>,
    /// Frames in the WAL when a checkpoint was last asked for.
    requested_at: i32,
    /// Frames of the WAL in the database file after this thread's last
    /// pass (0 once the WAL restarted).
    copied: Arc<AtomicI32>,
    requests: SyncSender<u64>,
    /// Held while either thread checkpoints. SQLite answers a checkpoint
    /// that finds another one running with `SQLITE_BUSY` at once; the
    /// writer waits here instead, so its pass always runs and the WAL
    /// restarts when it should.
    running: Arc<Mutex<()>>,
}

impl Checkpointer {
    /// Starts the thread for the file at `path`.
    pub(super) fn start(path: PathBuf, thresholds: Thresholds) -> std::io::Result<Self> {
        // One request waiting is enough: a checkpoint copies every frame
        // committed before it starts.
        let (requests, queue) = sync_channel(1);
        let running = Arc::new(Mutex::new(()));
        let copied = Arc::new(AtomicI32::new(0));
        let (held, reported) = (running.clone(), copied.clone());
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || run(&path, queue, &held, &reported))?;
        Ok(Self {
            thresholds,
            frames: Arc::new(AtomicI32::new(0)),
            requested_at: 0,
            copied,
            requests,
            running,
        })
    }

    /// Replaces SQLite's automatic checkpoint on the writer's `conn` with a
    /// count of the frames its WAL holds after each commit.
    pub(super) fn watch(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        let frames = self.frames.clone();
        conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages| {
            frames.store(pages, Ordering::Relaxed);
            Ok(())
        }))
    }

    /// After each batch: asks the thread to copy the WAL every
    /// [`Thresholds::every`] new frames, and past
    /// [`Thresholds::writer_at`] checkpoints on the writer's `conn` (of
    /// `generation`) so the WAL restarts, once little is left to copy. A
    /// checkpoint that fails is tried again after the next batch; the WAL
    /// keeps every commit meanwhile.
    pub(super) fn after_batch(&mut self, conn: &Connection, generation: u64) {
        let frames = self.frames.load(Ordering::Relaxed);
        if frames < self.requested_at {
            // The WAL restarted from its beginning.
            self.requested_at = 0;
            self.copied.store(0, Ordering::Relaxed);
        }
        if frames >= self.thresholds.writer_at {
            let copied = self.copied.load(Ordering::Relaxed).min(frames);
            let must = frames >= 2 * self.thresholds.writer_at;
            let running = if must {
                Some(self.running.lock().unwrap_or_else(|e| e.into_inner()))
            } else if frames - copied <= self.thresholds.writer_copies {
                // Never waits for a pass of the thread's.
                self.running.try_lock().ok()
            } else {
                None
            };
            let Some(_running) = running else {
                // Little by little: the thread's next pass copies what
                // came since its last, while the writer goes on.
                self.request(generation);
                return;
            };
            match conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE) {
                Ok(_) => {
                    self.frames.store(0, Ordering::Relaxed);
                    self.copied.store(0, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "checkpoint failed; retried after the next batch")
                }
            }
        } else if frames - self.requested_at >= self.thresholds.every {
            self.requested_at = frames;
            self.request(generation);
        }
    }

    /// Holds off the checkpoint thread while the writer checkpoints on its
    /// own (a file replaced under it).
    pub(super) fn hold(&self) -> std::sync::MutexGuard<'_, ()> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for a checkpoint of the file the writer's connection of
    /// `generation` writes to; a request already waiting covers this one.
    fn request(&self, generation: u64) {
        match self.requests.try_send(generation) {
            Ok(()) | Err(TrySendError::Full(_)) => {}
            Err(TrySendError::Disconnected(_)) => {
                tracing::warn!("the checkpoint thread has stopped; the writer checkpoints alone")
            }
        }
    }
}

/// Serves requests until the writer drops its handle. The connection is
/// opened again when the writer has reopened the file (a replaced file is
/// never created here: a missing one is the writer's to report).
fn run(path: &Path, queue: Receiver<u64>, running: &Mutex<()>, copied: &AtomicI32) {
    let mut conn: Option<(u64, Connection)> = None;
    while let Ok(generation) = queue.recv() {
        if conn.as_ref().is_some_and(|(g, _)| *g != generation) {
            conn = None;
        }
        if conn.is_none() {
            match open(path) {
                Ok(c) => conn = Some((generation, c)),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot open the database to checkpoint");
                    continue;
                }
            }
        }
        let (_, c) = conn.as_ref().expect("opened above");
        let _running = running.lock().unwrap_or_else(|e| e.into_inner());
        match c.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE) {
            Ok((_, in_file)) => copied.store(in_file, Ordering::Relaxed),
            Err(e) => {
                tracing::warn!(error = %e, "checkpoint failed; the next request tries again");
                conn = None;
            }
        }
    }
    tracing::debug!("checkpoint thread stopped: the writer is gone");
}

fn open(path: &Path) -> rusqlite::Result<Connection> {
    let conn = schema::open_existing(path)?;
    // A checkpoint syncs the WAL before it copies and the database file
    // after, under `NORMAL` as under `FULL`.
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::super::schema;
    use super::super::writer::{Keep, Kind, Writer};
    use super::Thresholds;
    use crate::store::Durability;
    use rusqlite::Connection;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Writers that never pause, so the checkpoint thread never catches
    /// up: the writer's own checkpoint still restarts the WAL, and its
    /// file stays near `writer_at` frames instead of holding every write.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_stays_bounded_under_unbroken_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.db");
        let conn = Connection::open(&path).unwrap();
        schema::configure_writer(&conn, Durability::Relaxed).unwrap();
        conn.execute_batch("CREATE TABLE blobs (id INTEGER PRIMARY KEY, b BLOB NOT NULL)")
            .unwrap();
        let thresholds = Thresholds {
            every: 8,
            writer_at: 32,
            writer_copies: 4,
        };
        let generation = Arc::new(AtomicU64::new(0));
        let writer = Arc::new(
            Writer::start(
                conn,
                path.clone(),
                Durability::Relaxed,
                crate::store::schema::Migrations::default(),
                generation,
                thresholds,
            )
            .unwrap(),
        );
        // 32 senders of 40 rows of 2 000 bytes: about 640 pages of writes.
        let senders: Vec<_> = (0..32)
            .map(|_| {
                let writer = writer.clone();
                tokio::spawn(async move {
                    for _ in 0..40 {
                        writer
                            .submit(Kind::Write, |batch| {
                                batch
                                    .conn
                                    .execute("INSERT INTO blobs (b) VALUES (randomblob(2000))", [])
                                    .map_err(super::super::backend::classify)?;
                                Ok(((), Keep::Yes))
                            })
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for sender in senders {
            sender.await.unwrap();
        }
        let rows: i64 = Connection::open(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM blobs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 32 * 40);
        // A frame is a 4 KiB page and its 24-byte header. Past twice
        // `writer_at` the WAL grows only by the batch that crossed it: 32
        // rows, about 20 frames.
        let frames = std::fs::metadata(path.with_extension("db-wal"))
            .unwrap()
            .len()
            / (4096 + 24);
        assert!(
            frames <= 2 * 32 + 32,
            "the WAL holds {frames} frames; it never restarted"
        );
    }
}
