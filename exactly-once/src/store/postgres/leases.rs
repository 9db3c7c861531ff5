//! Later phases under a lease: advancing an operation, renewing,
//! releasing and failing its lease, setting it aside.

use super::clock::Clock;
use super::error::in_use_or;
use super::protocol::record_response;
use super::statement::{Driver, Exec, Statement};
use super::value::Kind;
use crate::backend::{Operation, RunContext};
use crate::record::{Lease, PhaseEnd};
use crate::store::{Advanced, AfterFailure, Result};

/// The lease's record, locked until the transaction ends, if the lease is
/// still its holder's.
const HOLD: Statement = Statement::new(
    "SELECT 1 FROM idempotency_keys
     WHERE caller = $1 AND key = $2 AND lease_token = $3 AND recovery_point <> 'finished'
     FOR UPDATE",
    &[Kind::Bytea, Kind::Text, Kind::Bytea],
);

/// A later phase stopped at the next recovery point; the lease goes on.
const STOP_LATER: Statement = Statement::new(
    "UPDATE idempotency_keys SET recovery_point = $3, state = $4,
            leased_until = now() + $5 * interval '1 second'
     WHERE caller = $1 AND key = $2",
    &[
        Kind::Bytea,
        Kind::Text,
        Kind::Text,
        Kind::Text,
        Kind::Float8,
    ],
);

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

/// Extends the lease by its whole length from now, if it is still the
/// holder's.
pub(super) async fn renew(client: &impl Exec, lease: &Lease, lease_secs: f64) -> Result<bool> {
    const RENEW: Statement = Statement::new(
        "UPDATE idempotency_keys SET leased_until = now() + $4 * interval '1 second'
         WHERE caller = $1 AND key = $2 AND lease_token = $3 AND recovery_point <> 'finished'",
        &[Kind::Bytea, Kind::Text, Kind::Bytea, Kind::Float8],
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
    client: &impl Exec,
    lease: &Lease,
    error: &str,
    clock: Clock,
    on_citus: bool,
) -> Result<AfterFailure> {
    const FAILED: Statement = Statement::new(
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
        &[Kind::Bytea, Kind::Text, Kind::Bytea, Kind::Text, Kind::Float8],
    );
    if on_citus {
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
pub(super) async fn release(client: &impl Exec, lease: &Lease) -> Result<bool> {
    const RELEASE: Statement = Statement::new(
        "UPDATE idempotency_keys SET leased_until = now()
         WHERE caller = $1 AND key = $2 AND lease_token = $3 AND recovery_point <> 'finished'",
        &[Kind::Bytea, Kind::Text, Kind::Bytea],
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
pub(super) async fn set_aside(client: &impl Exec, lease: &Lease, reason: &str) -> Result<bool> {
    const SET_ASIDE: Statement = Statement::new(
        "UPDATE idempotency_keys
         SET attention = $4, attempts = attempts + 1, last_error = $4,
             lease_token = NULL, leased_until = NULL
         WHERE caller = $1 AND key = $2 AND lease_token = $3 AND recovery_point <> 'finished'",
        &[Kind::Bytea, Kind::Text, Kind::Bytea, Kind::Text],
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
