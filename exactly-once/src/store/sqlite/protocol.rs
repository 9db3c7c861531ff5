//! The keyed protocol in SQL, run by the writer inside one job's savepoint:
//! find the key's record and decide (replay, refuse, wait, take over), or
//! run the operation's first phase and record how it ended; later phases
//! under a lease; the completer's and the sweeper's queries.

use super::backend::Sqlite;
use crate::backend::{Operation, RunContext};
use crate::caller::Caller;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::record::{Lease, PhaseEnd, Record, StoredResponse, EXPIRED, FINISHED};
use crate::store::{Advanced, Execution, IdempotentRequest, LiveRecord};
use rusqlite::{params, Connection, OptionalExtension};
use std::time::Duration;

/// Times and durations of one job, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    /// The job's "now" on the database's clock ([`super::clock`]), which
    /// every lease and expiry is measured on.
    pub(super) now: i64,
    /// The job's "now" on the wall clock (Unix ms), for what people read
    /// (a row's creation time).
    pub(super) wall: i64,
    /// How long a new record lives.
    pub(super) ttl: i64,
    /// How long a lease lasts.
    pub(super) lease: i64,
    /// How long after its start a failing operation is set aside.
    pub(super) attention_after: i64,
    /// How long an expired record's tombstone is kept.
    pub(super) tombstone_ttl: i64,
}

/// A key's record as the protocol reads it.
struct Existing {
    record: Record,
    point: String,
    state: Option<String>,
    lease_token: Option<Vec<u8>>,
    leased_until: i64,
    expires_at: i64,
    generation: u64,
    attention: Option<String>,
}

/// The heart of it, inside one savepoint of the batch's transaction: find
/// the key's record and decide (replay, refuse, wait, take over); or, when
/// there is none, run the operation's first phase and record how it ended.
pub(super) fn execute(
    conn: &Connection,
    request: &IdempotentRequest,
    operation: &dyn Operation<Sqlite>,
    clock: Clock,
) -> rusqlite::Result<Execution> {
    let key = request.key.as_ref();
    let mut generation = 0;
    if let Some(existing) = read(conn, request)? {
        let over = existing.point == EXPIRED
            || (existing.point == FINISHED && existing.expires_at <= clock.now);
        if !over {
            return decide(conn, request, existing, clock);
        }
        // Expired (or only its tombstone is left): it counts as absent and
        // makes room, and this is the key's next life.
        generation = existing.generation + 1;
        conn.prepare_cached("DELETE FROM idempotency_keys WHERE caller = ?1 AND key = ?2")?
            .execute(params![&request.caller, key])?;
    }

    let context = RunContext {
        caller: &request.caller,
        key: &request.key,
        now_ms: clock.wall,
        store_ms: clock.now,
        fingerprint: &request.fingerprint,
        generation,
    };
    let step = operation.run(conn, &context)?;
    let (point, state, token, leased_until, response) = match &step {
        PhaseEnd::Finished(response) => (FINISHED, None, None, None, Some(response)),
        PhaseEnd::Stopped { point, state } => (
            point.as_str(),
            Some(state.as_str()),
            Some(Lease::new_token()),
            Some(clock.now.saturating_add(clock.lease)),
            None,
        ),
    };
    conn.prepare_cached(
        "INSERT INTO idempotency_keys
           (caller, key, fingerprint, recovery_point, state, lease_token, leased_until,
            status, headers, body, created_at, expires_at, generation)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?
    .execute(params![
        &request.caller,
        key,
        &request.fingerprint.as_bytes()[..],
        point,
        state,
        token.as_ref().map(|t| &t[..]),
        leased_until,
        response.map(|r| r.status),
        response.and_then(StoredResponse::encoded_headers),
        response.map(|r| &r.body[..]),
        clock.now,
        clock.now.saturating_add(clock.ttl),
        i64::try_from(generation).unwrap_or(i64::MAX),
    ])?;
    Ok(match step {
        PhaseEnd::Finished(response) => Execution::Ran(response),
        PhaseEnd::Stopped { point, state } => Execution::Stopped(Lease {
            caller: request.caller,
            key: request.key.clone(),
            token: token.expect("a stopped operation has a lease"),
            point,
            state,
            fingerprint: request.fingerprint,
            generation,
        }),
    })
}

fn read(conn: &Connection, request: &IdempotentRequest) -> rusqlite::Result<Option<Existing>> {
    conn.prepare_cached(
        "SELECT fingerprint, status, headers, body, recovery_point, state, lease_token,
                coalesce(leased_until, 0), expires_at, generation, attention
         FROM idempotency_keys WHERE caller = ?1 AND key = ?2",
    )?
    .query_row(params![&request.caller, request.key.as_ref()], |row| {
        Ok(Existing {
            record: record(row, 0)?,
            point: row.get(4)?,
            state: row.get(5)?,
            lease_token: row.get(6)?,
            leased_until: row.get(7)?,
            expires_at: row.get(8)?,
            generation: row.get::<_, i64>(9)?.unsigned_abs(),
            attention: row.get(10)?,
        })
    })
    .optional()
}

/// A live record: finished (replay or refuse), or stopped at a recovery
/// point (refuse another request, wait for the lease's holder, or take an
/// abandoned operation over).
fn decide(
    conn: &Connection,
    request: &IdempotentRequest,
    existing: Existing,
    clock: Clock,
) -> rusqlite::Result<Execution> {
    if existing.point == FINISHED {
        return Ok(Execution::Found(LiveRecord {
            record: existing.record,
            life: life_left(existing.expires_at, clock.now),
        }));
    }
    let point = existing.point;
    if existing.record.fingerprint != request.fingerprint {
        return Ok(Execution::Mismatch);
    }
    if let Some(reason) = existing.attention {
        return Ok(Execution::NeedsAttention(reason));
    }
    if existing.leased_until > clock.now {
        return Ok(Execution::InUse);
    }
    let token = Lease::new_token();
    let taken = take_lease(
        conn,
        request,
        existing.lease_token.as_deref(),
        &token,
        clock,
    )?;
    Ok(match taken {
        true => Execution::Resumed(Lease {
            caller: request.caller,
            key: request.key.clone(),
            token,
            point,
            state: existing.state.unwrap_or_default(),
            fingerprint: existing.record.fingerprint,
            generation: existing.generation,
        }),
        false => Execution::InUse,
    })
}

/// How long a record that expires at `expires_at` has left at `now`.
pub(super) fn life_left(expires_at: i64, now: i64) -> Duration {
    Duration::from_millis(u64::try_from(expires_at.saturating_sub(now)).unwrap_or(0))
}

/// Replaces the lease `old` (which ran out) by `new`.
fn take_lease(
    conn: &Connection,
    request: &IdempotentRequest,
    old: Option<&[u8]>,
    new: &[u8; 16],
    clock: Clock,
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE idempotency_keys SET lease_token = ?3, leased_until = ?4
             WHERE caller = ?1 AND key = ?2 AND lease_token IS ?5 AND recovery_point <> 'finished'",
        )?
        .execute(params![
            &request.caller,
            request.key.as_ref(),
            &new[..],
            clock.now.saturating_add(clock.lease),
            old,
        ])?;
    Ok(changed == 1)
}

