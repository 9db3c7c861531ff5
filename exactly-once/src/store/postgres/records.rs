//! Reading records outside a phase (a lookup, the unfinished, those
//! needing attention, the abandoned) and sweeping the expired.

use super::clock::Clock;
use super::protocol::{fingerprint, record};
use super::statement::{Exec, Statement};
use super::value::Kind;
use crate::store::{stored_abandoned, Abandoned, LiveRecord, Result};
use crate::{Caller, Fingerprint, IdempotencyKey};
use std::time::Duration;

/// The sweeper's round: sent outbox messages older than `retention`, then
/// [`sweep_records`]. How many records expired.
pub(super) async fn sweep(
    client: &impl Exec,
    clock: Clock,
    limit: u32,
    retention: Duration,
    on_citus: bool,
) -> Result<u64> {
    super::outbox::prune_sent(client, retention, limit, on_citus).await?;
    if on_citus {
        return super::citus::sweep_records(client, limit, clock.tombstone_secs).await;
    }
    sweep_records(client, clock, limit).await
}

/// Turns at most `limit` finished records expired by now into tombstones
/// (the answer goes, the generation stays until the tombstone's own time),
/// and deletes as many tombstones whose time is up. How many expired.
async fn sweep_records(client: &impl Exec, clock: Clock, limit: u32) -> Result<u64> {
    const EXPIRE: Statement = Statement::new(
        "UPDATE idempotency_keys
         SET recovery_point = 'expired', status = NULL, headers = NULL, body = NULL,
             expires_at = expires_at + $2 * interval '1 second'
         WHERE ctid IN (
           SELECT ctid FROM idempotency_keys
           WHERE expires_at <= now() AND recovery_point = 'finished'
           ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
        &[Kind::Int8, Kind::Float8],
    );
    const FORGET: Statement = Statement::new(
        "DELETE FROM idempotency_keys WHERE ctid IN (
           SELECT ctid FROM idempotency_keys
           WHERE expires_at <= now() AND recovery_point = 'expired'
           ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
        &[Kind::Int8],
    );
    let expired = EXPIRE
        .execute(client, &[&i64::from(limit), &clock.tombstone_secs])
        .await?;
    FORGET.execute(client, &[&i64::from(limit)]).await?;
    Ok(expired)
}

/// A finished, unexpired record of the key, and its remaining life.
pub(super) async fn lookup(
    client: &impl Exec,
    caller: &Caller,
    key: &IdempotencyKey,
) -> Result<Option<LiveRecord>> {
    const LIVE: Statement = Statement::new(
        "SELECT fingerprint, status, headers, body,
                extract(epoch FROM expires_at - now())::float8
         FROM idempotency_keys
         WHERE caller = $1 AND key = $2 AND expires_at > now()
           AND recovery_point = 'finished'",
        &[Kind::Bytea, Kind::Text],
    );
    let row = LIVE.query_opt(client, &[caller, &key.as_ref()]).await?;
    row.map(|row| {
        Ok(LiveRecord {
            record: record(&row)?,
            life: Duration::from_secs_f64(row.get::<_, f64>(4).max(0.0)),
        })
    })
    .transpose()
}

/// The fingerprint of the key's operation while it is unfinished.
pub(super) async fn unfinished(
    client: &impl Exec,
    caller: &Caller,
    key: &IdempotencyKey,
) -> Result<Option<Fingerprint>> {
    const UNFINISHED: Statement = Statement::new(
        "SELECT fingerprint FROM idempotency_keys
         WHERE caller = $1 AND key = $2
           AND recovery_point NOT IN ('finished', 'claimed', 'expired')",
        &[Kind::Bytea, Kind::Text],
    );
    let row = UNFINISHED
        .query_opt(client, &[caller, &key.as_ref()])
        .await?;
    row.map(|row| fingerprint(row.get(0))).transpose()
}

/// How many operations are set aside for an operator: through the index
/// of unfinished records (a set-aside one is always unfinished), not a
/// scan of the table.
pub(super) async fn needing_attention(client: &impl Exec) -> Result<u64> {
    const COUNT: Statement = Statement::new(
        "SELECT count(*) FROM idempotency_keys
         WHERE recovery_point NOT IN ('finished', 'expired', 'claimed')
           AND attention IS NOT NULL",
        &[],
    );
    let row = COUNT.query_one(client, &[]).await?;
    Ok(row.get::<_, i64>(0).unsigned_abs())
}

/// Up to `limit` operations whose lease ran out, but those at a point in
/// `skip`.
pub(super) async fn abandoned(
    client: &impl Exec,
    limit: u32,
    skip: &[String],
) -> Result<Vec<Abandoned>> {
    const ABANDONED: Statement = Statement::new(
        "SELECT caller, key, recovery_point FROM idempotency_keys
         WHERE recovery_point <> 'finished' AND leased_until <= now()
           AND recovery_point <> ALL($2)
         ORDER BY leased_until LIMIT $1",
        &[Kind::Int8, Kind::TextArray],
    );
    let rows = ABANDONED.query(client, &[&i64::from(limit), &skip]).await?;
    Ok(stored_abandoned(rows.iter().map(|row| {
        (
            row.get::<_, &[u8]>(0),
            row.get::<_, &str>(1),
            row.get::<_, String>(2),
        )
    })))
}
