//! The outbox in SQL: a message written with an operation's phase, claimed
//! by the relay for a while, then marked sent or failed.

use crate::backend::RunContext;
use crate::store::enqueue::Enqueue;
use crate::store::Message;
use rusqlite::{params, Connection};

impl crate::store::enqueue::sealed::Sealed for &Connection {}

/// SQLite's: written at once, due at the store's time.
impl<'a> Enqueue<'a> for &Connection {
    type Written = rusqlite::Result<()>;

    fn enqueue(self, message: &'a Message, at: &RunContext<'_>) -> rusqlite::Result<()> {
        enqueue_at(self, message, at.store_ms)
    }
}

fn enqueue_at(conn: &Connection, message: &Message, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO outbox (message_id, recipient, subject, body, next_attempt_at, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5) ON CONFLICT (message_id) DO NOTHING",
    )?
    .execute(params![
        message.id,
        message.to,
        message.subject,
        message.body,
        now
    ])?;
    Ok(())
}

/// Deletes at most `limit` messages sent before `before` (Unix ms), oldest
/// first; how many.
pub(super) fn prune_sent(conn: &Connection, before: i64, limit: u32) -> rusqlite::Result<u64> {
    let deleted = conn
        .prepare_cached(
            "DELETE FROM outbox WHERE id IN (
               SELECT id FROM outbox WHERE sent_at IS NOT NULL AND sent_at <= ?1
               ORDER BY id LIMIT ?2)",
        )?
        .execute(params![before, limit])?;
    Ok(deleted as u64)
}

/// Claims up to `limit` due messages until `claimed_until`, which names
/// the claim: a row is claimed only once its last claim's deadline is past
/// (`<= now`), and `claimed_until` is later than `now`.
pub(super) fn claim_messages(
    conn: &Connection,
    now: i64,
    claimed_until: i64,
    limit: u32,
) -> rusqlite::Result<Vec<(i64, u32, Message)>> {
    conn.prepare_cached(
        "UPDATE outbox SET claimed_until = ?2
         WHERE id IN (SELECT id FROM outbox
                      WHERE sent_at IS NULL AND next_attempt_at <= ?1 AND dead_at IS NULL
                        AND (claimed_until IS NULL OR claimed_until <= ?1)
                      ORDER BY next_attempt_at LIMIT ?3)
         RETURNING id, attempts, message_id, recipient, subject, body",
    )?
    .query_map(params![now, claimed_until, limit], |row| {
        Ok((
            row.get(0)?,
            row.get(1)?,
            Message {
                id: row.get(2)?,
                to: row.get(3)?,
                subject: row.get(4)?,
                body: row.get(5)?,
            },
        ))
    })?
    .collect()
}

/// How a send ended, for [`settle_message`].
pub(super) enum Settled<'a> {
    /// Accepted, at this Unix ms.
    Sent(i64),
    /// Failed with this error: try again at this time (the database's).
    Retry(i64, &'a str),
    /// Refused for good with this error, at this Unix ms: never again.
    Dead(i64, &'a str),
}

/// Marks a message sent, failed (to try again later) or dead, if the claim
/// that ends at `claimed_until` is still the row's; whether it was.
pub(super) fn settle_message(
    conn: &Connection,
    id: i64,
    claimed_until: i64,
    outcome: Settled<'_>,
) -> rusqlite::Result<bool> {
    let changed = match outcome {
        Settled::Sent(sent_at) => conn
            .prepare_cached(
                "UPDATE outbox SET sent_at = ?3, claimed_until = NULL
                 WHERE id = ?1 AND claimed_until = ?2",
            )?
            .execute(params![id, claimed_until, sent_at])?,
        Settled::Retry(retry_at, error) => conn
            .prepare_cached(
                "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = ?3,
                                   claimed_until = NULL, last_error = ?4
                 WHERE id = ?1 AND claimed_until = ?2",
            )?
            .execute(params![id, claimed_until, retry_at, error])?,
        // Last in the schedule, so the relay's claims never scan it.
        Settled::Dead(dead_at, error) => conn
            .prepare_cached(
                "UPDATE outbox SET attempts = attempts + 1, dead_at = ?3,
                                   next_attempt_at = 9223372036854775807,
                                   claimed_until = NULL, last_error = ?4
                 WHERE id = ?1 AND claimed_until = ?2",
            )?
            .execute(params![id, claimed_until, dead_at, error])?,
    };
    Ok(changed == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox_with_one_message() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrations::migrate(
            &mut conn,
            super::super::backend::MIGRATIONS.0,
            0,
            |_| {},
        )
        .unwrap();
        let message = Message {
            id: "<note.1@example>".into(),
            to: "ada@example.org".into(),
            subject: "Your note".into(),
            body: "Thanks".into(),
        };
        enqueue_at(&conn, &message, 0).unwrap();
        conn
    }

    fn sent(conn: &Connection) -> bool {
        conn.query_row("SELECT sent_at IS NOT NULL FROM outbox", [], |r| r.get(0))
            .unwrap()
    }

    /// A relay whose claim ran out, and another relay claimed the message,
    /// marks nothing; the new holder does.
    #[test]
    fn only_the_claim_that_holds_the_message_marks_it() {
        let conn = outbox_with_one_message();
        let first = claim_messages(&conn, 10, 1_010, 20).unwrap();
        assert_eq!(first.len(), 1);
        assert!(
            claim_messages(&conn, 500, 1_500, 20).unwrap().is_empty(),
            "still claimed"
        );
        let (id, ..) = first[0];
        let second = claim_messages(&conn, 1_010, 2_010, 20).unwrap();
        assert_eq!(second.len(), 1, "the claim ran out");

        let timed_out = Settled::Retry(5_000, "timed out");
        assert!(!settle_message(&conn, id, 1_010, timed_out).unwrap());
        assert!(!settle_message(&conn, id, 1_010, Settled::Sent(1_200)).unwrap());
        assert!(!sent(&conn));
        assert!(settle_message(&conn, id, 2_010, Settled::Sent(1_300)).unwrap());
        assert!(sent(&conn));
    }

    /// A message the receiver refused for good is never claimed again,
    /// and a sent one is pruned once it is older than the retention.
    #[test]
    fn a_dead_message_is_never_claimed_again_and_sent_ones_are_pruned() {
        let conn = outbox_with_one_message();
        let (id, ..) = claim_messages(&conn, 10, 1_010, 20).unwrap()[0].clone();
        let refused = Settled::Dead(20, "550 no such mailbox");
        assert!(settle_message(&conn, id, 1_010, refused).unwrap());
        assert!(claim_messages(&conn, i64::MAX - 1, i64::MAX, 20)
            .unwrap()
            .is_empty());
        assert_eq!(prune_sent(&conn, i64::MAX, 100).unwrap(), 0, "never sent");

        let message = Message {
            id: "<note.2@example>".into(),
            to: "bob@example.org".into(),
            subject: "Your note".into(),
            body: "Thanks".into(),
        };
        enqueue_at(&conn, &message, 0).unwrap();
        let (id, ..) = claim_messages(&conn, 10, 1_010, 20).unwrap()[0].clone();
        assert!(settle_message(&conn, id, 1_010, Settled::Sent(5_000)).unwrap());
        assert_eq!(prune_sent(&conn, 4_999, 100).unwrap(), 0, "sent since");
        assert_eq!(prune_sent(&conn, 5_000, 100).unwrap(), 1);
    }
}
