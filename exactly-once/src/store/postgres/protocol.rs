//! The keyed protocol in SQL: claim the key (waiting for a transaction
//! that holds it) and run the first phase, or find the key's record and
//! decide; later phases under a lease; taking an abandoned operation over.
//! Every expiry and lease is the database's `now()`.

use super::conn::{Conn, DbError, Driver, PgRow};
use super::session::Session;
use super::sql::Sql;
use super::Postgres;
use super::{classify, LOCK_TIMEOUT};
use crate::backend::{Operation, RunContext};
use crate::caller::Caller;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::record::{Lease, PhaseEnd, Record, StoredResponse, EXPIRED, FINISHED};
use crate::store::Result;
use crate::store::{
    stored_abandoned, Abandoned, Advanced, AfterFailure, Execution, FirstPhase, IdempotentRequest,
    LiveRecord, StoreError, TimeLimits, TransactionEnd,
};
use deadpool_postgres::Transaction;
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

/// The times one call works with: the process's clock only for the
/// `created` seconds of new rows; every expiry and lease is the database's.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    /// Unix milliseconds, this process's clock.
    pub(super) now_ms: i64,
    /// `--key-ttl`, seconds.
    pub(super) ttl_secs: f64,
    /// `--operation-lease`, seconds.
    pub(super) lease_secs: f64,
    /// How long after its start a failing operation is set aside, seconds.
    pub(super) attention_after_secs: f64,
    /// How long a tombstone is kept, seconds.
    pub(super) tombstone_secs: f64,
    /// Where the transactions' settings come from.
    pub(super) session: Session,
}

impl Clock {
    /// The clock of a phase of an operation with its own TTL (`key_ttl`),
    /// when it has one: its records live that long.
    pub(super) fn for_operation(mut self, key_ttl: Option<Duration>) -> Self {
        if let Some(ttl) = key_ttl {
            self.ttl_secs = ttl.as_secs_f64();
        }
        self
    }

    /// A call's clock with the store's lifetimes and session.
    pub(super) fn new(now_ms: i64, lifetimes: &TimeLimits, session: Session) -> Self {
        Self {
            now_ms,
            ttl_secs: lifetimes.key_ttl.as_secs_f64(),
            lease_secs: lifetimes.lease.as_secs_f64(),
            attention_after_secs: lifetimes.attention_after.as_secs_f64(),
            tombstone_secs: lifetimes.tombstone_ttl.as_secs_f64(),
            session,
        }
    }
}

/// Opens a transaction with the engine's settings: behind a pooler it sets
/// them itself (`SET LOCAL`), elsewhere the connection's session has them.
pub(super) async fn begin(
    client: &mut deadpool_postgres::Object,
    clock: Clock,
) -> Result<Transaction<'_>> {
    let tx = client.transaction().await.map_err(classify)?;
    if let Some(settings) = clock.session.per_transaction(LOCK_TIMEOUT) {
        tx.batch(&settings).await.map_err(classify)?;
    }
    Ok(tx)
}

/// The claim: a new record of the key, or the next generation over a
/// finished, expired record (or its tombstone), which count as absent.
/// Another transaction holding the key makes it wait for its outcome.
/// Expiry is judged against `EXCLUDED.created_at` (the transaction's
/// `now()`), not `now()` itself: Citus refuses a function that is not
/// immutable in an `ON CONFLICT` clause's `WHERE`.
const CLAIM: Sql = Sql::new(
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
    &[Type::BYTEA, Type::TEXT, Type::BYTEA, Type::FLOAT8],
);

/// Claims the key (waiting for a transaction that holds it) and runs the
/// operation's first phase, or finds the key's record and decides; commits
/// (or, as the phase asks, rolls back).
pub(super) async fn execute(
    client: &mut deadpool_postgres::Object,
    phase: &FirstPhase<Postgres>,
    clock: Clock,
) -> Result<Execution> {
    let tx = begin(client, clock).await?;
    match execute_in::<Postgres>(&tx, phase, clock).await? {
        Execution::InUse => Ok(Execution::InUse),
        execution if rolls_back(&execution, phase.end) => {
            tx.rollback().await.map_err(classify)?;
            Ok(execution.rolled_back())
        }
        execution => {
            commit(tx).await?;
            Ok(execution)
        }
    }
}

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
const LOCK_CALLER: Sql = Sql::new(
    "SELECT pg_advisory_xact_lock($1, $2)",
    &[Type::INT4, Type::INT4],
);

