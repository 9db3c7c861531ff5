//! The outbox in SQL: a message written with an operation's phase, claimed
//! by one relay at a time (`FOR UPDATE SKIP LOCKED`), then marked sent or
//! failed.

use super::statement::{Exec, Statement};
use super::value::Kind;
#[cfg(feature = "postgres")]
use crate::backend::{BoxFuture, RunContext};
#[cfg(feature = "postgres")]
use crate::store::enqueue::Enqueue;
use crate::store::Message;
use crate::store::{ClaimToken, Delivery, OutboxItem, Result};
use std::time::Duration;

#[cfg(feature = "postgres")]
impl crate::store::enqueue::sealed::Sealed for &deadpool_postgres::Transaction<'_> {}

/// tokio-postgres': a future, in the operation's transaction.
#[cfg(feature = "postgres")]
impl<'a> Enqueue<'a> for &'a deadpool_postgres::Transaction<'_> {
    type Written = BoxFuture<'a, Result<()>>;

    fn enqueue(self, message: &'a Message, _: &RunContext<'_>) -> Self::Written {
        Box::pin(enqueue_on(self, message))
    }
}

/// A message written on any driver's transaction's transaction.
pub(super) async fn enqueue_on(tx: &impl Exec, message: &Message) -> Result<()> {
    const ENQUEUE: Statement = Statement::new(
        "INSERT INTO outbox (message_id, recipient, subject, body, next_attempt_at)
         VALUES ($1, $2, $3, $4, now()) ON CONFLICT (message_id) DO NOTHING",
        &[Kind::Text, Kind::Text, Kind::Text, Kind::Text],
    );
    ENQUEUE
        .execute(
            tx,
            &[&message.id, &message.to, &message.subject, &message.body],
        )
        .await?;
    Ok(())
}

/// The claim's deadline in microseconds, the claim's token: the same
/// expression where a claim returns it and where a settle compares it.
macro_rules! token {
    () => {
        "(extract(epoch FROM claimed_until) * 1000000)::int8"
    };
}

/// Claims up to `limit` due messages for `claim`; instances claiming at
/// once skip each other's rows. A row is claimed only once its last claim's
/// deadline is past, and until `now()` plus `claim` (at least a second),
/// so every claim of a row has a deadline of its own: its token.
pub(super) async fn claim(
    client: &impl Exec,
    limit: u32,
    claim: Duration,
) -> Result<Vec<OutboxItem>> {
    const CLAIM: Statement = Statement::new(
        concat!(
            "UPDATE outbox SET claimed_until = now() + $2 * interval '1 second'
             WHERE id IN (SELECT id FROM outbox
                          WHERE sent_at IS NULL AND next_attempt_at <= now()
                            AND dead_at IS NULL
                            AND (claimed_until IS NULL OR claimed_until <= now())
                          ORDER BY next_attempt_at LIMIT $1
                          FOR UPDATE SKIP LOCKED)
             RETURNING id, attempts, message_id, recipient, subject, body, ",
            token!()
        ),
        &[Kind::Int8, Kind::Float8],
    );
    let rows = CLAIM
        .query(client, &[&i64::from(limit), &claim.as_secs_f64()])
        .await?;
    Ok(rows
        .iter()
        .map(|row| OutboxItem {
            id: row.get(0),
            attempts: row.get::<_, i32>(1).unsigned_abs(),
            claim: ClaimToken(row.get(6)),
            message: Message {
                id: row.get(2),
                to: row.get(3),
                subject: row.get(4),
                body: row.get(5),
            },
        })
        .collect())
}

/// Marks how sending a message ended, with the error kept, only while the
/// item's claim is the row's. Whether it was.
pub(super) async fn settle(
    client: &impl Exec,
    item: &OutboxItem,
    delivery: Delivery<'_>,
) -> Result<bool> {
    const SENT: Statement = Statement::new(
        concat!(
            "UPDATE outbox SET sent_at = now(), claimed_until = NULL WHERE id = $1 AND ",
            token!(),
            " = $2"
        ),
        &[Kind::Int8, Kind::Int8],
    );
    // Last in the schedule, so the relay's claims never scan it.
    const DEAD: Statement = Statement::new(
        concat!(
            "UPDATE outbox SET attempts = attempts + 1, claimed_until = NULL, last_error = $3,
                               dead_at = now(), next_attempt_at = 'infinity'
             WHERE id = $1 AND ",
            token!(),
            " = $2"
        ),
        &[Kind::Int8, Kind::Int8, Kind::Text],
    );
    const RETRY: Statement = Statement::new(
        concat!(
            "UPDATE outbox SET attempts = attempts + 1, claimed_until = NULL, last_error = $4,
                               next_attempt_at = now() + $3 * interval '1 second'
             WHERE id = $1 AND ",
            token!(),
            " = $2"
        ),
        &[Kind::Int8, Kind::Int8, Kind::Float8, Kind::Text],
    );
    let (id, claim) = (&item.id, &item.claim.0);
    let changed = match delivery {
        Delivery::Sent => SENT.execute(client, &[id, claim]).await?,
        Delivery::Refused(error) => DEAD.execute(client, &[id, claim, &error]).await?,
        Delivery::Retry(retry_in, error) => {
            RETRY
                .execute(client, &[id, claim, &retry_in.as_secs_f64(), &error])
                .await?
        }
    };
    Ok(changed == 1)
}

/// How many messages wait to be sent.
pub(super) async fn waiting(client: &impl Exec) -> Result<u64> {
    const WAITING: Statement = Statement::new(
        "SELECT count(*) FROM outbox WHERE sent_at IS NULL AND dead_at IS NULL",
        &[],
    );
    count(client, &WAITING).await
}

/// How many messages the receiver refused for good.
pub(super) async fn dead(client: &impl Exec) -> Result<u64> {
    const DEAD: Statement =
        Statement::new("SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL", &[]);
    count(client, &DEAD).await
}

async fn count(client: &impl Exec, sql: &Statement) -> Result<u64> {
    let row = sql.query_one(client, &[]).await?;
    Ok(row.get::<_, i64>(0).unsigned_abs())
}

/// Deletes at most `limit` messages sent longer than `retention` ago.
pub(super) async fn prune_sent(client: &impl Exec, retention: Duration, limit: u32) -> Result<u64> {
    const PRUNE: Statement = Statement::new(
        "DELETE FROM outbox WHERE id IN (
           SELECT id FROM outbox
           WHERE sent_at IS NOT NULL AND sent_at <= now() - $1 * interval '1 second'
           ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)",
        &[Kind::Float8, Kind::Int8],
    );
    PRUNE
        .execute(client, &[&retention.as_secs_f64(), &i64::from(limit)])
        .await
}
