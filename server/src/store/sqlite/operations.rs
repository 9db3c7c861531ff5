//! The SQL of the writes, run by the writer inside one job's savepoint:
//! the keyed protocol (find the key's record, or run the operation and
//! record its answer), each operation's business change, the sweep and
//! the health probe.

use super::Run;
use crate::domain::{Charge, Fingerprint, NewCharge, NewReservation, Reservation};
use crate::idempotency::record::{Record, StoredResponse};
use crate::operation;
use crate::store::{Execution, IdempotentRequest, Operation, RunContext};
use rusqlite::{params, Connection, OptionalExtension};

/// The heart of it, inside one savepoint of the batch's transaction: find
/// the key's record; replay or refuse if it is live; otherwise run the
/// operation and write the record with its response.
pub(super) fn execute(
    conn: &Connection,
    request: &IdempotentRequest,
    operation: &dyn Operation,
    now: i64,
    ttl_ms: i64,
) -> rusqlite::Result<Execution> {
    let caller = &request.caller.as_bytes()[..];
    let existing = conn
        .prepare_cached(
            "SELECT id, fingerprint, status, headers, body, expires_at FROM idempotency_keys
             WHERE caller = ?1 AND key = ?2",
        )?
        .query_row(params![caller, request.key.as_ref()], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                record(row, 1)?,
                row.get::<_, i64>(5)?,
            ))
        })
        .optional()?;
    if let Some((id, record, expires_at)) = existing {
        if expires_at > now {
            return Ok(Execution::Found(record.verdict(&request.fingerprint)));
        }
        // Expired: it counts as absent, and makes room for the new record.
        conn.prepare_cached("DELETE FROM idempotency_keys WHERE id = ?1")?
            .execute([id])?;
    }

    let context = RunContext {
        caller: &request.caller,
        now_ms: now,
    };
    let response = operation.run_sqlite(conn, &context)?;
    conn.prepare_cached(
        "INSERT INTO idempotency_keys
           (caller, key, fingerprint, status, headers, body, created_at, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        caller,
        request.key.as_ref(),
        &request.fingerprint.as_bytes()[..],
        response.status,
        response.encoded_headers(),
        &response.body[..],
        now,
        now.saturating_add(ttl_ms),
    ])?;
    Ok(Execution::Ran(response))
}

/// A record read from columns `first..first + 4`: fingerprint, status,
/// headers, body.
pub(super) fn record(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Record> {
    Ok(Record {
        fingerprint: Fingerprint::from_bytes(row.get(first)?),
        response: StoredResponse::from_stored(
            row.get(first + 1)?,
            &row.get::<_, String>(first + 2)?,
            row.get::<_, Vec<u8>>(first + 3)?,
        ),
    })
}

impl Run for NewCharge {
    fn run_sqlite(
        &self,
        conn: &Connection,
        at: &RunContext<'_>,
    ) -> rusqlite::Result<StoredResponse> {
        let charge = Charge::new(self.clone(), at.now_ms / 1000);
        conn.prepare_cached(
            "INSERT INTO charges (id, caller, amount, currency, description, created)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            charge.id.as_ref(),
            &at.caller.as_bytes()[..],
            charge.amount.get(),
            charge.currency.as_ref(),
            charge.description.as_ref().map(AsRef::as_ref),
            charge.created,
        ])?;
        Ok(operation::charge::created(&charge))
    }
}

impl Run for NewReservation {
    fn run_sqlite(
        &self,
        conn: &Connection,
        at: &RunContext<'_>,
    ) -> rusqlite::Result<StoredResponse> {
        // The guard is in the UPDATE itself: stock never goes below zero,
        // whatever runs beside it.
        let taken = conn
            .prepare_cached(
                "UPDATE inventory SET available = available - ?1
                 WHERE item_id = ?2 AND available >= ?1",
            )?
            .execute(params![self.quantity.get(), self.item_id.as_ref()])?;
        if taken == 0 {
            let available = super::queries::available(conn, &self.item_id)?;
            return Ok(operation::reservation::refused(self, available));
        }
        let reservation = Reservation::new(self.clone());
        conn.prepare_cached(
            "INSERT INTO reservations (id, caller, item_id, quantity, created)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            reservation.id,
            &at.caller.as_bytes()[..],
            reservation.item_id.as_ref(),
            reservation.quantity.get(),
            at.now_ms / 1000,
        ])?;
        Ok(operation::reservation::reserved(&reservation))
    }
}

/// Deletes at most `limit` records expired by `now`, oldest first.
pub(super) fn sweep(conn: &Connection, now: i64, limit: u32) -> rusqlite::Result<u64> {
    let deleted = conn
        .prepare_cached(
            "DELETE FROM idempotency_keys WHERE id IN (
               SELECT id FROM idempotency_keys WHERE expires_at <= ?1
               ORDER BY expires_at LIMIT ?2)",
        )?
        .execute(params![now, limit])?;
    Ok(deleted as u64)
}

/// A write probe: "healthy" means a write can commit (not just that the
/// file opens), so a full disk reports 503.
pub(super) fn probe_write(conn: &Connection) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE schema_migrations SET applied_at = applied_at
         WHERE version = (SELECT max(version) FROM schema_migrations)",
    )?
    .execute([])?;
    Ok(())
}