/// A caller's unfinished operations, at most `$2`, through the index of
/// them by caller.
const UNFINISHED_OF_CALLER: Sql = Sql::new(
    "SELECT count(*) FROM (SELECT 1 FROM idempotency_keys
       WHERE caller = $1 AND recovery_point NOT IN ('finished', 'expired', 'claimed')
       LIMIT $2) AS open",
    &[Type::BYTEA, Type::INT8],
);

/// Whether `caller` has more than `cap` unfinished operations, counting
/// the one this transaction just stopped. Under the caller's lock, and
/// read by a statement that starts after it is granted (so it sees every
/// stop committed before), two instances' stops of one caller are counted
/// one after the other: the cap holds across instances.
async fn over_unfinished_cap(tx: &impl Conn, caller: &Caller, cap: u32) -> Result<bool> {
    let bytes = caller.as_bytes();
    let key = i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    LOCK_CALLER.execute(tx, &[&CALLER_LOCK, &key]).await?;
    let row = UNFINISHED_OF_CALLER
        .query_one(tx, &[caller, &(i64::from(cap) + 1)])
        .await?;
    Ok(row.get::<_, i64>(0) > i64::from(cap))
}

/// The first phase stopped at a recovery point, under a new lease.
const STOP_FIRST: Sql = Sql::new(
    "UPDATE idempotency_keys SET recovery_point = $3, state = $4, lease_token = $5,
            leased_until = now() + $6 * interval '1 second'
     WHERE caller = $1 AND key = $2",
    &[
        Type::BYTEA,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::BYTEA,
        Type::FLOAT8,
    ],
);

/// A key's record as [`decide`] reads it: the columns [`record`] reads
/// (fingerprint, status, headers, body), then where it stands.
const READ: Sql = Sql::new(
    "SELECT fingerprint, status, headers, body, recovery_point,
            coalesce(leased_until > now(), false),
            greatest(extract(epoch FROM expires_at - now()), 0)::float8, attention
     FROM idempotency_keys WHERE caller = $1 AND key = $2",
    &[Type::BYTEA, Type::TEXT],
);

/// A live record of the key: finished (replay or refuse), or stopped at a
/// recovery point (refuse another request, wait for the lease's holder,
/// or take an abandoned operation over).
pub(super) async fn decide(
    tx: &impl Conn,
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

/// Commits. A commit that fails by losing its backend leaves its outcome
/// unknown: it may have committed. That is never answered as "nothing was
/// done" ([`StoreErrorKind::OutcomeUnknown`](crate::store::StoreErrorKind::OutcomeUnknown)): the retry learns which.
pub(super) async fn commit(tx: Transaction<'_>) -> Result<()> {
    tx.commit().await.map_err(|e| classify_commit(e, "COMMIT"))
}

/// Sorts an error of a statement that commits (`COMMIT`, or a statement
/// that commits on its own, `what`). When the backend was lost (no
/// SQLSTATE: the connection broke; class 08, connection exception; class
/// 57, operator intervention), the commit may have happened: a backend
/// killed while its COMMIT waits for a synchronous standby has committed
/// locally and answers 57P01. That is outcome unknown. Any other error is
/// the server's refusal, and nothing was committed.
pub(super) fn classify_commit(e: impl Into<DbError>, what: &str) -> StoreError {
    let e = e.into();
    if backend_lost(&e) {
        StoreError::outcome_unknown(format!("the database backend was lost during {what}"))
            .caused_by(e)
    } else {
        classify(e)
    }
}

/// True when `e` says the statement's backend was lost (see
/// [`classify_commit`]).
pub(super) fn backend_lost(e: &DbError) -> bool {
    match e {
        DbError::Tokio(e) => tokio_backend_lost(e),
        _ => match e.code() {
            None => e.connection_lost(),
            Some(state) => matches!(&state.code()[..2], "08" | "57"),
        },
    }
}

/// [`backend_lost`] of a tokio-postgres error.
pub(super) fn tokio_backend_lost(e: &tokio_postgres::Error) -> bool {
    e.code()
        .is_none_or(|state| matches!(&state.code()[..2], "08" | "57"))
}

/// `None` when the statement gave up waiting for a lock another
/// transaction holds (`lock_timeout`): the key is in use.
pub(super) fn in_use_or<T>(result: Result<T, DbError>) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.code() == Some(SqlState::LOCK_NOT_AVAILABLE) => Ok(None),
        Err(e) => Err(classify(e)),
    }
}

