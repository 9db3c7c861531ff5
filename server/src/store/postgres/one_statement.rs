//! The one-statement first phase: an operation whose answer is known
//! before the database is touched and whose change cannot be refused (a
//! charge without a provider) runs as part of its key's claim, in a single
//! statement that commits on its own. Requests that arrive together share
//! one such statement, a row each ([`super::batch`]): PostgreSQL's cost is
//! per statement and per commit far more than per row.

use super::cached;
use super::protocol::Clock;
use crate::idempotency::record::StoredResponse;
use crate::store::{IdempotentRequest, StoreError};
use std::fmt::Write as _;
use std::sync::OnceLock;
use tokio_postgres::types::ToSql;

/// Most requests in one statement.
pub(super) const MAX_ROWS: usize = 64;

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
/// `c2`, … in each row (given here by SQL type), and the CTEs that write
/// them, each `name AS (INSERT … SELECT … FROM claimed …)`. `claimed` holds
/// the rows whose key was claimed (`caller`, `key`, `c1`, …), so nothing
/// is written for a key that another request holds.
pub struct Shape {
    columns: &'static [&'static str],
    ctes: &'static [&'static str],
    /// The statement's text for each number of rows, written once.
    texts: [OnceLock<String>; MAX_ROWS],
}

impl Shape {
    /// A shape with `columns` (SQL types) written by `ctes`.
    pub const fn new(columns: &'static [&'static str], ctes: &'static [&'static str]) -> Self {
        Self {
            columns,
            ctes,
            texts: [const { OnceLock::new() }; MAX_ROWS],
        }
    }

    /// The statement for `rows` requests (1 to [`MAX_ROWS`]): `$1` is the
    /// TTL in seconds, then each row's [`CLAIM_COLUMNS`] and the
    /// operation's columns. The claim also records the (already known)
    /// answer: a finished, expired record counts as absent and the claim
    /// replaces it; a live one is left alone (and its transaction, if still
    /// running, waited for). Rows are claimed in key order, so two
    /// statements that share keys take their locks in the same order and
    /// never deadlock. It returns the numbers of the rows claimed.
    fn text(&self, rows: usize) -> &str {
        self.texts[rows - 1].get_or_init(|| {
            let types: Vec<&str> = CLAIM_COLUMNS
                .iter()
                .map(|(_, ty)| *ty)
                .chain(self.columns.iter().copied())
                .collect();
            let names: Vec<String> = CLAIM_COLUMNS
                .iter()
                .map(|(name, _)| (*name).to_owned())
                .chain((1..=self.columns.len()).map(|i| format!("c{i}")))
                .collect();
            let mut values = String::new();
            for row in 0..rows {
                values.push_str(if row == 0 { "(" } else { ", (" });
                for (i, ty) in types.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    let _ = write!(values, "{sep}${}::{ty}", 2 + row * types.len() + i);
                }
                values.push(')');
            }
            format!(
                "WITH input ({names}) AS (VALUES {values}),
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
                         expires_at = EXCLUDED.expires_at
                     WHERE idempotency_keys.recovery_point = 'finished'
                       AND idempotency_keys.expires_at <= now()
                   RETURNING caller, key),
                 claimed AS (SELECT input.* FROM input JOIN claim USING (caller, key)),
                 {ctes}
                 SELECT n FROM claimed",
                names = names.join(", "),
                ctes = self.ctes.join(", "),
            )
        })
    }
}

/// An operation whose answer is known before the database is touched and
/// whose change cannot be refused (a charge without a provider) runs as
/// part of its key's claim: one statement, one round trip, committed on its
/// own, shared with the requests that arrive with it.
pub struct OneStatement {
    /// The operation's columns and CTEs; requests of one shape share a
    /// statement.
    pub shape: &'static Shape,
    /// The values of the shape's columns, in order.
    pub params: Vec<Box<dyn ToSql + Sync + Send>>,
    /// The answer recorded with the key.
    pub response: StoredResponse,
}

/// One request's row: its key and its operation's statement.
pub(super) struct Row<'a> {
    pub(super) request: &'a IdempotentRequest,
    pub(super) one: &'a OneStatement,
}

/// The claim's values of one row, owned while the statement runs.
struct ClaimValues<'a> {
    n: i32,
    key: &'a str,
    fingerprint: &'a [u8],
    status: i16,
    headers: Option<String>,
    body: &'a [u8],
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
    let values: Vec<ClaimValues<'_>> = rows
        .iter()
        .enumerate()
        .map(|(n, row)| ClaimValues {
            n: i32::try_from(n).expect("at most MAX_ROWS rows"),
            key: row.request.key.as_ref(),
            fingerprint: &row.request.fingerprint.as_bytes()[..],
            status: row.one.response.status as i16,
            headers: row.one.response.encoded_headers(),
            body: &row.one.response.body[..],
        })
        .collect();
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&clock.ttl_secs];
    for (row, claim) in rows.iter().zip(&values) {
        params.extend([
            &claim.n as &(dyn ToSql + Sync),
            &row.request.caller,
            &claim.key,
            &claim.fingerprint,
            &claim.status,
            &claim.headers,
            &claim.body,
        ]);
        params.extend(row.one.params.iter().map(|p| &**p as &(dyn ToSql + Sync)));
    }
    let statement = cached(client, shape.text(rows.len()))
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
