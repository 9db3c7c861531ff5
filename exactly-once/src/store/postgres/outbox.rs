//! The outbox in SQL: a message written with an operation's phase, claimed
//! by one relay at a time, then marked sent or failed. On PostgreSQL a
//! claim takes due rows with `FOR UPDATE SKIP LOCKED`; on Citus, where the
//! outbox is sharded by caller and that lock is refused across shards, a
//! lock-free listing finds due rows and each is claimed by a statement of
//! its own on its shard, which checks again under the row's lock that it
//! is still due and unclaimed (docs/CITUS.md).

use super::statement::{Exec, Statement};
use super::value::{Kind, Row};
#[cfg(feature = "postgres")]
use crate::backend::{BoxFuture, RunContext};
#[cfg(feature = "postgres")]
use crate::store::enqueue::Enqueue;
use crate::store::Message;
use crate::store::{ClaimToken, Delivery, OutboxItem, Result};
use futures_util::future::try_join_all;
use std::time::Duration;

#[cfg(feature = "postgres")]
impl crate::store::enqueue::sealed::Sealed for &deadpool_postgres::Transaction<'_> {}

/// tokio-postgres': a future, in the operation's transaction.
#[cfg(feature = "postgres")]
impl<'a> Enqueue<'a> for &'a deadpool_postgres::Transaction<'_> {
    type Written = BoxFuture<'a, Result<()>>;

    fn enqueue(self, message: &'a Message, at: &RunContext<'_>) -> Self::Written {
        let caller = at.caller.as_bytes().to_vec();
        Box::pin(async move { enqueue_on(self, message, &caller).await })
    }
}

/// A message written on any driver's transaction, under the caller whose
/// operation writes it. Written once: a second write of its id is nothing
/// (whichever unique constraint says so: the id's on PostgreSQL, the
/// caller's and the id's on Citus).
pub(super) async fn enqueue_on(tx: &impl Exec, message: &Message, caller: &[u8]) -> Result<()> {
    const ENQUEUE: Statement = Statement::new(
        "INSERT INTO outbox (caller, message_id, recipient, subject, body, next_attempt_at)
         VALUES ($1, $2, $3, $4, $5, now()) ON CONFLICT DO NOTHING",
        &[Kind::Bytea, Kind::Text, Kind::Text, Kind::Text, Kind::Text],
    );
    ENQUEUE
        .execute(
            tx,
            &[
                &caller,
                &message.id,
                &message.to,
                &message.subject,
                &message.body,
            ],
        )
        .await?;
    Ok(())
}

/// The claim's deadline in microseconds, the claim's token: the same
/// expression where a claim returns it and where a settle compares it.
/// Measured from the epoch by subtraction, which is immutable (`extract`
/// of a `timestamptz` is not): Citus refuses a function that is not in a
/// `RETURNING`, and the outbox is a Citus table there (docs/CITUS.md).
macro_rules! token {
    () => {
        "(extract(epoch FROM claimed_until - 'epoch'::timestamptz) * 1000000)::int8"
    };
}

