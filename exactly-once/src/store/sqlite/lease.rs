//! A lease's life after its phase: renewed while its step runs, given up
//! (released, or after a failure), set aside for an operator.

use super::protocol::Clock;
use crate::record::Lease;
use crate::store::AfterFailure;
use rusqlite::{params, Connection, OptionalExtension, ToSql};

/// Extends the lease by its whole length from now, if it is still the
/// holder's.
pub(super) fn renew(conn: &Connection, lease: &Lease, clock: Clock) -> rusqlite::Result<bool> {
    hold_until(conn, lease, clock.now.saturating_add(clock.lease))
}

/// Moves the lease's end to `until` (store milliseconds), if it is still
/// the holder's.
fn hold_until(conn: &Connection, lease: &Lease, until: i64) -> rusqlite::Result<bool> {
    on_held(
        conn,
        "UPDATE idempotency_keys SET leased_until = ?4
         WHERE caller = ?1 AND key = ?2 AND lease_token = ?3
           AND recovery_point <> 'finished'",
        lease,
        &[&until],
    )
}

/// Runs `update` on the lease's record, its `?1`-`?3` the lease's caller,
/// key and token and `more` from `?4` on: whether it changed the record,
/// that is whether the lease was still the holder's.
fn on_held(
    conn: &Connection,
    update: &str,
    lease: &Lease,
    more: &[&dyn ToSql],
) -> rusqlite::Result<bool> {
    let held: [&dyn ToSql; 3] = [&lease.caller, &lease.key.as_ref(), &&lease.token[..]];
    let values: Vec<&dyn ToSql> = held.into_iter().chain(more.iter().copied()).collect();
    let changed = conn.prepare_cached(update)?.execute(&values[..])?;
    Ok(changed == 1)
}

/// Counts a failed step and gives the lease up, or sets the operation
/// aside when it has been unfinished longer than `attention_after`.
pub(super) fn step_failed(
    conn: &Connection,
    lease: &Lease,
    error: &str,
    clock: Clock,
) -> rusqlite::Result<AfterFailure> {
    let started: Option<i64> = conn
        .prepare_cached(
            "SELECT created_at FROM idempotency_keys
             WHERE caller = ?1 AND key = ?2 AND lease_token = ?3
               AND recovery_point <> 'finished'",
        )?
        .query_row(
            params![&lease.caller, lease.key.as_ref(), &lease.token[..]],
            |row| row.get(0),
        )
        .optional()?;
    let Some(started) = started else {
        return Ok(AfterFailure::NotHeld);
    };
    if clock.now.saturating_sub(started) >= clock.attention_after {
        let reason = format!(
            "unfinished {} after its start; last error: {error}",
            humanize_ms(clock.now.saturating_sub(started))
        );
        set_aside(conn, lease, &reason, Some(error))?;
        return Ok(AfterFailure::SetAside);
    }
    on_held(
        conn,
        "UPDATE idempotency_keys
         SET attempts = attempts + 1, last_error = ?4, leased_until = ?5
         WHERE caller = ?1 AND key = ?2 AND lease_token = ?3",
        lease,
        &[&error, &clock.now],
    )?;
    Ok(AfterFailure::Released)
}

/// Sets the lease's operation aside for an operator: nothing resumes it.
pub(super) fn set_aside(
    conn: &Connection,
    lease: &Lease,
    reason: &str,
    error: Option<&str>,
) -> rusqlite::Result<bool> {
    on_held(
        conn,
        "UPDATE idempotency_keys
         SET attention = ?4, attempts = attempts + 1, last_error = coalesce(?5, ?4),
             lease_token = NULL, leased_until = NULL
         WHERE caller = ?1 AND key = ?2 AND lease_token = ?3
           AND recovery_point <> 'finished'",
        lease,
        &[&reason, &error],
    )
}

/// A duration in milliseconds as people read it (`3h 2m`).
fn humanize_ms(ms: i64) -> String {
    let secs = u64::try_from(ms / 1000).unwrap_or(0);
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

/// How many operations are set aside for an operator.
pub(super) fn needing_attention(conn: &Connection) -> rusqlite::Result<u64> {
    // Through the index of unfinished records (a set-aside one is always
    // unfinished), not a scan of the table.
    conn.prepare_cached(
        "SELECT count(*) FROM idempotency_keys
         WHERE recovery_point NOT IN ('finished', 'expired') AND attention IS NOT NULL",
    )?
    .query_row([], |row| row.get::<_, i64>(0))
    .map(|n| n.unsigned_abs())
}

/// Gives the lease up now, counting nothing.
pub(super) fn release(conn: &Connection, lease: &Lease, clock: Clock) -> rusqlite::Result<bool> {
    hold_until(conn, lease, clock.now)
}
