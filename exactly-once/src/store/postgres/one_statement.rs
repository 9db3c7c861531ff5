//! The one-statement first phase: an operation whose answer is known
//! before the database is touched and whose change cannot be refused (a
//! row and its answer, made before the database is touched) runs as part of its key's claim, in a single
//! statement that commits on its own. Requests that arrive together share
//! one such statement, a row each ([`super::batch`]): PostgreSQL's cost is
//! per statement and per commit far more than per row.

use super::cached;
use super::protocol::Clock;
use crate::record::StoredResponse;
use crate::store::{IdempotentRequest, StoreError};
use std::sync::OnceLock;
use tokio_postgres::types::ToSql;

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

/// The claim's own columns of each row, with their SQL types: the row's
/// number in the statement, then the key's record as it will be stored.
const CLAIM_COLUMNS: [(&str, &str); 7] = [
    ("n", "int4"),
    ("caller", "bytea"),
    ("key", "text"),
    ("fingerprint", "bytea"),
    ("status", "int2"),
    ("headers", "text"),
    ("body", "bytea"),
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
                .map(|(name, ty)| (name.to_string(), *ty));
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
/// key twice) as one statement that commits on its own; for each row,
/// whether its key was claimed (its answer is then the one recorded).
pub(super) async fn execute(
    client: &deadpool_postgres::Object,
    rows: &[Row<'_>],
    clock: Clock,
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
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &clock.ttl_secs,
        &numbers,
        &callers,
        &keys,
        &fingerprints,
        &statuses,
        &headers,
        &bodies,
    ];
    params.extend(own.iter().map(|column| column as &(dyn ToSql + Sync)));
    let statement = cached(client, shape.text())
        .await
        .map_err(StatementError::NotRun)?;
    let claimed_rows = client
        .query(&statement, &params)
        .await
        .map_err(StatementError::Failed)?;
    let mut claimed = vec![false; rows.len()];
    for row in claimed_rows {
        let n: i32 = row.get(0);
        claimed[usize::try_from(n).expect("a row's number")] = true;
    }
    Ok(claimed)
}

/// Why a statement of [`execute`] gave no answer.
pub(super) enum StatementError {
    /// It was never sent (preparing it failed).
    NotRun(StoreError),
    /// PostgreSQL answered with an error, or the connection broke while it
    /// ran (no SQLSTATE: its outcome is unknown).
    Failed(tokio_postgres::Error),
}
