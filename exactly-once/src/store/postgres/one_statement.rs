//! The one-statement first phase: an operation whose answer is known
//! before the database is touched and whose change cannot be refused (a
//! row and its answer, made before the database is touched) runs as part of its key's claim, in a single
//! statement that commits on its own. Requests that arrive together share
//! one such statement, a row each ([`super::batch`]): PostgreSQL's cost is
//! per statement and per commit far more than per row.

use super::protocol::Clock;
use super::LOCK_TIMEOUT;
use crate::record::StoredResponse;
use crate::store::IdempotentRequest;
use std::sync::OnceLock;
use tokio_postgres::types::{ToSql, Type};

/// Most requests in one statement. A statement's rows are written one
/// after another by one backend, and each of its requests waits for the
/// last: with [`super::batch`]'s four statements at once, 8 rows keep 32
/// requests in flight over four backends instead of one. Measured on 2
/// cores against the minimal idempotent floor, 2 M records, 32 connections
/// (docs/BENCHMARKS.md, "Issue 28's tail is the statement"): with one
/// other busy process on the machine, p99 a median 1.11× the floor's
/// against 64 rows' 1.54×, and 1.11× its new keys a second against 0.95×.
/// On an idle machine the two are alike on 2 M records; on a fresh
/// database 8 rows were ahead.
pub(super) const MAX_ROWS: usize = 8;

/// The claim's own columns of each row, with their SQL types (and those of
/// the arrays that carry them): the row's number in the statement, then
/// the key's record as it will be stored.
const CLAIM_COLUMNS: [(&str, &str, Type); 7] = [
    ("n", "int4", Type::INT4_ARRAY),
    ("caller", "bytea", Type::BYTEA_ARRAY),
    ("key", "text", Type::TEXT_ARRAY),
    ("fingerprint", "bytea", Type::BYTEA_ARRAY),
    ("status", "int2", Type::INT2_ARRAY),
    ("headers", "text", Type::TEXT_ARRAY),
    ("body", "bytea", Type::BYTEA_ARRAY),
];

/// What an operation adds to its key's claim: its own columns, named `c1`,
/// `c2`, … in each row (given here by SQL type; their values travel as
/// text), and the CTEs that write them, each `name AS (INSERT … SELECT …
/// FROM claimed …)`. `claimed` holds the rows whose key was claimed
/// (`caller`, `key`, `c1`, …, each column of its type), so nothing is
/// written for a key that another request holds.
pub struct Shape {
    columns: &'static [&'static str],
    ctes: &'static [&'static str],
    /// The statement's text, written once.
    text: OnceLock<String>,
}

impl Shape {
    /// A shape with `columns` (SQL types) written by `ctes`.
    pub const fn new(columns: &'static [&'static str], ctes: &'static [&'static str]) -> Self {
        Self {
            columns,
            ctes,
            text: OnceLock::new(),
        }
    }

    /// An operation of this shape, with its columns' values (as text,
    /// `None` for NULL, one per column) and the answer it records.
    pub fn with(
        &'static self,
        params: Vec<Option<String>>,
        response: StoredResponse,
    ) -> OneStatement {
        assert_eq!(params.len(), self.columns.len(), "one value per column");
        OneStatement {
            shape: self,
            params,
            response,
        }
    }

    /// The statement, for any number of rows: `$1` is the TTL in seconds,
    /// then one array per column ([`CLAIM_COLUMNS`], then the operation's
    /// as text), a row being the same index in every array. One text per
    /// shape, so each connection prepares it once whatever the number of
    /// rows. The claim also records the (already known) answer: a
    /// finished, expired record (or its tombstone) counts as absent and the
    /// claim replaces it, as the key's next generation;
    /// a live one is left alone (and its transaction, if still running,
    /// waited for). Rows are claimed in key order, so two statements that
    /// share keys take their locks in the same order and never deadlock.
    /// It returns the numbers of the rows claimed.
    fn text(&self) -> &str {
        self.text.get_or_init(|| {
            let claim = CLAIM_COLUMNS
                .iter()
                .map(|(name, ty, _)| (name.to_string(), *ty));
            let own = (1..=self.columns.len()).map(|i| (format!("c{i}"), "text"));
            let (names, arrays): (Vec<String>, Vec<String>) = claim
                .chain(own)
                .enumerate()
                .map(|(i, (name, ty))| (name, format!("${}::{ty}[]", i + 2)))
                .unzip();
            let typed: Vec<String> = self
                .columns
                .iter()
                .enumerate()
                .map(|(i, ty)| format!("c{n}::{ty} AS c{n}", n = i + 1))
                .collect();
            format!(
                "WITH input AS (SELECT * FROM unnest({arrays}) AS input ({names})),
                 claim AS (INSERT INTO idempotency_keys
                     (caller, key, fingerprint, recovery_point, status, headers, body,
                      created_at, expires_at)
                   SELECT caller, key, fingerprint, 'finished', status, headers, body, now(),
                          now() + $1::float8 * interval '1 second'
                   FROM input ORDER BY caller, key
                   ON CONFLICT (caller, key) DO UPDATE
                     SET fingerprint = EXCLUDED.fingerprint, recovery_point = 'finished',
                         state = NULL, lease_token = NULL, leased_until = NULL,
                         status = EXCLUDED.status, headers = EXCLUDED.headers,
                         body = EXCLUDED.body, created_at = EXCLUDED.created_at,
                         expires_at = EXCLUDED.expires_at, attempts = 0, last_error = NULL,
                         attention = NULL, generation = idempotency_keys.generation + 1
                     WHERE (idempotency_keys.recovery_point = 'finished'
                            AND idempotency_keys.expires_at <= now())
                        OR idempotency_keys.recovery_point = 'expired'
                   RETURNING caller, key),
                 claimed AS (SELECT n, caller, key, {typed}
                             FROM input JOIN claim USING (caller, key)),
                 {ctes}
                 SELECT n FROM claimed",
                arrays = arrays.join(", "),
                names = names.join(", "),
                typed = typed.join(", "),
                ctes = self.ctes.join(", "),
            )
        })
    }
}

