//! The keyed protocol in SQL: claim the key (waiting for a transaction
//! that holds it) and run the first phase, or find the key's record and
//! decide; later phases under a lease; taking an abandoned operation over.
//! Every expiry and lease is the database's `now()`.

use super::clock::Clock;
use super::error::in_use_or;
use super::statement::{Driver, Exec, Statement};
use super::value::{Kind, Row};
use crate::backend::RunContext;
use crate::record::{Lease, PhaseEnd, Record, StoredResponse, EXPIRED, FINISHED};
use crate::store::Result;
use crate::store::{
    Execution, FirstPhase, IdempotentRequest, LiveRecord, StoreError, TransactionEnd,
};
use crate::{Caller, Fingerprint, IdempotencyKey};
use std::time::Duration;

/// The claim: a new record of the key, or the next generation over a
/// finished, expired record (or its tombstone), which count as absent.
/// Another transaction holding the key makes it wait for its outcome.
const CLAIM: Statement = Statement::new(
    "INSERT INTO idempotency_keys
                   (caller, key, fingerprint, recovery_point, created_at, expires_at)
                 VALUES ($1, $2, $3, 'claimed', now(), now() + $4 * interval '1 second')
                 ON CONFLICT (caller, key) DO UPDATE
                   SET fingerprint = EXCLUDED.fingerprint, recovery_point = 'claimed',
                       state = NULL, lease_token = NULL, leased_until = NULL, status = NULL,
                       headers = NULL, body = NULL, created_at = EXCLUDED.created_at,
                       expires_at = EXCLUDED.expires_at, attempts = 0, last_error = NULL,
                       attention = NULL, generation = idempotency_keys.generation + 1
                   WHERE (idempotency_keys.recovery_point = 'finished'
                          AND idempotency_keys.expires_at <= EXCLUDED.created_at)
                      OR idempotency_keys.recovery_point = 'expired'
                 RETURNING generation",
    &[Kind::Bytea, Kind::Text, Kind::Bytea, Kind::Float8],
);

/// Whether an execution is rolled back instead of committed: the
/// operation ran and its phase asked for it (chaos), or it stopped past its
/// caller's cap of unfinished operations.
pub(super) fn rolls_back(execution: &Execution, end: TransactionEnd) -> bool {
    matches!(execution, Execution::TooManyUnfinished(_))
        || end == TransactionEnd::RollBack
            && matches!(execution, Execution::Ran(_) | Execution::Stopped(_))
}

/// [`execute`] inside `tx`, whichever the driver, which the caller commits
/// (or rolls back: [`rolls_back`]; after [`Execution::InUse`] the
/// transaction has failed, and only rolls back).
pub(super) async fn execute_in<D: Driver>(
    tx: &D::Tx<'_>,
    phase: &FirstPhase<D>,
    clock: Clock,
) -> Result<Execution> {
    let (request, operation) = (&phase.request, phase.operation.as_ref());
    let (ttl_secs, lease_secs, now_ms) = (clock.ttl_secs, clock.lease_secs, clock.now_ms);
    let key = request.key.as_ref();
    // A finished, expired record (or its tombstone) counts as absent: the
    // claim replaces it, as the key's next generation.
    let claimed = CLAIM
        .rows(
            tx,
            &[
                &request.caller,
                &key,
                &&request.fingerprint.as_bytes()[..],
                &ttl_secs,
            ],
        )
        .await
        .map(|rows| rows.into_iter().next());
    let generation = match in_use_or(claimed)? {
        None => return Ok(Execution::InUse),
        Some(claimed) => claimed.map(|row| row.get::<_, i64>(0).unsigned_abs()),
    };
    let Some(generation) = generation else {
        // The key's record is live: its transaction committed (the claim
        // waited for it), so read it and decide.
        return decide(tx, request, clock).await;
    };

    let context = RunContext {
        caller: &request.caller,
        key: &request.key,
        now_ms,
        store_ms: now_ms,
        fingerprint: &request.fingerprint,
        generation,
    };
    let step = D::run(operation, tx, &context).await?;
    Ok(match step {
        PhaseEnd::Finished(response) => {
            record_response(tx, &request.caller, &request.key, &response, ttl_secs).await?;
            Execution::Ran(response)
        }
        PhaseEnd::Stopped { point, state } => {
            let token = Lease::new_token();
            STOP_FIRST
                .execute(
                    tx,
                    &[
                        &request.caller,
                        &key,
                        &point.as_str(),
                        &state,
                        &&token[..],
                        &lease_secs,
                    ],
                )
                .await?;
            if let Some(cap) = phase.max_unfinished {
                if over_unfinished_cap(tx, &request.caller, cap).await? {
                    return Ok(Execution::TooManyUnfinished(cap));
                }
            }
            Execution::Stopped(Lease {
                caller: request.caller,
                key: request.key.clone(),
                token,
                point,
                state,
                fingerprint: request.fingerprint,
                generation,
            })
        }
    })
}