/// What a claim returns of each row, in [`item`]'s order.
macro_rules! claimed {
    () => {
        concat!(
            "RETURNING id, attempts, message_id, recipient, subject, body, ",
            token!(),
            ", caller"
        )
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
    on_citus: bool,
) -> Result<Vec<OutboxItem>> {
    if on_citus {
        return claim_each(client, limit, claim).await;
    }
    const CLAIM: Statement = Statement::new(
        concat!(
            "UPDATE outbox SET claimed_until = now() + $2 * interval '1 second'
             WHERE id IN (SELECT id FROM outbox
                          WHERE sent_at IS NULL AND next_attempt_at <= now()
                            AND dead_at IS NULL
                            AND (claimed_until IS NULL OR claimed_until <= now())
                          ORDER BY next_attempt_at LIMIT $1
                          FOR UPDATE SKIP LOCKED) ",
            claimed!()
        ),
        &[Kind::Int8, Kind::Float8],
    );
    let rows = CLAIM
        .query(client, &[&i64::from(limit), &claim.as_secs_f64()])
        .await?;
    Ok(rows.iter().map(item).collect())
}

/// [`claim`] on Citus: the due rows listed without locks (over every
/// shard), then each claimed on its shard only if, under its lock, it is
/// still due and unclaimed. Two relays that list one row both try; one
/// claims it, the other's statement finds it claimed and changes nothing.
async fn claim_each(client: &impl Exec, limit: u32, claim: Duration) -> Result<Vec<OutboxItem>> {
    const DUE: Statement = Statement::new(
        "SELECT caller, id FROM outbox
         WHERE sent_at IS NULL AND next_attempt_at <= now() AND dead_at IS NULL
           AND (claimed_until IS NULL OR claimed_until <= now())
         ORDER BY next_attempt_at LIMIT $1",
        &[Kind::Int8],
    );
    const CLAIM_ONE: Statement = Statement::new(
        concat!(
            "UPDATE outbox SET claimed_until = now() + $3 * interval '1 second'
             WHERE caller = $1 AND id = $2
               AND sent_at IS NULL AND next_attempt_at <= now() AND dead_at IS NULL
               AND (claimed_until IS NULL OR claimed_until <= now()) ",
            claimed!()
        ),
        &[Kind::Bytea, Kind::Int8, Kind::Float8],
    );
    let due = DUE.query(client, &[&i64::from(limit)]).await?;
    let due: Vec<(&[u8], i64)> = due.iter().map(|row| (row.get(0), row.get(1))).collect();
    let seconds = claim.as_secs_f64();
    // Sent together: the connection pipelines them, one wait for the lot.
    let claims = due.iter().map(|(caller, id)| async move {
        CLAIM_ONE.query_opt(client, &[caller, id, &seconds]).await
    });
    Ok(try_join_all(claims)
        .await?
        .iter()
        .flatten()
        .map(item)
        .collect())
}

/// An outbox row as a claim returns it ([`claimed`]).
fn item(row: &Row) -> OutboxItem {
    OutboxItem {
        id: row.get(0),
        caller: row.get(7),
        attempts: row.get::<_, i32>(1).unsigned_abs(),
        claim: ClaimToken(row.get(6)),
        message: Message {
            id: row.get(2),
            to: row.get(3),
            subject: row.get(4),
            body: row.get(5),
        },
    }
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
            "UPDATE outbox SET sent_at = now(), claimed_until = NULL
             WHERE caller = $3 AND id = $1 AND ",
            token!(),
            " = $2"
        ),
        &[Kind::Int8, Kind::Int8, Kind::Bytea],
    );
    // Last in the schedule, so the relay's claims never scan it.
    const DEAD: Statement = Statement::new(
        concat!(
            "UPDATE outbox SET attempts = attempts + 1, claimed_until = NULL, last_error = $3,
                               dead_at = now(), next_attempt_at = 'infinity'
             WHERE caller = $4 AND id = $1 AND ",
            token!(),
            " = $2"
        ),
        &[Kind::Int8, Kind::Int8, Kind::Text, Kind::Bytea],
    );
    const RETRY: Statement = Statement::new(
        concat!(
            "UPDATE outbox SET attempts = attempts + 1, claimed_until = NULL, last_error = $4,
                               next_attempt_at = now() + $3 * interval '1 second'
             WHERE caller = $5 AND id = $1 AND ",
            token!(),
            " = $2"
        ),
        &[
            Kind::Int8,
            Kind::Int8,
            Kind::Float8,
            Kind::Text,
            Kind::Bytea,
        ],
    );
    let (id, claim, caller) = (&item.id, &item.claim.0, &item.caller.as_slice());
    let changed = match delivery {
        Delivery::Sent => SENT.execute(client, &[id, claim, caller]).await?,
        Delivery::Refused(error) => DEAD.execute(client, &[id, claim, &error, caller]).await?,
        Delivery::Retry(retry_in, error) => {
            let retry_in = retry_in.as_secs_f64();
            RETRY
                .execute(client, &[id, claim, &retry_in, &error, caller])
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

/// Deletes at most `limit` messages sent longer than `retention` ago. On
/// Citus, which refuses the lock across shards, the listing takes no lock
/// and each row is deleted on its shard (a row deleted twice is nothing).
pub(super) async fn prune_sent(
    client: &impl Exec,
    retention: Duration,
    limit: u32,
    on_citus: bool,
) -> Result<u64> {
    const PRUNE: Statement = Statement::new(
        "DELETE FROM outbox WHERE id IN (
           SELECT id FROM outbox
           WHERE sent_at IS NOT NULL AND sent_at <= now() - $1 * interval '1 second'
           ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)",
        &[Kind::Float8, Kind::Int8],
    );
    const OLD: Statement = Statement::new(
        "SELECT caller, id FROM outbox
         WHERE sent_at IS NOT NULL AND sent_at <= now() - $1 * interval '1 second'
         ORDER BY id LIMIT $2",
        &[Kind::Float8, Kind::Int8],
    );
    const PRUNE_ONE: Statement = Statement::new(
        "DELETE FROM outbox WHERE caller = $1 AND id = $2 AND sent_at IS NOT NULL",
        &[Kind::Bytea, Kind::Int8],
    );
    let (retention, limit) = (retention.as_secs_f64(), i64::from(limit));
    if !on_citus {
        return PRUNE.execute(client, &[&retention, &limit]).await;
    }
    let old = OLD.query(client, &[&retention, &limit]).await?;
    let old: Vec<(&[u8], i64)> = old.iter().map(|row| (row.get(0), row.get(1))).collect();
    let prune = old
        .iter()
        .map(|(caller, id)| async move { PRUNE_ONE.execute(client, &[caller, id]).await });
    Ok(try_join_all(prune).await?.into_iter().sum())
}
