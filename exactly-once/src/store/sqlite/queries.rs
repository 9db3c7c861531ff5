//! The engine's reads, run on a read connection (and the count of a
//! caller's unfinished operations, in the writer's transaction).

use super::protocol::{life_left, record};
use crate::caller::Caller;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::store::LiveRecord;
use rusqlite::{params, Connection, OptionalExtension};

/// A finished, live record of the key, for a replay.
pub(super) fn live_record(
    conn: &Connection,
    caller: &Caller,
    key: &IdempotencyKey,
    now: i64,
) -> rusqlite::Result<Option<LiveRecord>> {
    conn.prepare_cached(
        "SELECT fingerprint, status, headers, body, expires_at FROM idempotency_keys
         WHERE caller = ?1 AND key = ?2 AND expires_at > ?3 AND recovery_point = 'finished'",
    )?
    .query_row(params![&caller, key.as_ref(), now], |row| {
        Ok(LiveRecord {
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
         WHERE caller = ?1 AND key = ?2 AND recovery_point NOT IN ('finished', 'expired')",
    )?
    .query_row(params![&caller, key.as_ref()], |row| {
        Ok(Fingerprint::from_bytes(row.get(0)?))
    })
    .optional()
}

/// How many messages wait to be sent.
pub(super) fn messages_waiting(conn: &Connection) -> rusqlite::Result<u64> {
    conn.prepare_cached("SELECT count(*) FROM outbox WHERE sent_at IS NULL AND dead_at IS NULL")?
        .query_row([], |row| row.get::<_, i64>(0))
        .map(|n| n.unsigned_abs())
}

/// How many messages the receiver refused for good.
pub(super) fn messages_dead(conn: &Connection) -> rusqlite::Result<u64> {
    conn.prepare_cached("SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL")?
        .query_row([], |row| row.get::<_, i64>(0))
        .map(|n| n.unsigned_abs())
}

/// Whether `caller` has more than `cap` unfinished operations, counting
/// one just recorded in this transaction: read through the index of
/// unfinished operations by caller, at most `cap + 1` entries.
pub(super) fn over_unfinished_cap(
    conn: &Connection,
    caller: &Caller,
    cap: u32,
) -> rusqlite::Result<bool> {
    let counted: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM (SELECT 1 FROM idempotency_keys
             WHERE caller = ?1 AND recovery_point NOT IN ('finished', 'expired') LIMIT ?2)",
        )?
        .query_row(params![caller, i64::from(cap) + 1], |row| row.get(0))?;
    Ok(counted > i64::from(cap))
}
