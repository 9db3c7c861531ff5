//! The SQLite file itself: its connection settings, its migrations, and
//! which file a path names right now (a replaced file is noticed).

use super::backend::classify;
use super::migrations::{ledger_state, migrate_in};
use crate::store::schema::{Fit, Migrations, APP_LEDGER, ENGINE_LEDGER};
use crate::store::Result;
use crate::store::{now_ms, Durability, StoreError};
use rusqlite::{Connection, OpenFlags};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

/// How long a connection waits for another process's lock before giving up
/// with a 503.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to the file at `path`, which must exist: it is never
/// created here (that would forget every key). Configured as [`configure`]
/// says.
pub(super) fn open_existing(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    configure(&conn)?;
    Ok(conn)
}

/// What every connection of ours is set to: it waits [`BUSY_TIMEOUT`] for
/// another connection's lock, and it keeps its temporary files in memory.
/// SQLite otherwise spills a savepoint's journal past 64 KiB (a job that
/// changes many pages: a sweep, an insert that splits B-tree pages) to a
/// file in `/var/tmp` or `/tmp`; where those are read-only (a container's
/// read-only root filesystem) or full, that job failed and took its whole
/// batch with it. The journal holds one job's changed pages at most.
fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "temp_store", "MEMORY")
}

/// How much of the file the writer reads through a memory map (SQLite
/// clamps it to its own limit, 2 GiB less 64 KiB). A new key lands on a
/// random leaf of the record B-tree, which SQLite's 2 MB page cache rarely
/// still holds on a file of a day's records; through the map that leaf is
/// a page-cache hit in the kernel instead of a `pread` (9-24% more new keys
/// per second on a file of 2 million records, none on an empty file: see
/// docs/BENCHMARKS.md). Writes still go through the WAL. The price is
/// SQLite's: a disk error on a mapped read kills the process with `SIGBUS`
/// instead of failing one batch, and a killed server loses nothing.
const MMAP_SIZE: i64 = 1 << 31;

/// Settings of the writer's connection.
pub(super) fn configure_writer(conn: &Connection, durability: Durability) -> rusqlite::Result<()> {
    configure(conn)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    let synchronous = match durability {
        Durability::Full => "FULL",
        Durability::Relaxed => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.pragma_update(None, "mmap_size", MMAP_SIZE)?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(())
}

/// Applies the migrations the file still needs: the application's, then
/// the engine's, each ledger's run of migrations in one transaction (one
/// that runs outside a transaction on its own).
pub(super) fn migrate(
    conn: &mut Connection,
    app: Migrations,
    engine: Migrations,
) -> rusqlite::Result<()> {
    for (ledger, migrations) in [(APP_LEDGER, app), (ENGINE_LEDGER, engine)] {
        migrate_in(conn, ledger, migrations.0, now_ms(), |version| {
            tracing::info!(ledger, version, "migration applied");
        })?;
    }
    Ok(())
}

/// Ok when this build can serve on both ledgers: at its versions, or
/// ahead of them with later migrations that run beside it
/// ([`Migrations::check_in`]). What it found, per ledger.
pub(super) fn check(
    conn: &Connection,
    app: Migrations,
    engine: Migrations,
) -> Result<[(&'static str, Fit); 2]> {
    let mut fits = [(APP_LEDGER, Fit::Current), (ENGINE_LEDGER, Fit::Current)];
    for ((ledger, fit), migrations) in fits.iter_mut().zip([app, engine]) {
        let (found, later) = ledger_state(conn, ledger, migrations.latest()).map_err(classify)?;
        *fit = migrations.check_in(ledger, found, &later)?;
    }
    Ok(fits)
}

/// Which file a path names right now (device and inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileIdentity {
    dev: u64,
    ino: u64,
}

/// The identity of the file at `path`; 503 when there is none.
pub(super) fn file_identity(path: &Path) -> Result<FileIdentity> {
    let meta = std::fs::metadata(path).map_err(|e| {
        StoreError::unavailable(format!("the database file {} is gone", path.display()))
            .caused_by(e)
    })?;
    Ok(FileIdentity {
        dev: meta.dev(),
        ino: meta.ino(),
    })
}

/// A write probe: "healthy" means a write can commit (not just that the
/// file opens), so a full disk reports 503.
pub(super) fn probe_write(conn: &Connection) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE exactly_once_migrations SET applied_at = applied_at
         WHERE version = (SELECT max(version) FROM exactly_once_migrations)",
    )?
    .execute([])?;
    Ok(())
}