/// The next phase of the lease's operation, if the lease is still its
/// holder's; records how the phase ended.
pub(super) fn advance(
    conn: &Connection,
    lease: &Lease,
    phase: &dyn Operation<Sqlite>,
    clock: Clock,
) -> rusqlite::Result<Advanced> {
    if !holds(conn, lease)? {
        return Ok(Advanced::LeaseLost);
    }
    let context = RunContext {
        caller: &lease.caller,
        key: &lease.key,
        now_ms: clock.wall,
        store_ms: clock.now,
        fingerprint: &lease.fingerprint,
        generation: lease.generation,
    };
    match phase.run(conn, &context)? {
        PhaseEnd::Finished(response) => {
            conn.prepare_cached(
                "UPDATE idempotency_keys
                 SET recovery_point = 'finished', state = NULL, lease_token = NULL,
                     leased_until = NULL, status = ?3, headers = ?4, body = ?5, expires_at = ?6
                 WHERE caller = ?1 AND key = ?2",
            )?
            .execute(params![
                &lease.caller,
                lease.key.as_ref(),
                response.status,
                response.encoded_headers(),
                &response.body[..],
                // A record's life counts from its answer: an operation the
                // completer finishes after an outage longer than the TTL is
                // not born expired.
                clock.now.saturating_add(clock.ttl),
            ])?;
            Ok(Advanced::Finished(response))
        }
        PhaseEnd::Stopped { point, state } => {
            conn.prepare_cached(
                "UPDATE idempotency_keys SET recovery_point = ?3, state = ?4, leased_until = ?5
                 WHERE caller = ?1 AND key = ?2",
            )?
            .execute(params![
                &lease.caller,
                lease.key.as_ref(),
                point.as_str(),
                state,
                clock.now.saturating_add(clock.lease),
            ])?;
            Ok(Advanced::Stopped(Lease {
                point,
                state,
                ..lease.clone()
            }))
        }
    }
}

