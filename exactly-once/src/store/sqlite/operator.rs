//! An operator's queries ([`crate::operator`]): the unfinished operations
//! through their own index (`idempotency_keys_open`), one record, the
//! census the gauges show, taking an operation over and settling it with
//! its audit row.

use super::backend::Sqlite;
use super::protocol::{self, Clock};
use crate::backend::Operation;
use crate::caller::Caller;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::operation_id::OperationId;
use crate::record::{Lease, StoredResponse, EXPIRED, FINISHED};
use crate::store::operator::{
    self, ActionRecord, Audit, Census, ListFilter, OperationRecord, OperationState, OperatorTake,
    OutboxCensus, Settlement, StoredRecord, Taken, Takeover,
};
use crate::store::{now_ms, Advanced};
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::time::Duration;

/// A record's columns as [`stored`] reads them, times relative to `?1`
/// (now, on the database's clock).
const COLUMNS: &str = "caller, key, fingerprint, recovery_point, state, lease_token,
     leased_until - ?1, attempts, last_error, attention, generation, status, headers, body,
     ?1 - created_at, expires_at - ?1";

fn stored(row: &Row<'_>) -> rusqlite::Result<StoredRecord> {
    Ok(StoredRecord {
        caller: row.get(0)?,
        key: row.get(1)?,
        fingerprint: row.get(2)?,
        point: row.get(3)?,
        state: row.get(4)?,
        lease_token: row.get(5)?,
        lease_left_ms: row.get(6)?,
        attempts: row.get(7)?,
        last_error: row.get(8)?,
        attention: row.get(9)?,
        generation: row.get(10)?,
        status: row.get(11)?,
        headers: row.get(12)?,
        body: row.get(13)?,
        age_ms: row.get(14)?,
        expires_in_ms: row.get(15)?,
    })
}

/// Unfinished operations as `filter` says, oldest first.
pub(super) fn operations(
    conn: &Connection,
    filter: &ListFilter,
    now: i64,
) -> rusqlite::Result<Vec<OperationRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM idempotency_keys
         WHERE recovery_point NOT IN ('finished', 'expired') AND created_at <= ?1 - ?2
           AND ((?3 AND attention IS NOT NULL)
             OR (?4 AND attention IS NULL AND leased_until > ?1)
             OR (?5 AND attention IS NULL AND coalesce(leased_until, ?1) <= ?1))
         ORDER BY created_at LIMIT ?6"
    );
    let older = i64::try_from(filter.older_than.as_millis()).unwrap_or(i64::MAX);
    let rows = conn
        .prepare(&sql)?
        .query_map(
            params![
                now,
                older,
                filter.admits(OperationState::NeedsAttention),
                filter.admits(OperationState::Running),
                filter.admits(OperationState::Stalled),
                filter.limit,
            ],
            stored,
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows.into_iter().filter_map(StoredRecord::judged).collect())
}

/// The record of `key` for `caller`.
pub(super) fn operation(
    conn: &Connection,
    caller: &Caller,
    key: &IdempotencyKey,
    now: i64,
) -> rusqlite::Result<Option<OperationRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM idempotency_keys WHERE caller = ?2 AND key = ?3");
    let row = conn
        .prepare(&sql)?
        .query_row(params![now, caller, key.as_ref()], stored)
        .optional()?;
    Ok(row.and_then(StoredRecord::judged))
}

/// The keys whose operation's hash starts with `prefix`: the unfinished
/// ones first (their index), every record only when none matches.
pub(super) fn find(
    conn: &Connection,
    prefix: &[u8],
) -> rusqlite::Result<Vec<(Caller, IdempotencyKey)>> {
    for sql in [
        "SELECT caller, key FROM idempotency_keys
         WHERE recovery_point NOT IN ('finished', 'expired')",
        "SELECT caller, key FROM idempotency_keys",
    ] {
        let mut statement = conn.prepare(sql)?;
        let mut rows = statement.query([])?;
        let mut found = Vec::new();
        while let Some(row) = rows.next()? {
            let (caller, key): (Vec<u8>, String) = (row.get(0)?, row.get(1)?);
            let stored = crate::store::stored_keys([(caller, key)]);
            found.extend(
                stored
                    .into_iter()
                    .filter(|(caller, key)| operator::matches(prefix, caller, key)),
            );
        }
        if !found.is_empty() {
            return Ok(found);
        }
    }
    Ok(Vec::new())
}

/// Unfinished operations by state, with the oldest of each.
pub(super) fn census(conn: &Connection, now: i64) -> rusqlite::Result<Census> {
    let mut census = Census::default();
    let mut statement = conn.prepare_cached(
        "SELECT CASE WHEN attention IS NOT NULL THEN 2 WHEN leased_until > ?1 THEN 0 ELSE 1 END,
                count(*), max(?1 - created_at)
         FROM idempotency_keys WHERE recovery_point NOT IN ('finished', 'expired')
         GROUP BY 1",
    )?;
    let mut rows = statement.query([now])?;
    while let Some(row) = rows.next()? {
        let state =
            OperationState::UNFINISHED[usize::try_from(row.get::<_, i64>(0)?).unwrap_or(2).min(2)];
        let oldest = Duration::from_millis(row.get::<_, i64>(2)?.max(0).unsigned_abs());
        census.add(state, row.get::<_, i64>(1)?.unsigned_abs(), oldest);
    }
    Ok(census)
}

