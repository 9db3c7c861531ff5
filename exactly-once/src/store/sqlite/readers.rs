//! Read connections beside the writer: replays, listings and stock reads
//! never queue behind a write (WAL lets readers run during one). They are
//! reused, opened on demand, and dropped when the writer reopens the file.

use super::backend::classify;
use super::schema;
use crate::store::Result;

use rusqlite::{config::DbConfig, Connection};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Idle read connections, each tagged with the writer's generation.
pub(super) struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<(u64, Connection)>>,
    generation: Arc<AtomicU64>,
}

impl ReadPool {
    /// A pool of connections to `path`; `generation` is the writer's.
    pub(super) fn new(path: PathBuf, generation: Arc<AtomicU64>) -> Self {
        Self {
            path,
            idle: Mutex::new(Vec::new()),
            generation,
        }
    }

    /// The writer's generation: bumped when it reopens the file.
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Runs a short read on a pooled connection. Reads are point lookups
    /// and small pages, so they run inline rather than hopping threads.
    pub(super) fn with<R>(
        &self,
        read: impl FnOnce(&Connection) -> rusqlite::Result<R>,
    ) -> Result<R> {
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
        if !matches!(&result, Err(e) if e.is_unavailable()) {
            self.idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((generation, conn));
        }
        result
    }
}

fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let conn = schema::open_existing(path)?;
    conn.pragma_update(None, "query_only", "ON")?;
    // Keep cached plans: without it SQLite re-prepares statements with a
    // bound LIMIT on every run.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    conn.set_prepared_statement_cache_capacity(16);
    Ok(conn)
}