/// Whether the lease is still its holder's (its operation unfinished and
/// not set aside).
fn holds(conn: &Connection, lease: &Lease) -> rusqlite::Result<bool> {
    let held: Option<Vec<u8>> = conn
        .prepare_cached(
            "SELECT lease_token FROM idempotency_keys
             WHERE caller = ?1 AND key = ?2 AND recovery_point <> 'finished'",
        )?
        .query_row(params![&lease.caller, lease.key.as_ref()], |row| row.get(0))
        .optional()?
        .flatten();
    Ok(held.as_deref() == Some(&lease.token[..]))
}

/// Takes over the key's abandoned operation (its lease ran out).
pub(super) fn take_over(
    conn: &Connection,
    caller: &Caller,
    key: &IdempotencyKey,
    clock: Clock,
) -> rusqlite::Result<Option<Lease>> {
    let token = Lease::new_token();
    let taken: Option<(String, Option<String>, [u8; 32], i64)> = conn
        .prepare_cached(
            "UPDATE idempotency_keys SET lease_token = ?3, leased_until = ?4
             WHERE caller = ?1 AND key = ?2 AND recovery_point NOT IN ('finished', 'expired')
               AND leased_until <= ?5 AND attention IS NULL
             RETURNING recovery_point, state, fingerprint, generation",
        )?
        .query_row(
            params![
                &caller,
                key.as_ref(),
                &token[..],
                clock.now.saturating_add(clock.lease),
                clock.now
            ],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )
        .optional()?;
    Ok(taken.map(|(point, state, fingerprint, generation)| Lease {
        caller: *caller,
        key: key.clone(),
        token,
        point,
        state: state.unwrap_or_default(),
        fingerprint: Fingerprint::from_bytes(fingerprint),
        generation: generation.unsigned_abs(),
    }))
}

/// A record read from columns `first..first + 4`: fingerprint, status,
/// headers, body (the status is 0 for an unfinished record).
pub(super) fn record(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Record> {
    Ok(Record {
        fingerprint: Fingerprint::from_bytes(row.get(first)?),
        response: StoredResponse::from_stored(
            row.get::<_, Option<u16>>(first + 1)?.unwrap_or(0),
            row.get::<_, Option<String>>(first + 2)?.as_deref(),
            row.get::<_, Option<Vec<u8>>>(first + 3)?
                .unwrap_or_default(),
        ),
    })
}

/// Turns at most `limit` finished records expired by `now` into
/// tombstones, oldest first: the answer goes, the key's generation stays
/// until `now + tombstone_ttl` (its `expires_at` from then on); and deletes
/// as many tombstones whose own time is up. How many records expired.
pub(super) fn sweep(conn: &Connection, clock: Clock, limit: u32) -> rusqlite::Result<u64> {
    let expired = conn
        .prepare_cached(
            "UPDATE idempotency_keys
             SET recovery_point = 'expired', status = NULL, headers = NULL, body = NULL,
                 expires_at = expires_at + ?3
             WHERE (caller, key) IN (
               SELECT caller, key FROM idempotency_keys
               WHERE expires_at <= ?1 AND recovery_point = 'finished'
               ORDER BY expires_at LIMIT ?2)",
        )?
        .execute(params![clock.now, limit, clock.tombstone_ttl])?;
    conn.prepare_cached(
        "DELETE FROM idempotency_keys WHERE (caller, key) IN (
           SELECT caller, key FROM idempotency_keys
           WHERE expires_at <= ?1 AND recovery_point = 'expired'
           ORDER BY expires_at LIMIT ?2)",
    )?
    .execute(params![clock.now, limit])?;
    Ok(expired as u64)
}

/// Operations stopped at a recovery point whose lease ran out, but those
/// at the points in `skip` (a JSON array of strings).
pub(super) fn abandoned(
    conn: &Connection,
    now: i64,
    limit: u32,
    skip: &str,
) -> rusqlite::Result<Vec<(Vec<u8>, String, String)>> {
    conn.prepare_cached(
        "SELECT caller, key, recovery_point FROM idempotency_keys
         WHERE recovery_point <> 'finished' AND leased_until <= ?1
           AND recovery_point NOT IN (SELECT value FROM json_each(?3))
         ORDER BY leased_until LIMIT ?2",
    )?
    .query_map(params![now, limit, skip], |row| {
        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
    })?
    .collect()
}
