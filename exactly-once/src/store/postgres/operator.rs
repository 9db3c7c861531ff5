//! An operator's queries ([`crate::operator`]) on PostgreSQL: the
//! unfinished operations through their own index
//! (`idempotency_keys_open`), one record, the census the gauges show, the
//! operation whose hash starts with some digits (`sha256()` in the
//! database), taking an operation over and settling it with its audit row.
//! Every time is the database's `now()`.

use super::clock::Clock;
use super::leases;
use super::statement::{Driver, Exec, Statement};
use super::value::{Kind, Row};
use crate::backend::Operation;
use crate::caller::Caller;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::operation_id::OperationId;
use crate::record::{Lease, StoredResponse, EXPIRED, FINISHED};
use crate::store::operator::{
    ActionRecord, Audit, Census, ListFilter, OperationRecord, OperationState, OperatorTake,
    OutboxCensus, Settlement, StoredRecord, Taken, Takeover,
};
use crate::store::{stored_keys, Advanced, Result, StoreError};
use std::time::Duration;

/// A record's columns as [`stored`] reads them, times in ms from now.
macro_rules! columns {
    () => {
        "caller, key, fingerprint, recovery_point, state, lease_token,
         (extract(epoch FROM leased_until - now()) * 1000)::int8, attempts, last_error,
         attention, generation, status, headers, body,
         (extract(epoch FROM now() - created_at) * 1000)::int8,
         (extract(epoch FROM expires_at - now()) * 1000)::int8"
    };
}

fn stored(row: &Row) -> StoredRecord {
    StoredRecord {
        caller: row.get(0),
        key: row.get(1),
        fingerprint: row.get(2),
        point: row.get(3),
        state: row.get(4),
        lease_token: row.get(5),
        lease_left_ms: row.get(6),
        attempts: i64::from(row.get::<_, i32>(7)),
        last_error: row.get(8),
        attention: row.get(9),
        generation: row.get(10),
        status: row.get::<_, Option<i16>>(11).map(i64::from),
        headers: row.get(12),
        body: row.get(13),
        age_ms: row.get(14),
        expires_in_ms: row.get(15),
    }
}

/// Unfinished operations as `filter` says, oldest first.
pub(super) async fn operations(
    client: &impl Exec,
    filter: &ListFilter,
) -> Result<Vec<OperationRecord>> {
    const LIST: Statement = Statement::new(
        concat!(
            "SELECT ",
            columns!(),
            " FROM idempotency_keys
             WHERE recovery_point NOT IN ('finished', 'expired', 'claimed')
               AND created_at <= now() - $1 * interval '1 second'
               AND (($2 AND attention IS NOT NULL)
                 OR ($3 AND attention IS NULL AND leased_until > now())
                 OR ($4 AND attention IS NULL AND coalesce(leased_until <= now(), true)))
             ORDER BY created_at LIMIT $5"
        ),
        &[Kind::Float8, Kind::Bool, Kind::Bool, Kind::Bool, Kind::Int8],
    );
    let rows = LIST
        .query(
            client,
            &[
                &filter.older_than.as_secs_f64(),
                &filter.admits(OperationState::NeedsAttention),
                &filter.admits(OperationState::Running),
                &filter.admits(OperationState::Stalled),
                &i64::from(filter.limit),
            ],
        )
        .await?;
    Ok(rows
        .iter()
        .map(stored)
        .filter_map(StoredRecord::judged)
        .collect())
}

/// The record of `key` for `caller`.
pub(super) async fn operation(
    client: &impl Exec,
    caller: &Caller,
    key: &IdempotencyKey,
) -> Result<Option<OperationRecord>> {
    const ONE: Statement = Statement::new(
        concat!(
            "SELECT ",
            columns!(),
            " FROM idempotency_keys WHERE caller = $1 AND key = $2"
        ),
        &[Kind::Bytea, Kind::Text],
    );
    let row = ONE.query_opt(client, &[caller, &key.as_ref()]).await?;
    Ok(row.as_ref().map(stored).and_then(StoredRecord::judged))
}

/// What [`OperationId`] hashes before the caller and the key.
const OPERATION_DOMAIN: &[u8] = b"exactly-once operation\0";

