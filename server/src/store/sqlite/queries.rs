//! The SQL of the reads, run on a read connection (or, for the stock left
//! after a refused reservation, inside the writer's savepoint).

use super::operations::record;
use crate::domain::{Caller, Charge, IdempotencyKey, ItemId};
use crate::idempotency::record::Record;
use crate::store::ChargeQuery;
use rusqlite::{params, Connection, OptionalExtension};

/// A live record of the key, for a replay.
pub(super) fn live_record(
    conn: &Connection,
    caller: &Caller,
    key: &IdempotencyKey,
    now: i64,
) -> rusqlite::Result<Option<Record>> {
    conn.prepare_cached(
        "SELECT fingerprint, status, headers, body FROM idempotency_keys
         WHERE caller = ?1 AND key = ?2 AND expires_at > ?3",
    )?
    .query_row(params![&caller.as_bytes()[..], key.as_ref(), now], |row| {
        record(row, 0)
    })
    .optional()
}

/// One page of a caller's charges, newest first (one row more than the
/// page, see [`ChargeQuery`]).
pub(super) fn charges(conn: &Connection, query: &ChargeQuery<'_>) -> rusqlite::Result<Vec<Charge>> {
    conn.prepare_cached(
        "SELECT id, amount, currency, description, created FROM charges
         WHERE caller = ?1 AND id < ?2 ORDER BY id DESC LIMIT ?3",
    )?
    .query_map(
        params![&query.caller.as_bytes()[..], query.before(), query.rows()],
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
    .collect()
}

/// The stock left of an item, `None` if there is no such item.
pub(super) fn available(conn: &Connection, item: &ItemId) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT available FROM inventory WHERE item_id = ?1")?
        .query_row([item.as_ref()], |row| row.get(0))
        .optional()
}