/// An operation whose answer is known before the database is touched and
/// whose change cannot be refused (an insert of rows made in advance) runs as
/// part of its key's claim: one statement, one round trip, committed on its
/// own, shared with the requests that arrive with it.
pub struct OneStatement {
    /// The operation's columns and CTEs; requests of one shape share a
    /// statement.
    pub(super) shape: &'static Shape,
    /// The values of the shape's columns, in order, as text (`None`:
    /// NULL); the statement casts each to its column's type.
    params: Vec<Option<String>>,
    /// The answer recorded with the key.
    pub(super) response: StoredResponse,
}

/// One request's row: its key and its operation's statement.
pub(super) struct Row<'a> {
    pub(super) request: &'a IdempotentRequest,
    pub(super) one: &'a OneStatement,
}

/// Runs `rows` (at least one, at most [`MAX_ROWS`], all of one shape, no
/// key twice) as one statement that commits on its own, waiting at most
/// `lock_timeout` for a key another transaction holds; for each row,
/// whether its key was claimed (its answer is then the one recorded).
///
/// Behind a pooler in transaction mode (`pgbouncer=true`) the connection
/// carries no settings of its own, so the statement runs in a transaction
/// that sets them (`SET LOCAL`), its `BEGIN`, statement and `COMMIT` sent
/// together: still one round trip.
pub(super) async fn execute(
    client: &tokio_postgres::Client,
    rows: &[Row<'_>],
    clock: Clock,
    lock_timeout: &str,
) -> std::result::Result<Vec<bool>, StatementError> {
    let shape = rows[0].one.shape;
    let count = i32::try_from(rows.len()).expect("at most MAX_ROWS rows");
    let numbers: Vec<i32> = (0..count).collect();
    let callers: Vec<&[u8]> = rows
        .iter()
        .map(|r| &r.request.caller.as_bytes()[..])
        .collect();
    let keys: Vec<&str> = rows.iter().map(|r| r.request.key.as_ref()).collect();
    let fingerprints: Vec<&[u8]> = rows
        .iter()
        .map(|r| &r.request.fingerprint.as_bytes()[..])
        .collect();
    let statuses: Vec<i16> = rows.iter().map(|r| r.one.response.status as i16).collect();
    let headers: Vec<Option<String>> = rows
        .iter()
        .map(|r| r.one.response.encoded_headers())
        .collect();
    let bodies: Vec<&[u8]> = rows.iter().map(|r| &r.one.response.body[..]).collect();
    let own: Vec<Vec<Option<&str>>> = (0..shape.columns.len())
        .map(|column| {
            rows.iter()
                .map(|r| r.one.params[column].as_deref())
                .collect()
        })
        .collect();
    let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![
        (&clock.ttl_secs, Type::FLOAT8),
        (&numbers, Type::INT4_ARRAY),
        (&callers, Type::BYTEA_ARRAY),
        (&keys, Type::TEXT_ARRAY),
        (&fingerprints, Type::BYTEA_ARRAY),
        (&statuses, Type::INT2_ARRAY),
        (&headers, Type::TEXT_ARRAY),
        (&bodies, Type::BYTEA_ARRAY),
    ];
    debug_assert_eq!(params.len(), 1 + CLAIM_COLUMNS.len());
    params.extend(
        own.iter()
            .map(|column| (column as &(dyn ToSql + Sync), Type::TEXT_ARRAY)),
    );
    let claimed_rows = match clock.session.per_transaction(lock_timeout) {
        // The connection's own session, set at its start, for the usual
        // wait; a shorter one is set around this statement.
        None if lock_timeout == LOCK_TIMEOUT => client
            .query_typed(shape.text(), &params)
            .await
            .map_err(StatementError::Failed)?,
        None => {
            let set = |timeout: &str| format!("SET lock_timeout = '{timeout}'");
            client
                .batch_execute(&set(lock_timeout))
                .await
                .map_err(StatementError::NotRun)?;
            let rows = client.query_typed(shape.text(), &params).await;
            // If this fails the connection is broken, and the pool drops it.
            let _ = client.batch_execute(&set(LOCK_TIMEOUT)).await;
            rows.map_err(StatementError::Failed)?
        }
        Some(settings) => {
            let begin = format!("BEGIN; {settings}");
            let (began, rows, committed) = futures_util::future::join3(
                client.batch_execute(&begin),
                client.query_typed(shape.text(), &params),
                client.batch_execute("COMMIT"),
            )
            .await;
            began.map_err(StatementError::NotRun)?;
            let rows = rows.map_err(StatementError::Failed)?;
            committed.map_err(StatementError::Failed)?;
            rows
        }
    };
    let mut claimed = vec![false; rows.len()];
    for row in claimed_rows {
        let n: i32 = row.get(0);
        claimed[usize::try_from(n).expect("a row's number")] = true;
    }
    Ok(claimed)
}

/// Why a statement of [`execute`] gave no answer.
pub(super) enum StatementError {
    /// It never ran (the transaction around it could not begin).
    NotRun(tokio_postgres::Error),
    /// PostgreSQL answered with an error, or the connection broke while it
    /// ran (no SQLSTATE: its outcome is unknown).
    Failed(tokio_postgres::Error),
}
