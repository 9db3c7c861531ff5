//! The shop's reads on SQLite, run on a read connection (or, for the stock
//! left after a refused reservation and a finished charge, inside the
//! writer's savepoint).

use super::page::ChargeQuery;
use crate::domain::{Charge, ChargeRow, ItemId, CHARGE_COLUMNS};
use rusqlite::{params, Connection, OptionalExtension};

/// A charge, from a row of [`CHARGE_COLUMNS`].
pub(crate) fn charge(row: &rusqlite::Row<'_>) -> rusqlite::Result<Charge> {
    ChargeRow::try_from(row).map(Charge::from)
}

/// One page of a caller's charges, newest first (one row more than the
/// page, see [`ChargeQuery`]).
pub(crate) fn charges(conn: &Connection, query: &ChargeQuery<'_>) -> rusqlite::Result<Vec<Charge>> {
    conn.prepare_cached(&format!(
        "SELECT {CHARGE_COLUMNS} FROM charges
         WHERE caller = ?1 AND id < ?2 ORDER BY id DESC LIMIT ?3"
    ))?
    .query_map(params![&query.caller, query.before(), query.rows()], charge)?
    .collect()
}

/// The stock left of an item, `None` if there is no such item.
pub(crate) fn available(conn: &Connection, item: &ItemId) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT available FROM inventory WHERE item_id = ?1")?
        .query_row([item.as_ref()], |row| row.get(0))
        .optional()
}
