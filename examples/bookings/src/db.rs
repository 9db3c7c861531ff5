//! The service's own table on each backend: its migrations, handed to the
//! store, and its reads, beside the engine's records in the same database.

use exactly_once::postgres::Sql;
use exactly_once::Migration;
use exactly_once::{AnyStore, Caller, StoreError};
use serde::Serialize;
use std::sync::Arc;
use tokio_postgres::types::Type;

/// The `bookings` table on SQLite. A migration added later says which
/// earlier releases can run beside it: `Migration::expand` for a new
/// table, column or index, `Migration::contract` for a drop or a rename
/// (docs/ENGINE.md, "Rolling releases").
pub const SQLITE_MIGRATIONS: &[Migration] = &[Migration::contract(
    1,
    "0001_bookings",
    "CREATE TABLE bookings (
       id TEXT PRIMARY KEY,
       caller BLOB NOT NULL,
       idempotency_key TEXT NOT NULL,
       seat TEXT NOT NULL UNIQUE,
       status TEXT NOT NULL CHECK (status IN ('held', 'confirmed')),
       confirmation TEXT,
       created_ms INTEGER NOT NULL
     );
     CREATE INDEX bookings_by_caller ON bookings (caller, created_ms);",
)];

/// The `bookings` table on PostgreSQL.
pub const POSTGRES_MIGRATIONS: &[Migration] = &[Migration::contract(
    1,
    "0001_bookings",
    "CREATE TABLE bookings (
       id TEXT PRIMARY KEY,
       caller BYTEA NOT NULL,
       idempotency_key TEXT NOT NULL,
       seat TEXT NOT NULL UNIQUE,
       status TEXT NOT NULL CHECK (status IN ('held', 'confirmed')),
       confirmation TEXT,
       created_ms BIGINT NOT NULL
     );
     CREATE INDEX bookings_by_caller ON bookings (caller, created_ms);",
)];

/// A booking row as `GET /bookings` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BookingRow {
    /// `bk_…`.
    pub id: String,
    /// The seat.
    pub seat: String,
    /// `held` or `confirmed`.
    pub status: String,
    /// The partner's code, once confirmed.
    pub confirmation: Option<String>,
    /// The key of the request that made it.
    pub idempotency_key: String,
}

/// The engine's store (whichever backend `--database` named), and this
/// service's own reads on it.
#[derive(Clone)]
pub struct Db(pub Arc<AnyStore>);

const LIST_SQLITE: &str = "SELECT id, seat, status, confirmation, idempotency_key FROM bookings
     WHERE caller = ?1 AND (?2 IS NULL OR id = ?2) ORDER BY created_ms, id";
const LIST_POSTGRES: Sql = Sql::new(
    "SELECT id, seat, status, confirmation, idempotency_key FROM bookings
     WHERE caller = $1 AND ($2::text IS NULL OR id = $2) ORDER BY created_ms, id",
    &[Type::BYTEA, Type::TEXT],
);

impl Db {
    /// The engine's store.
    pub fn store(&self) -> Arc<AnyStore> {
        Arc::clone(&self.0)
    }

    /// `caller`'s bookings, oldest first; only the one with `id`, if given.
    pub async fn bookings(
        &self,
        caller: &Caller,
        id: Option<&str>,
    ) -> Result<Vec<BookingRow>, StoreError> {
        let (caller, id) = (*caller, id.map(str::to_owned));
        match &*self.0 {
            AnyStore::Sqlite(store) => {
                let store = store.clone();
                // Reads on a read connection, off the async threads.
                tokio::task::spawn_blocking(move || {
                    store.read(|conn| {
                        let mut statement = conn.prepare_cached(LIST_SQLITE)?;
                        let rows = statement.query_map(rusqlite::params![caller, id], |row| {
                            Ok(BookingRow {
                                id: row.get(0)?,
                                seat: row.get(1)?,
                                status: row.get(2)?,
                                confirmation: row.get(3)?,
                                idempotency_key: row.get(4)?,
                            })
                        })?;
                        rows.collect()
                    })
                })
                .await
                .map_err(|e| StoreError::internal("a read panicked").caused_by(e))?
            }
            AnyStore::Postgres(store) => {
                let client = store.client().await?;
                let rows = LIST_POSTGRES.query(&**client, &[&caller, &id]).await?;
                Ok(rows
                    .iter()
                    .map(|row| BookingRow {
                        id: row.get(0),
                        seat: row.get(1),
                        status: row.get(2),
                        confirmation: row.get(3),
                        idempotency_key: row.get(4),
                    })
                    .collect())
            }
        }
    }
}