/// The keys whose operation's hash starts with `prefix`, the hash taken
/// by the database: the unfinished ones first (their index), every record
/// only when none matches.
pub(super) async fn find(
    client: &impl Exec,
    prefix: &[u8],
) -> Result<Vec<(Caller, IdempotencyKey)>> {
    const UNFINISHED: Statement = Statement::new(
        "SELECT caller, key FROM idempotency_keys
         WHERE recovery_point NOT IN ('finished', 'expired', 'claimed')
           AND substring(sha256($1 || caller || convert_to(key, 'UTF8')) FROM 1 FOR $3) = $2",
        &[Kind::Bytea, Kind::Bytea, Kind::Int4],
    );
    const ALL: Statement = Statement::new(
        "SELECT caller, key FROM idempotency_keys
         WHERE substring(sha256($1 || caller || convert_to(key, 'UTF8')) FROM 1 FOR $3) = $2",
        &[Kind::Bytea, Kind::Bytea, Kind::Int4],
    );
    let length = i32::try_from(prefix.len()).unwrap_or(i32::MAX);
    for sql in [UNFINISHED, ALL] {
        let rows = sql
            .query(client, &[&OPERATION_DOMAIN, &prefix, &length])
            .await?;
        if !rows.is_empty() {
            return Ok(stored_keys(
                rows.iter()
                    .map(|row| (row.get::<_, &[u8]>(0), row.get::<_, &str>(1))),
            ));
        }
    }
    Ok(Vec::new())
}

/// Unfinished operations by state, with the oldest of each.
pub(super) async fn census(client: &impl Exec) -> Result<Census> {
    const CENSUS: Statement = Statement::new(
        "SELECT CASE WHEN attention IS NOT NULL THEN 2 WHEN leased_until > now() THEN 0 ELSE 1 END,
                count(*), max(extract(epoch FROM now() - created_at))::float8
         FROM idempotency_keys WHERE recovery_point NOT IN ('finished', 'expired', 'claimed')
         GROUP BY 1",
        &[],
    );
    let mut census = Census::default();
    for row in CENSUS.query(client, &[]).await? {
        let state =
            OperationState::UNFINISHED[usize::try_from(row.get::<_, i32>(0)).unwrap_or(2).min(2)];
        let oldest = Duration::from_secs_f64(row.get::<_, f64>(2).max(0.0));
        census.add(state, row.get::<_, i64>(1).unsigned_abs(), oldest);
    }
    Ok(census)
}

/// What the outbox holds.
pub(super) async fn outbox_census(client: &impl Exec) -> Result<OutboxCensus> {
    const OUTBOX: Statement = Statement::new(
        "SELECT count(*) FILTER (WHERE dead_at IS NULL), count(*) FILTER (WHERE dead_at IS NOT NULL),
                coalesce(extract(epoch FROM now() - min(coalesce(created_at, next_attempt_at))
                                 FILTER (WHERE dead_at IS NULL)), 0)::float8
         FROM outbox WHERE sent_at IS NULL",
        &[],
    );
    let row = OUTBOX.query_one(client, &[]).await?;
    Ok(OutboxCensus {
        waiting: row.get::<_, i64>(0).unsigned_abs(),
        dead: row.get::<_, i64>(1).unsigned_abs(),
        oldest_waiting: Duration::from_secs_f64(row.get::<_, f64>(2).max(0.0)),
    })
}

/// What a takeover reads of the record it takes (locked until the
/// transaction ends).
struct Standing {
    point: String,
    state: Option<String>,
    leased: bool,
    attention: Option<String>,
    last_error: Option<String>,
    fingerprint: Vec<u8>,
    generation: i64,
}

impl Standing {
    fn state(&self) -> OperationState {
        match self.point.as_str() {
            FINISHED => OperationState::Finished,
            EXPIRED => OperationState::Expired,
            _ if self.attention.is_some() => OperationState::NeedsAttention,
            _ if self.leased => OperationState::Running,
            _ => OperationState::Stalled,
        }
    }
}

async fn standing(
    client: &impl Exec,
    caller: &Caller,
    key: &IdempotencyKey,
) -> Result<Option<Standing>> {
    const STANDING: Statement = Statement::new(
        "SELECT recovery_point, state, coalesce(leased_until > now(), false), attention,
                last_error, fingerprint, generation
         FROM idempotency_keys WHERE caller = $1 AND key = $2 FOR UPDATE",
        &[Kind::Bytea, Kind::Text],
    );
    let row = STANDING.query_opt(client, &[caller, &key.as_ref()]).await?;
    Ok(row.map(|row| Standing {
        point: row.get(0),
        state: row.get(1),
        leased: row.get(2),
        attention: row.get(3),
        last_error: row.get(4),
        fingerprint: row.get(5),
        generation: row.get(6),
    }))
}

