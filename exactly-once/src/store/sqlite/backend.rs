//! The [`Sqlite`] backend type, the engine's own schema and how SQLite's
//! errors are sorted: what every other file of this backend builds on.

use crate::backend::Backend;
use crate::caller::Caller;
use crate::store::schema::{Migration, Migrations};
use crate::store::StoreError;
use rusqlite::{Connection, ErrorCode};

/// The embedded backend: one SQLite file, one writer thread that commits
/// many requests together (group commit), readers beside it. An
/// [`Operation<Sqlite>`](crate::Operation) writes with the writer's
/// connection inside a savepoint of its own, and returns at once (it holds
/// the writer: keep it short).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sqlite;

impl crate::backend::sealed::Sealed for Sqlite {}

impl Backend for Sqlite {
    type Transaction<'t> = &'t Connection;
    type RunOutput<'t> = rusqlite::Result<crate::record::PhaseEnd>;
    type OneStatement = std::convert::Infallible;
    const NAME: &'static str = "sqlite";
}

/// The engine's own schema, in order (ledger `exactly_once_migrations`).
/// The second adds columns only, but what rows mean changed with it (an
/// expired key's tombstone, a dead letter), which a release built for
/// version 1 would misread: it runs beside nothing older.
pub(super) const MIGRATIONS: Migrations = Migrations(&[
    Migration::contract(
        1,
        "0001_records",
        include_str!("../../../migrations/sqlite/0001_records.sql"),
    ),
    Migration::contract(
        2,
        "0002_lives_and_dead_letters",
        include_str!("../../../migrations/sqlite/0002_lives_and_dead_letters.sql"),
    ),
    Migration::expand(
        3,
        "0003_operators",
        include_str!("../../../migrations/sqlite/0003_operators.sql"),
    ),
    // A nullable column of a table the releases before 0003 do not know.
    Migration::expand(
        4,
        "0004_operator_os_user",
        include_str!("../../../migrations/sqlite/0004_operator_os_user.sql"),
    )
    .runs_beside(2),
    // An index: the releases 0004 runs beside do not notice it.
    Migration::expand(
        5,
        "0005_unfinished_by_caller",
        include_str!("../../../migrations/sqlite/0005_unfinished_by_caller.sql"),
    )
    .runs_beside(2),
]);

/// Sorts SQLite errors: what a retry may fix (503) and what it will not
/// (500). Your reads and operations can use it for theirs.
pub fn classify(e: rusqlite::Error) -> StoreError {
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
    StoreError::sorted(retryable, "SQLite", e)
}

/// `?` on a rusqlite call (a read of yours, say): the error sorted by
/// [`classify`].
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        classify(e)
    }
}

/// A caller is stored as its hash, a 32-byte BLOB.
impl rusqlite::ToSql for Caller {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::Borrowed(
            rusqlite::types::ValueRef::Blob(self.as_bytes()),
        ))
    }
}