/// The class of the per-caller locks [`over_unfinished_cap`] takes (the
/// first key of PostgreSQL's two-key advisory locks).
const CALLER_LOCK: i32 = 0x1de3_9072;

/// A transaction lock on one caller's unfinished operations: the next
/// stop of that caller's counts after this transaction's is committed.
/// (Callers whose hashes share their first four bytes share it: they only
/// wait for each other.)
const LOCK_CALLER: Statement = Statement::new(
    "SELECT pg_advisory_xact_lock($1, $2)",
    &[Kind::Int4, Kind::Int4],
);

/// A caller's unfinished operations, at most `$2`, through the index of
/// them by caller.
const UNFINISHED_OF_CALLER: Statement = Statement::new(
    "SELECT count(*) FROM (SELECT 1 FROM idempotency_keys
       WHERE caller = $1 AND recovery_point NOT IN ('finished', 'expired', 'claimed')
       LIMIT $2) AS open",
    &[Kind::Bytea, Kind::Int8],
);

/// Whether `caller` has more than `cap` unfinished operations, counting
/// the one this transaction just stopped. Under the caller's lock, and
/// read by a statement that starts after it is granted (so it sees every
/// stop committed before), two instances' stops of one caller are counted
/// one after the other: the cap holds across instances.
async fn over_unfinished_cap(tx: &impl Exec, caller: &Caller, cap: u32) -> Result<bool> {
    let bytes = caller.as_bytes();
    let key = i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    LOCK_CALLER.execute(tx, &[&CALLER_LOCK, &key]).await?;
    let row = UNFINISHED_OF_CALLER
        .query_one(tx, &[caller, &(i64::from(cap) + 1)])
        .await?;
    Ok(row.get::<_, i64>(0) > i64::from(cap))
}

/// The first phase stopped at a recovery point, under a new lease.
const STOP_FIRST: Statement = Statement::new(
    "UPDATE idempotency_keys SET recovery_point = $3, state = $4, lease_token = $5,
            leased_until = now() + $6 * interval '1 second'
     WHERE caller = $1 AND key = $2",
    &[
        Kind::Bytea,
        Kind::Text,
        Kind::Text,
        Kind::Text,
        Kind::Bytea,
        Kind::Float8,
    ],
);

/// A key's record as [`decide`] reads it: the columns [`record`] reads
/// (fingerprint, status, headers, body), then where it stands.
const READ: Statement = Statement::new(
    "SELECT fingerprint, status, headers, body, recovery_point,
            coalesce(leased_until > now(), false),
            greatest(extract(epoch FROM expires_at - now()), 0)::float8, attention
     FROM idempotency_keys WHERE caller = $1 AND key = $2",
    &[Kind::Bytea, Kind::Text],
);

/// A live record of the key: finished (replay or refuse), or stopped at a
/// recovery point (refuse another request, wait for the lease's holder,
/// or take an abandoned operation over).
pub(super) async fn decide(
    tx: &impl Exec,
    request: &IdempotentRequest,
    clock: Clock,
) -> Result<Execution> {
    let row = READ
        .query_one(tx, &[&request.caller, &request.key.as_ref()])
        .await?;
    let existing = record(&row)?;
    if !is_recovery_point(row.get(4)) {
        return Ok(Execution::Found(LiveRecord {
            record: existing,
            life: Duration::from_secs_f64(row.get(6)),
        }));
    }
    if existing.fingerprint != request.fingerprint {
        return Ok(Execution::Mismatch);
    }
    if let Some(reason) = row.get::<_, Option<String>>(7) {
        return Ok(Execution::NeedsAttention(reason));
    }
    if row.get::<_, bool>(5) {
        return Ok(Execution::InUse);
    }
    // Abandoned: take it over, unless another request or the completer
    // took it since the read above: the update sees the latest row, and a
    // lease taken since runs past this transaction's `now()`. (Each phase
    // also checks its token, so even a second holder could not finish.)
    Ok(
        match take_over(tx, &request.caller, &request.key, clock.lease_secs).await? {
            Some(lease) => Execution::Resumed(lease),
            None => Execution::InUse,
        },
    )
}

