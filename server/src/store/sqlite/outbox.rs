//! The outbox in SQL: a receipt written with the phase that finishes its
//! charge, claimed by the relay for a while, then marked sent or failed.

use crate::operation::receipt::Receipt;
use rusqlite::{params, Connection};

/// Writes a receipt to the outbox, due now. A second receipt for the same
/// charge (the same `Message-ID`) is never written.
pub(super) fn enqueue(conn: &Connection, receipt: &Receipt, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO outbox (message_id, recipient, subject, body, next_attempt_at)
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (message_id) DO NOTHING",
    )?
    .execute(params![
        receipt.message_id,
        receipt.recipient,
        receipt.subject,
        receipt.body,
        now
    ])?;
    Ok(())
}

/// Claims up to `limit` due receipts until `claimed_until`.
pub(super) fn claim_receipts(
    conn: &Connection,
    now: i64,
    claimed_until: i64,
    limit: u32,
) -> rusqlite::Result<Vec<(i64, u32, Receipt)>> {
    conn.prepare_cached(
        "UPDATE outbox SET claimed_until = ?2
         WHERE id IN (SELECT id FROM outbox
                      WHERE sent_at IS NULL AND next_attempt_at <= ?1
                        AND (claimed_until IS NULL OR claimed_until <= ?1)
                      ORDER BY next_attempt_at LIMIT ?3)
         RETURNING id, attempts, message_id, recipient, subject, body",
    )?
    .query_map(params![now, claimed_until, limit], |row| {
        Ok((
            row.get(0)?,
            row.get(1)?,
            Receipt {
                message_id: row.get(2)?,
                recipient: row.get(3)?,
                subject: row.get(4)?,
                body: row.get(5)?,
            },
        ))
    })?
    .collect()
}

/// Marks a receipt sent, or failed (to try again at `retry_at`).
pub(super) fn settle_receipt(
    conn: &Connection,
    id: i64,
    outcome: Result<i64, (i64, &str)>,
) -> rusqlite::Result<()> {
    match outcome {
        Ok(sent_at) => conn
            .prepare_cached("UPDATE outbox SET sent_at = ?2, claimed_until = NULL WHERE id = ?1")?
            .execute(params![id, sent_at])?,
        Err((retry_at, error)) => conn
            .prepare_cached(
                "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = ?2,
                                   claimed_until = NULL, last_error = ?3
                 WHERE id = ?1",
            )?
            .execute(params![id, retry_at, error])?,
    };
    Ok(())
}
