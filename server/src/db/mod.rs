//! The shop's database: the engine's store, opened with the shop's
//! migrations, and the shop's reads on each backend (charges, stock). Each
//! operation's own SQL lives with it, in [`crate::operation`].

mod page;
pub mod postgres;
pub(crate) mod sqlite_reads;

pub use page::{ChargePage, ChargeQuery};

use crate::domain::ItemId;
use exactly_once::postgres::Result;
use exactly_once::AnyStore;
use exactly_once::{Migration, Placement};
use std::sync::Arc;

/// The shop's schema on SQLite: its history, which created the engine's
/// tables too before the engine was a library (the engine adopts them).
/// Each says which earlier releases can run beside it (docs/ENGINE.md,
/// "Rolling releases"): none of these, as it happens. The first made the
/// schema, the second rebuilt its tables, and the third moved every lease
/// and expiry onto the database's own clock, which a release built for
/// version 2 (on the wall clock) would misjudge.
pub const SQLITE_MIGRATIONS: &[Migration] = &[
    Migration::contract(
        1,
        "0001_init",
        include_str!("../../migrations/0001_init.sql"),
    ),
    Migration::contract(
        2,
        "0002_phases",
        include_str!("../../migrations/0002_phases.sql"),
    ),
    Migration::contract(
        3,
        "0003_clock",
        include_str!("../../migrations/0003_clock.sql"),
    ),
    #[cfg(feature = "next-release")]
    Migration::expand(
        4,
        "0004_charge_note",
        include_str!("../../migrations/next-release/0004_charge_note.sql"),
    ),
];

/// The shop's schema on PostgreSQL (the second rebuilt its tables).
pub const POSTGRES_MIGRATIONS: &[Migration] = &[
    Migration::contract(
        1,
        "0001_init",
        include_str!("../../migrations/postgres/0001_init.sql"),
    ),
    Migration::contract(
        2,
        "0002_phases",
        include_str!("../../migrations/postgres/0002_phases.sql"),
    ),
    // On a Citus coordinator: charges and reservations sharded by the
    // caller beside the engine's records, the stock on every node (a
    // reservation's decrement commits everywhere in two phases, so three
    // posters are never sold four times). docs/CITUS.md.
    Migration::expand(
        3,
        "0003_reservations_by_caller",
        include_str!("../../migrations/postgres/0003_reservations_by_caller.sql"),
    )
    .places(&[
        Placement::reference("inventory"),
        Placement::by_caller("charges", "caller"),
        Placement::by_caller("reservations", "caller"),
    ]),
    #[cfg(feature = "next-release")]
    Migration::expand(
        4,
        "0004_charge_note",
        include_str!("../../migrations/next-release/postgres/0004_charge_note.sql"),
    ),
    #[cfg(feature = "next-release")]
    Migration::expand(
        5,
        "0005_pending_charges",
        include_str!("../../migrations/next-release/postgres/0005_pending_charges.sql"),
    )
    .runs_beside(2)
    .outside_transaction(),
];

/// The database the shop runs on, as the shop reads it: the engine's store
/// (whichever backend `--database` named), and the shop's reads on it.
#[derive(Clone)]
pub struct Db(pub Arc<AnyStore>);

impl Db {
    /// The engine's store.
    pub fn store(&self) -> Arc<AnyStore> {
        Arc::clone(&self.0)
    }

    /// A page of a caller's charges, newest first.
    pub async fn list_charges(&self, query: ChargeQuery<'_>) -> Result<ChargePage> {
        let rows = match &*self.0 {
            AnyStore::Sqlite(store) => store.read(|conn| sqlite_reads::charges(conn, &query))?,
            AnyStore::Postgres(store) => {
                postgres::charges(&**store.client().await?, &query).await?
            }
        };
        Ok(query.page(rows))
    }

    /// The stock left of an item, `None` if there is no such item.
    pub async fn inventory(&self, item: &ItemId) -> Result<Option<i64>> {
        match &*self.0 {
            AnyStore::Sqlite(store) => store.read(|conn| sqlite_reads::available(conn, item)),
            AnyStore::Postgres(store) => postgres::available(&**store.client().await?, item).await,
        }
    }
}