/// [`take`] inside `tx`, which the caller commits when it took a lease.
pub(super) async fn take_in(tx: &impl Exec, take: &OperatorTake, clock: Clock) -> Result<Taken> {
    const TAKE: Statement = Statement::new(
        "UPDATE idempotency_keys
         SET lease_token = $3, leased_until = now() + $4 * interval '1 second',
             attention = CASE WHEN $5 THEN NULL ELSE attention END
         WHERE caller = $1 AND key = $2",
        &[
            Kind::Bytea,
            Kind::Text,
            Kind::Bytea,
            Kind::Float8,
            Kind::Bool,
        ],
    );
    let Some(standing) = standing(tx, &take.caller, &take.key).await? else {
        return Ok(Taken::Missing);
    };
    let state = standing.state();
    if !take.takeover.takes(state) {
        return Ok(Taken::Refused(state));
    }
    let token = Lease::new_token();
    TAKE.execute(
        tx,
        &[
            &take.caller,
            &take.key.as_ref(),
            &&token[..],
            &clock.lease_secs,
            &(take.takeover == Takeover::Retry),
        ],
    )
    .await?;
    if let Some(by) = &take.by {
        audit(tx, &standing, &Audit::retry(take, by)).await?;
    }
    let fingerprint = standing
        .fingerprint
        .as_slice()
        .try_into()
        .map(Fingerprint::from_bytes)
        .map_err(|_| StoreError::internal("a stored fingerprint is not 32 bytes"))?;
    Ok(Taken::Lease(take.lease(
        token,
        standing.point,
        standing.state,
        fingerprint,
        standing.generation,
    )))
}

async fn audit(client: &impl Exec, standing: &Standing, action: &Audit<'_>) -> Result<()> {
    const AUDIT: Statement = Statement::new(
        "INSERT INTO operator_actions (action, operation, caller, key, generation, recovery_point,
                                       attention, last_error, outcome, status, reason, operator,
                                       os_user)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        &[
            Kind::Text,
            Kind::Text,
            Kind::Bytea,
            Kind::Text,
            Kind::Int8,
            Kind::Text,
            Kind::Text,
            Kind::Text,
            Kind::Text,
            Kind::Int2,
            Kind::Text,
            Kind::Text,
            Kind::Text,
        ],
    );
    let status = action.status.map(|s| i16::try_from(s).unwrap_or(i16::MAX));
    AUDIT
        .execute(
            client,
            &[
                &action.action,
                &hex::encode(OperationId::new(action.caller, action.key).as_bytes()),
                action.caller,
                &action.key.as_ref(),
                &standing.generation,
                &standing.point,
                &standing.attention,
                &standing.last_error,
                &action.outcome,
                &status,
                &action.by.reason,
                &action.by.operator,
                &action.by.os_user,
            ],
        )
        .await?;
    Ok(())
}

/// [`settle`] inside `tx`, whichever the driver, which the caller commits
/// when it settled.
pub(super) async fn settle_in<D: Driver>(
    tx: &D::Tx<'_>,
    lease: &Lease,
    phase: &dyn Operation<D>,
    settlement: &Settlement,
    clock: Clock,
) -> Result<Option<StoredResponse>> {
    const CLEAR: Statement = Statement::new(
        "UPDATE idempotency_keys SET attention = NULL WHERE caller = $1 AND key = $2",
        &[Kind::Bytea, Kind::Text],
    );
    let Some(standing) = standing(tx, &lease.caller, &lease.key).await? else {
        return Ok(None);
    };
    let response = match leases::advance_in::<D>(tx, lease, phase, clock).await? {
        Advanced::Finished(response) => response,
        Advanced::LeaseLost => return Ok(None),
        Advanced::Stopped(next) => {
            return Err(StoreError::internal(format!(
                "a settlement must finish the operation, and this one stopped at {:?}",
                next.point
            )))
        }
    };
    CLEAR
        .execute(tx, &[&lease.caller, &lease.key.as_ref()])
        .await?;
    let action = Audit::settle(lease, settlement, response.status);
    audit(tx, &standing, &action).await?;
    Ok(Some(response))
}

/// The audit rows of `operation`, oldest first.
pub(super) async fn actions(
    client: &impl Exec,
    operation: &OperationId,
) -> Result<Vec<ActionRecord>> {
    const ACTIONS: Statement = Statement::new(
        "SELECT (extract(epoch FROM at) * 1000)::int8, action, outcome, status, reason, operator,
                os_user
         FROM operator_actions WHERE operation = $1 ORDER BY id",
        &[Kind::Text],
    );
    let rows = ACTIONS
        .query(client, &[&hex::encode(operation.as_bytes())])
        .await?;
    Ok(rows
        .iter()
        .map(|row| ActionRecord {
            at_ms: row.get(0),
            action: row.get(1),
            outcome: row.get(2),
            status: row
                .get::<_, Option<i16>>(3)
                .and_then(|s| u16::try_from(s).ok()),
            reason: row.get(4),
            operator: row.get(5),
            os_user: row.get(6),
        })
        .collect())
}
