//! The keyed protocol in SQL: claim the key (waiting for a transaction
//! that holds it) and run the first phase, or find the key's record and
//! decide; later phases under a lease; taking an abandoned operation over.
//! Every expiry and lease is the database's `now()`.

use super::{cached, classify, exec};
use crate::record::{Lease, Record, Step, StoredResponse, FINISHED};
use crate::store::Result;
use crate::store::{
    Advanced, Execution, Finish, Finished, FirstPhase, IdempotentRequest, Operation, RunContext,
    StoreError,
};
use crate::{Caller, Fingerprint, IdempotencyKey};
use deadpool_postgres::{GenericClient, Transaction};
use std::time::Duration;
use tokio_postgres::error::SqlState;

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
}

/// A key's record columns, in the order [`record`] reads them ([`decide`]
/// selects them first).
const RECORD_COLUMNS: &str = "fingerprint, status, headers, body";

/// Claims the key (waiting for a transaction that holds it) and runs the
/// operation's first phase, or finds the key's record and decides.
pub(super) async fn execute(
    client: &mut deadpool_postgres::Object,
    phase: &FirstPhase,
    clock: Clock,
) -> Result<Execution> {
    let (request, operation, finish) = (&phase.request, phase.operation.as_ref(), phase.finish);
    let tx = client.transaction().await.map_err(classify)?;
    let (ttl_secs, lease_secs, now_ms) = (clock.ttl_secs, clock.lease_secs, clock.now_ms);
    let key = request.key.as_ref();
    // A finished, expired record counts as absent: the claim replaces it.
    let claimed = tx
        .query_opt(
            &cached(
                &tx,
                "INSERT INTO idempotency_keys
                   (caller, key, fingerprint, recovery_point, created_at, expires_at)
                 VALUES ($1, $2, $3, 'claimed', now(), now() + $4 * interval '1 second')
                 ON CONFLICT (caller, key) DO UPDATE
                   SET fingerprint = EXCLUDED.fingerprint, recovery_point = 'claimed',
                       state = NULL, lease_token = NULL, leased_until = NULL, status = NULL,
                       headers = NULL, body = NULL, created_at = EXCLUDED.created_at,
                       expires_at = EXCLUDED.expires_at
                   WHERE idempotency_keys.recovery_point = 'finished'
                     AND idempotency_keys.expires_at <= now()
                 RETURNING 1",
            )
            .await?,
            &[
                &request.caller,
                &key,
                &&request.fingerprint.as_bytes()[..],
                &ttl_secs,
            ],
        )
        .await;
    let claimed = match in_use_or(claimed)? {
        None => return Ok(Execution::InUse),
        Some(claimed) => claimed.is_some(),
    };
    if !claimed {
        // The key's record is live: its transaction committed (the claim
        // waited for it), so read it and decide.
        let execution = decide(&tx, request, clock).await?;
        commit(tx).await?;
        return Ok(execution);
    }

    let context = RunContext {
        caller: &request.caller,
        key: &request.key,
        now_ms,
        store_ms: now_ms,
    };
    let step = operation.run_postgres(&tx, &context).await?;
    let execution = match step {
        Step::Finished(response) => {
            record_response(&tx, &request.caller, &request.key, &response, ttl_secs).await?;
            Execution::Ran(response)
        }
        Step::Stopped(point, state) => {
            let token = Lease::new_token();
            exec(
                &tx,
                "UPDATE idempotency_keys SET recovery_point = $3, state = $4, lease_token = $5,
                        leased_until = now() + $6 * interval '1 second'
                 WHERE caller = $1 AND key = $2",
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
            Execution::Stopped(Lease {
                caller: request.caller,
                key: request.key.clone(),
                token,
                point,
                state,
            })
        }
    };
    match finish {
        Finish::RollBack => {
            tx.rollback().await.map_err(classify)?;
            Ok(Execution::RolledBack)
        }
        Finish::Commit => {
            commit(tx).await?;
            Ok(execution)
        }
    }
}

/// A live record of the key: finished (replay or refuse), or stopped at a
/// recovery point (refuse another request, wait for the lease's holder,
/// or take an abandoned operation over).
pub(super) async fn decide(
    tx: &impl GenericClient,
    request: &IdempotentRequest,
    clock: Clock,
) -> Result<Execution> {
    let row = tx
        .query_one(
            &cached(
                tx,
                &format!(
                    "SELECT {RECORD_COLUMNS}, recovery_point, coalesce(leased_until > now(), false),
                            greatest(extract(epoch FROM expires_at - now()), 0)::float8
                     FROM idempotency_keys WHERE caller = $1 AND key = $2"
                ),
            )
            .await?,
            &[&request.caller, &request.key.as_ref()],
        )
        .await
        .map_err(classify)?;
    let existing = record(&row)?;
    if !is_recovery_point(row.get(4)) {
        return Ok(Execution::Found(Finished {
            record: existing,
            life: Duration::from_secs_f64(row.get(6)),
        }));
    }
    if existing.fingerprint != request.fingerprint {
        return Ok(Execution::Mismatch);
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
async fn commit(tx: Transaction<'_>) -> Result<()> {
    tx.commit().await.map_err(|e| classify_commit(e, "COMMIT"))
}

/// Sorts an error of a statement that commits (`COMMIT`, or a statement
/// that commits on its own, `what`). When the backend was lost (no
/// SQLSTATE: the connection broke; class 08, connection exception; class
/// 57, operator intervention), the commit may have happened: a backend
/// killed while its COMMIT waits for a synchronous standby has committed
/// locally and answers 57P01. That is outcome unknown. Any other error is
/// the server's refusal, and nothing was committed.
pub(super) fn classify_commit(e: tokio_postgres::Error, what: &str) -> StoreError {
    if backend_lost(&e) {
        StoreError::outcome_unknown(format!("the database backend was lost during {what}"))
            .caused_by(e)
    } else {
        classify(e)
    }
}

/// True when `e` says the statement's backend was lost (see
/// [`classify_commit`]).
pub(super) fn backend_lost(e: &tokio_postgres::Error) -> bool {
    e.code()
        .is_none_or(|state| matches!(&state.code()[..2], "08" | "57"))
}

/// `None` when the statement gave up waiting for a lock another
/// transaction holds (`lock_timeout`): the key is in use.
pub(super) fn in_use_or<T>(result: Result<T, tokio_postgres::Error>) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => Ok(None),
        Err(e) => Err(classify(e)),
    }
}

/// Records the answer; the record lives `ttl_secs` from now, the moment
/// its answer is recorded (an operation the completer finishes after an
/// outage longer than the TTL is not born expired).
async fn record_response(
    tx: &Transaction<'_>,
    caller: &Caller,
    key: &IdempotencyKey,
    response: &StoredResponse,
    ttl_secs: f64,
) -> Result<()> {
    exec(
        tx,
        "UPDATE idempotency_keys
         SET recovery_point = 'finished', state = NULL, lease_token = NULL, leased_until = NULL,
             status = $3, headers = $4, body = $5,
             expires_at = now() + $6 * interval '1 second'
         WHERE caller = $1 AND key = $2",
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

/// The next phase of the lease's operation, if the lease is still its
/// holder's (the row stays locked until the commit, so nobody takes it
/// over meanwhile); records how the phase ended.
pub(super) async fn advance(
    tx: Transaction<'_>,
    lease: &Lease,
    phase: &dyn Operation,
    clock: Clock,
) -> Result<Advanced> {
    let (lease_secs, now_ms) = (clock.lease_secs, clock.now_ms);
    let held = tx
        .query_opt(
            &cached(
                &tx,
                "SELECT 1 FROM idempotency_keys
                 WHERE caller = $1 AND key = $2 AND lease_token = $3
                   AND recovery_point <> 'finished'
                 FOR UPDATE",
            )
            .await?,
            &[&lease.caller, &lease.key.as_ref(), &&lease.token[..]],
        )
        .await;
    match in_use_or(held)? {
        Some(Some(_)) => {}
        _ => return Ok(Advanced::LeaseLost),
    }
    let context = RunContext {
        caller: &lease.caller,
        key: &lease.key,
        now_ms,
        store_ms: now_ms,
    };
    let advanced = match phase.run_postgres(&tx, &context).await? {
        Step::Finished(response) => {
            record_response(&tx, &lease.caller, &lease.key, &response, clock.ttl_secs).await?;
            Advanced::Finished(response)
        }
        Step::Stopped(point, state) => {
            exec(
                &tx,
                "UPDATE idempotency_keys SET recovery_point = $3, state = $4,
                        leased_until = now() + $5 * interval '1 second'
                 WHERE caller = $1 AND key = $2",
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
    commit(tx).await?;
    Ok(advanced)
}

/// Takes over the key's abandoned operation (its lease ran out).
pub(super) async fn take_over(
    client: &impl GenericClient,
    caller: &Caller,
    key: &IdempotencyKey,
    lease_secs: f64,
) -> Result<Option<Lease>> {
    let token = Lease::new_token();
    let row = client
        .query_opt(
            &cached(
                client,
                "UPDATE idempotency_keys
                 SET lease_token = $3, leased_until = now() + $4 * interval '1 second'
                 WHERE caller = $1 AND key = $2 AND recovery_point <> 'finished'
                   AND leased_until <= now()
                 RETURNING recovery_point, state",
            )
            .await?,
            &[&caller, &key.as_ref(), &&token[..], &lease_secs],
        )
        .await;
    Ok(in_use_or(row)?.flatten().and_then(|row| {
        Some(Lease {
            caller: *caller,
            key: key.clone(),
            token,
            point: Some(row.get::<_, String>(0)).filter(|p| is_recovery_point(p))?,
            state: row.get::<_, Option<String>>(1).unwrap_or_default(),
        })
    }))
}

/// Whether a stored `recovery_point` is where an unfinished operation
/// stopped: neither `finished` nor the one-statement claim's own `claimed`
/// (which no other transaction ever sees, as the statement commits whole).
fn is_recovery_point(stored: &str) -> bool {
    stored != FINISHED && stored != "claimed"
}

/// A record from a row whose first columns are [`RECORD_COLUMNS`] (the
/// status is 0 for an unfinished record).
pub(super) fn record(row: &tokio_postgres::Row) -> Result<Record> {
    let fingerprint: &[u8] = row.get(0);
    let fingerprint: [u8; 32] = fingerprint
        .try_into()
        .map_err(|_| StoreError::internal("a stored fingerprint is not 32 bytes"))?;
    let status: Option<i16> = row.get(1);
    let body: Option<&[u8]> = row.get(3);
    Ok(Record {
        fingerprint: Fingerprint::from_bytes(fingerprint),
        response: StoredResponse::from_stored(
            status.unwrap_or(0) as u16,
            row.get(2),
            bytes::Bytes::copy_from_slice(body.unwrap_or_default()),
        ),
    })
}
