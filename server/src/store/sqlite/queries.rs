//! The SQL of the reads, run on a read connection (or, for the stock left
//! after a refused reservation and a finished charge, inside the writer's
//! savepoint).

use super::protocol::{life_left, record};
use crate::domain::{
    Caller, Charge, ChargeRow, Fingerprint, IdempotencyKey, ItemId, CHARGE_COLUMNS,
};
use crate::store::{ChargeQuery, Finished};
use rusqlite::{params, Connection, OptionalExtension};

/// A charge, from a row of [`CHARGE_COLUMNS`].
pub(super) fn charge(row: &rusqlite::Row<'_>) -> rusqlite::Result<Charge> {
    ChargeRow::try_from(row).map(Charge::from)
}

/// A finished, live record of the key, for a replay.
pub(super) fn live_record(
    conn: &Connection,
    caller: &Caller,
    key: &IdempotencyKey,
    now: i64,
) -> rusqlite::Result<Option<Finished>> {
    conn.prepare_cached(
        "SELECT fingerprint, status, headers, body, expires_at FROM idempotency_keys
         WHERE caller = ?1 AND key = ?2 AND expires_at > ?3 AND recovery_point = 'finished'",
    )?
    .query_row(params![&caller, key.as_ref(), now], |row| {
        Ok(Finished {
            record: record(row, 0)?,
            life: life_left(row.get(4)?, now),
        })
    })
    .optional()
}

/// The fingerprint of the key's operation if it is unfinished.
pub(super) fn unfinished(
    conn: &Connection,
    caller: &Caller,
    key: &IdempotencyKey,
) -> rusqlite::Result<Option<Fingerprint>> {
    conn.prepare_cached(
        "SELECT fingerprint FROM idempotency_keys
         WHERE caller = ?1 AND key = ?2 AND recovery_point <> 'finished'",
    )?
    .query_row(params![&caller, key.as_ref()], |row| {
        Ok(Fingerprint::from_bytes(row.get(0)?))
    })
    .optional()
}

/// One page of a caller's charges, newest first (one row more than the
/// page, see [`ChargeQuery`]).
pub(super) fn charges(conn: &Connection, query: &ChargeQuery<'_>) -> rusqlite::Result<Vec<Charge>> {
    conn.prepare_cached(&format!(
        "SELECT {CHARGE_COLUMNS} FROM charges
         WHERE caller = ?1 AND id < ?2 ORDER BY id DESC LIMIT ?3"
    ))?
    .query_map(params![&query.caller, query.before(), query.rows()], charge)?
    .collect()
}

/// The stock left of an item, `None` if there is no such item.
pub(super) fn available(conn: &Connection, item: &ItemId) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT available FROM inventory WHERE item_id = ?1")?
        .query_row([item.as_ref()], |row| row.get(0))
        .optional()
}

/// How many receipts wait to be sent.
pub(super) fn receipts_waiting(conn: &Connection) -> rusqlite::Result<u64> {
    conn.prepare_cached("SELECT count(*) FROM outbox WHERE sent_at IS NULL")?
        .query_row([], |row| row.get::<_, i64>(0))
        .map(|n| n.unsigned_abs())
}