/// Records the answer; the record lives `ttl_secs` from now, the moment
/// its answer is recorded (an operation the completer finishes after an
/// outage longer than the TTL is not born expired).
pub(super) async fn record_response(
    tx: &impl Exec,
    caller: &Caller,
    key: &IdempotencyKey,
    response: &StoredResponse,
    ttl_secs: f64,
) -> Result<()> {
    RECORD_RESPONSE
        .execute(
            tx,
            &[
                &caller,
                &key.as_ref(),
                &(response.status as i16),
                &response.encoded_headers(),
                &&response.body[..],
                &ttl_secs,
            ],
        )
        .await?;
    Ok(())
}

const RECORD_RESPONSE: Statement = Statement::new(
    "UPDATE idempotency_keys
     SET recovery_point = 'finished', state = NULL, lease_token = NULL, leased_until = NULL,
         status = $3, headers = $4, body = $5,
         expires_at = now() + $6 * interval '1 second'
     WHERE caller = $1 AND key = $2",
    &[
        Kind::Bytea,
        Kind::Text,
        Kind::Int2,
        Kind::Text,
        Kind::Bytea,
        Kind::Float8,
    ],
);

const TAKE_OVER: Statement = Statement::new(
    "UPDATE idempotency_keys
     SET lease_token = $3, leased_until = now() + $4 * interval '1 second'
     WHERE caller = $1 AND key = $2
       AND recovery_point NOT IN ('finished', 'expired', 'claimed')
       AND leased_until <= now() AND attention IS NULL
     RETURNING recovery_point, state, fingerprint, generation",
    &[Kind::Bytea, Kind::Text, Kind::Bytea, Kind::Float8],
);

/// Takes over the key's abandoned operation (its lease ran out).
pub(super) async fn take_over(
    client: &impl Exec,
    caller: &Caller,
    key: &IdempotencyKey,
    lease_secs: f64,
) -> Result<Option<Lease>> {
    let token = Lease::new_token();
    let rows = TAKE_OVER
        .rows(client, &[&caller, &key.as_ref(), &&token[..], &lease_secs])
        .await;
    let Some(row) = in_use_or(rows)?.and_then(|rows| rows.into_iter().next()) else {
        return Ok(None);
    };
    Ok(Some(Lease {
        caller: *caller,
        key: key.clone(),
        token,
        point: row.get(0),
        state: row.get::<_, Option<String>>(1).unwrap_or_default(),
        fingerprint: fingerprint(row.get(2))?,
        generation: row.get::<_, i64>(3).unsigned_abs(),
    }))
}

/// Whether a stored `recovery_point` is where an unfinished operation
/// stopped: neither `finished`, nor a tombstone (`expired`), nor the
/// one-statement claim's own `claimed` (which no other transaction ever
/// sees, as the statement commits whole).
pub(super) fn is_recovery_point(stored: &str) -> bool {
    stored != FINISHED && stored != EXPIRED && stored != "claimed"
}

/// A fingerprint as stored.
pub(super) fn fingerprint(stored: &[u8]) -> Result<Fingerprint> {
    stored
        .try_into()
        .map(Fingerprint::from_bytes)
        .map_err(|_| StoreError::internal("a stored fingerprint is not 32 bytes"))
}

/// A record from a row whose first columns are fingerprint, status,
/// headers, body (the status is 0 for an unfinished record).
pub(super) fn record(row: &Row) -> Result<Record> {
    let status: Option<i16> = row.get(1);
    let body: Option<&[u8]> = row.get(3);
    Ok(Record {
        fingerprint: fingerprint(row.get(0))?,
        response: StoredResponse::from_stored(
            status.unwrap_or(0) as u16,
            row.get(2),
            bytes::Bytes::copy_from_slice(body.unwrap_or_default()),
        ),
    })
}