/// What the outbox holds.
pub(super) fn outbox_census(conn: &Connection, now: i64) -> rusqlite::Result<OutboxCensus> {
    conn.prepare_cached(
        "SELECT coalesce(sum(dead_at IS NULL), 0), coalesce(sum(dead_at IS NOT NULL), 0),
                coalesce(max(CASE WHEN dead_at IS NULL
                                  THEN ?1 - coalesce(created_at, next_attempt_at) END), 0)
         FROM outbox WHERE sent_at IS NULL",
    )?
    .query_row([now], |row| {
        Ok(OutboxCensus {
            waiting: row.get::<_, i64>(0)?.unsigned_abs(),
            dead: row.get::<_, i64>(1)?.unsigned_abs(),
            oldest_waiting: Duration::from_millis(row.get::<_, i64>(2)?.max(0).unsigned_abs()),
        })
    })
}

/// What a takeover reads of the record it takes.
struct Standing {
    point: String,
    state: Option<String>,
    leased_until: Option<i64>,
    attention: Option<String>,
    last_error: Option<String>,
    fingerprint: [u8; 32],
    generation: i64,
}

fn standing(
    conn: &Connection,
    caller: &Caller,
    key: &IdempotencyKey,
) -> rusqlite::Result<Option<Standing>> {
    conn.prepare_cached(
        "SELECT recovery_point, state, leased_until, attention, last_error, fingerprint, generation
         FROM idempotency_keys WHERE caller = ?1 AND key = ?2",
    )?
    .query_row(params![caller, key.as_ref()], |row| {
        Ok(Standing {
            point: row.get(0)?,
            state: row.get(1)?,
            leased_until: row.get(2)?,
            attention: row.get(3)?,
            last_error: row.get(4)?,
            fingerprint: row.get(5)?,
            generation: row.get(6)?,
        })
    })
    .optional()
}

impl Standing {
    fn state(&self, now: i64) -> OperationState {
        match self.point.as_str() {
            FINISHED => OperationState::Finished,
            EXPIRED => OperationState::Expired,
            _ if self.attention.is_some() => OperationState::NeedsAttention,
            _ if self.leased_until.is_some_and(|until| until > now) => OperationState::Running,
            _ => OperationState::Stalled,
        }
    }
}

/// Takes the key's operation over for an operator.
pub(super) fn take(
    conn: &Connection,
    take: &OperatorTake,
    clock: Clock,
) -> rusqlite::Result<Taken> {
    let Some(standing) = standing(conn, &take.caller, &take.key)? else {
        return Ok(Taken::Missing);
    };
    let state = standing.state(clock.now);
    if !take.takeover.takes(state) {
        return Ok(Taken::Refused(state));
    }
    let token = Lease::new_token();
    conn.prepare_cached(
        "UPDATE idempotency_keys
         SET lease_token = ?3, leased_until = ?4,
             attention = CASE WHEN ?5 THEN NULL ELSE attention END
         WHERE caller = ?1 AND key = ?2",
    )?
    .execute(params![
        &take.caller,
        take.key.as_ref(),
        &token[..],
        clock.now.saturating_add(clock.lease),
        take.takeover == Takeover::Retry,
    ])?;
    if let Some(by) = &take.by {
        audit(conn, &standing, &Audit::retry(take, by))?;
    }
    Ok(Taken::Lease(take.lease(
        token,
        standing.point,
        standing.state,
        Fingerprint::from_bytes(standing.fingerprint),
        standing.generation,
    )))
}

fn audit(conn: &Connection, standing: &Standing, action: &Audit<'_>) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO operator_actions (at, action, operation, caller, key, generation,
                                       recovery_point, attention, last_error, outcome, status,
                                       reason, operator, os_user)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )?
    .execute(params![
        now_ms(),
        action.action,
        hex::encode(OperationId::new(action.caller, action.key).as_bytes()),
        action.caller,
        action.key.as_ref(),
        standing.generation,
        standing.point,
        standing.attention,
        standing.last_error,
        action.outcome,
        action.status,
        action.by.reason,
        action.by.operator,
        action.by.os_user,
    ])?;
    Ok(())
}

/// Settles the lease's operation: its phase, its answer, its audit row.
pub(super) fn settle(
    conn: &Connection,
    lease: &Lease,
    phase: &dyn Operation<Sqlite>,
    settlement: &Settlement,
    clock: Clock,
) -> rusqlite::Result<Option<StoredResponse>> {
    let Some(standing) = standing(conn, &lease.caller, &lease.key)? else {
        return Ok(None);
    };
    let response = match protocol::advance(conn, lease, phase, clock)? {
        Advanced::Finished(response) => response,
        Advanced::LeaseLost => return Ok(None),
        Advanced::Stopped(next) => {
            return Err(rusqlite::Error::ToSqlConversionFailure(
                format!(
                    "a settlement must finish the operation, and this one stopped at {:?}",
                    next.point
                )
                .into(),
            ))
        }
    };
    conn.prepare_cached(
        "UPDATE idempotency_keys SET attention = NULL WHERE caller = ?1 AND key = ?2",
    )?
    .execute(params![&lease.caller, lease.key.as_ref()])?;
    let action = Audit::settle(lease, settlement, response.status);
    audit(conn, &standing, &action)?;
    Ok(Some(response))
}

/// The audit rows of `operation`, oldest first.
pub(super) fn actions(
    conn: &Connection,
    operation: &OperationId,
) -> rusqlite::Result<Vec<ActionRecord>> {
    conn.prepare_cached(
        "SELECT at, action, outcome, status, reason, operator, os_user FROM operator_actions
         WHERE operation = ?1 ORDER BY id",
    )?
    .query_map([hex::encode(operation.as_bytes())], |row| {
        Ok(ActionRecord {
            at_ms: row.get(0)?,
            action: row.get(1)?,
            outcome: row.get(2)?,
            status: row.get(3)?,
            reason: row.get(4)?,
            operator: row.get(5)?,
            os_user: row.get(6)?,
        })
    })?
    .collect()
}