/// Records the answer; the record lives `ttl_secs` from now, the moment
/// its answer is recorded (an operation the completer finishes after an
/// outage longer than the TTL is not born expired).
async fn record_response(
    tx: &impl Conn,
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

const RECORD_RESPONSE: Sql = Sql::new(
    "UPDATE idempotency_keys
     SET recovery_point = 'finished', state = NULL, lease_token = NULL, leased_until = NULL,
         status = $3, headers = $4, body = $5,
         expires_at = now() + $6 * interval '1 second'
     WHERE caller = $1 AND key = $2",
    &[
        Type::BYTEA,
        Type::TEXT,
        Type::INT2,
        Type::TEXT,
        Type::BYTEA,
        Type::FLOAT8,
    ],
);

/// The lease's record, locked until the transaction ends, if the lease is
/// still its holder's.
const HOLD: Sql = Sql::new(
    "SELECT 1 FROM idempotency_keys
     WHERE caller = $1 AND key = $2 AND lease_token = $3 AND recovery_point <> 'finished'
     FOR UPDATE",
    &[Type::BYTEA, Type::TEXT, Type::BYTEA],
);

/// A later phase stopped at the next recovery point; the lease goes on.
const STOP_LATER: Sql = Sql::new(
    "UPDATE idempotency_keys SET recovery_point = $3, state = $4,
            leased_until = now() + $5 * interval '1 second'
     WHERE caller = $1 AND key = $2",
    &[
        Type::BYTEA,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::FLOAT8,
    ],
);

/// The next phase of the lease's operation, if the lease is still its
/// holder's (the row stays locked until the commit, so nobody takes it
/// over meanwhile); records how the phase ended.
pub(super) async fn advance(
    tx: Transaction<'_>,
    lease: &Lease,
    phase: &dyn Operation<Postgres>,
    clock: Clock,
) -> Result<Advanced> {
    let advanced = advance_in::<Postgres>(&tx, lease, phase, clock).await?;
    if !matches!(advanced, Advanced::LeaseLost) {
        commit(tx).await?;
    }
    Ok(advanced)
}

/// [`advance`] inside `tx`, whichever the driver, which the caller commits.
pub(super) async fn advance_in<D: Driver>(
    tx: &D::Tx<'_>,
    lease: &Lease,
    phase: &dyn Operation<D>,
    clock: Clock,
) -> Result<Advanced> {
    let (lease_secs, now_ms) = (clock.lease_secs, clock.now_ms);
    let held = HOLD
        .rows(tx, &[&lease.caller, &lease.key.as_ref(), &&lease.token[..]])
        .await;
    match in_use_or(held)? {
        Some(rows) if !rows.is_empty() => {}
        _ => return Ok(Advanced::LeaseLost),
    }
    let context = RunContext {
        caller: &lease.caller,
        key: &lease.key,
        now_ms,
        store_ms: now_ms,
        fingerprint: &lease.fingerprint,
        generation: lease.generation,
    };
    let advanced = match D::run(phase, tx, &context).await? {
        PhaseEnd::Finished(response) => {
            record_response(tx, &lease.caller, &lease.key, &response, clock.ttl_secs).await?;
            Advanced::Finished(response)
        }
        PhaseEnd::Stopped { point, state } => {
            STOP_LATER
                .execute(
                    tx,
                    &[
                        &lease.caller,
                        &lease.key.as_ref(),
                        &point.as_str(),
                        &state,
                        &lease_secs,
                    ],
                )
                .await?;
            Advanced::Stopped(Lease {
                point,
                state,
                ..lease.clone()
            })
        }
    };
    Ok(advanced)
}

const TAKE_OVER: Sql = Sql::new(
    "UPDATE idempotency_keys
     SET lease_token = $3, leased_until = now() + $4 * interval '1 second'
     WHERE caller = $1 AND key = $2
       AND recovery_point NOT IN ('finished', 'expired', 'claimed')
       AND leased_until <= now() AND attention IS NULL
     RETURNING recovery_point, state, fingerprint, generation",
    &[Type::BYTEA, Type::TEXT, Type::BYTEA, Type::FLOAT8],
);

/// Takes over the key's abandoned operation (its lease ran out).
pub(super) async fn take_over(
    client: &impl Conn,
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

/// Extends the lease by its whole length from now, if it is still the
/// holder's.
pub(super) async fn renew(client: &impl Conn, lease: &Lease, lease_secs: f64) -> Result<bool> {
    const RENEW: Sql = Sql::new(
        "UPDATE idempotency_keys SET leased_until = now() + $4 * interval '1 second'
         WHERE caller = $1 AND key = $2 AND lease_token = $3 AND recovery_point <> 'finished'",
        &[Type::BYTEA, Type::TEXT, Type::BYTEA, Type::FLOAT8],
    );
    let changed = RENEW
        .execute(
            client,
            &[
                &lease.caller,
                &lease.key.as_ref(),
                &&lease.token[..],
                &lease_secs,
            ],
        )
        .await?;
    Ok(changed == 1)
}

/// Counts a failed step and gives the lease up, or sets the operation
/// aside when it has been unfinished longer than `attention_after`: one
/// statement, judged by the database's clock.
pub(super) async fn step_failed(
    client: &impl Conn,
    lease: &Lease,
    error: &str,
    clock: Clock,
) -> Result<AfterFailure> {
    const FAILED: Sql = Sql::new(
        "UPDATE idempotency_keys SET
                   attempts = attempts + 1, last_error = $4,
                   attention = CASE WHEN created_at <= now() - $5 * interval '1 second'
                     THEN 'unfinished ' || justify_interval(date_trunc('second', now() - created_at))
                          || ' after its start; last error: ' || $4 END,
                   lease_token = CASE WHEN created_at <= now() - $5 * interval '1 second'
                     THEN NULL ELSE lease_token END,
                   leased_until = CASE WHEN created_at <= now() - $5 * interval '1 second'
                     THEN NULL ELSE now() END
                 WHERE caller = $1 AND key = $2 AND lease_token = $3
                   AND recovery_point <> 'finished'
                 RETURNING attention IS NOT NULL",
        &[Type::BYTEA, Type::TEXT, Type::BYTEA, Type::TEXT, Type::FLOAT8],
    );
    if super::citus::present(client).await? {
        let after = super::citus::step_failed(client, lease, error, clock.attention_after_secs);
        return Ok(match after.await? {
            None => AfterFailure::NotHeld,
            Some(true) => AfterFailure::SetAside,
            Some(false) => AfterFailure::Released,
        });
    }
    let row = FAILED
        .query_opt(
            client,
            &[
                &lease.caller,
                &lease.key.as_ref(),
                &&lease.token[..],
                &error,
                &clock.attention_after_secs,
            ],
        )
        .await?;
    Ok(match row {
        None => AfterFailure::NotHeld,
        Some(row) if row.get::<_, bool>(0) => AfterFailure::SetAside,
        Some(_) => AfterFailure::Released,
    })
}

/// Gives the lease up now, counting nothing.
pub(super) async fn release(client: &impl Conn, lease: &Lease) -> Result<bool> {
    const RELEASE: Sql = Sql::new(
        "UPDATE idempotency_keys SET leased_until = now()
         WHERE caller = $1 AND key = $2 AND lease_token = $3 AND recovery_point <> 'finished'",
        &[Type::BYTEA, Type::TEXT, Type::BYTEA],
    );
    let changed = RELEASE
        .execute(
            client,
            &[&lease.caller, &lease.key.as_ref(), &&lease.token[..]],
        )
        .await?;
    Ok(changed == 1)
}

/// Sets the lease's operation aside for an operator: nothing resumes it.
pub(super) async fn set_aside(client: &impl Conn, lease: &Lease, reason: &str) -> Result<bool> {
    const SET_ASIDE: Sql = Sql::new(
        "UPDATE idempotency_keys
         SET attention = $4, attempts = attempts + 1, last_error = $4,
             lease_token = NULL, leased_until = NULL
         WHERE caller = $1 AND key = $2 AND lease_token = $3 AND recovery_point <> 'finished'",
        &[Type::BYTEA, Type::TEXT, Type::BYTEA, Type::TEXT],
    );
    let changed = SET_ASIDE
        .execute(
            client,
            &[
                &lease.caller,
                &lease.key.as_ref(),
                &&lease.token[..],
                &reason,
            ],
        )
        .await?;
    Ok(changed == 1)
}

/// The sweeper's round: sent outbox messages older than `retention`, then
/// [`sweep_records`]. How many records expired.
pub(super) async fn sweep(
    client: &impl Conn,
    clock: Clock,
    limit: u32,
    retention: Duration,
) -> Result<u64> {
    super::outbox::prune_sent(client, retention, limit).await?;
    if super::citus::present(client).await? {
        return super::citus::sweep_records(client, limit, clock.tombstone_secs).await;
    }
    sweep_records(client, clock, limit).await
}

/// Turns at most `limit` finished records expired by now into tombstones
/// (the answer goes, the generation stays until the tombstone's own time),
/// and deletes as many tombstones whose time is up. How many expired.
async fn sweep_records(client: &impl Conn, clock: Clock, limit: u32) -> Result<u64> {
    const EXPIRE: Sql = Sql::new(
        "UPDATE idempotency_keys
         SET recovery_point = 'expired', status = NULL, headers = NULL, body = NULL,
             expires_at = expires_at + $2 * interval '1 second'
         WHERE ctid IN (
           SELECT ctid FROM idempotency_keys
           WHERE expires_at <= now() AND recovery_point = 'finished'
           ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
        &[Type::INT8, Type::FLOAT8],
    );
    const FORGET: Sql = Sql::new(
        "DELETE FROM idempotency_keys WHERE ctid IN (
           SELECT ctid FROM idempotency_keys
           WHERE expires_at <= now() AND recovery_point = 'expired'
           ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
        &[Type::INT8],
    );
    let expired = EXPIRE
        .execute(client, &[&i64::from(limit), &clock.tombstone_secs])
        .await?;
    FORGET.execute(client, &[&i64::from(limit)]).await?;
    Ok(expired)
}

/// Whether a stored `recovery_point` is where an unfinished operation
/// stopped: neither `finished`, nor a tombstone (`expired`), nor the
/// one-statement claim's own `claimed` (which no other transaction ever
/// sees, as the statement commits whole).
fn is_recovery_point(stored: &str) -> bool {
    stored != FINISHED && stored != EXPIRED && stored != "claimed"
}

/// A fingerprint as stored.
fn fingerprint(stored: &[u8]) -> Result<Fingerprint> {
    stored
        .try_into()
        .map(Fingerprint::from_bytes)
        .map_err(|_| StoreError::internal("a stored fingerprint is not 32 bytes"))
}

/// A record from a row whose first columns are fingerprint, status,
/// headers, body (the status is 0 for an unfinished record).
pub(super) fn record(row: &PgRow) -> Result<Record> {
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

/// A finished, unexpired record of the key, and its remaining life.
pub(super) async fn lookup(
    client: &impl Conn,
    caller: &Caller,
    key: &IdempotencyKey,
) -> Result<Option<LiveRecord>> {
    const LIVE: Sql = Sql::new(
        "SELECT fingerprint, status, headers, body,
                extract(epoch FROM expires_at - now())::float8
         FROM idempotency_keys
         WHERE caller = $1 AND key = $2 AND expires_at > now()
           AND recovery_point = 'finished'",
        &[Type::BYTEA, Type::TEXT],
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
    client: &impl Conn,
    caller: &Caller,
    key: &IdempotencyKey,
) -> Result<Option<Fingerprint>> {
    const UNFINISHED: Sql = Sql::new(
        "SELECT fingerprint FROM idempotency_keys
         WHERE caller = $1 AND key = $2
           AND recovery_point NOT IN ('finished', 'claimed', 'expired')",
        &[Type::BYTEA, Type::TEXT],
    );
    let row = UNFINISHED
        .query_opt(client, &[caller, &key.as_ref()])
        .await?;
    row.map(|row| fingerprint(row.get(0))).transpose()
}

/// How many operations are set aside for an operator: through the index
/// of unfinished records (a set-aside one is always unfinished), not a
/// scan of the table.
pub(super) async fn needing_attention(client: &impl Conn) -> Result<u64> {
    const COUNT: Sql = Sql::new(
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
    client: &impl Conn,
    limit: u32,
    skip: &[String],
) -> Result<Vec<Abandoned>> {
    const ABANDONED: Sql = Sql::new(
        "SELECT caller, key, recovery_point FROM idempotency_keys
         WHERE recovery_point <> 'finished' AND leased_until <= now()
           AND recovery_point <> ALL($2)
         ORDER BY leased_until LIMIT $1",
        &[Type::INT8, Type::TEXT_ARRAY],
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
