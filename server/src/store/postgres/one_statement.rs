//! The one-statement first phase: an operation whose answer is known
//! before the database is touched and whose change cannot be refused (a
//! charge without a provider) runs as part of its key's claim, in a single
//! statement that commits on its own.

use super::cached;
use super::protocol::{decide, in_use_or, Clock};
use crate::idempotency::record::StoredResponse;
use crate::store::Result;
use crate::store::{Execution, IdempotentRequest, StoreError};
use tokio_postgres::types::ToSql;

/// The whole statement of a [`OneStatement`], written at compile time:
/// `one_statement!(CTE, ...)` with string literals (or macros that expand
/// to them), each `name AS (...)`; the macro puts the commas between
/// them. It starts with the new key's claim, which also records the
/// (already known) answer: a finished, expired record counts as absent and
/// the claim replaces it; a live one is left alone (and its transaction,
/// if still running, waited for). The CTEs insert `FROM claim`, so only
/// when the key was claimed, numbering their parameters from `$8`.
macro_rules! one_statement {
    ($first:expr $(, $cte:expr)* $(,)?) => {
        concat!(
            "WITH claim AS (INSERT INTO idempotency_keys
               (caller, key, fingerprint, recovery_point, status, headers, body, created_at,
                expires_at)
             VALUES ($1, $2, $3, 'finished', $4, $5, $6, now(), now() + $7 * interval '1 second')
             ON CONFLICT (caller, key) DO UPDATE
               SET fingerprint = EXCLUDED.fingerprint, recovery_point = 'finished', state = NULL,
                   lease_token = NULL, leased_until = NULL, status = EXCLUDED.status,
                   headers = EXCLUDED.headers, body = EXCLUDED.body,
                   created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
               WHERE idempotency_keys.recovery_point = 'finished'
                 AND idempotency_keys.expires_at <= now()
             RETURNING 1), ",
            $first,
            $(", ", $cte,)*
            " SELECT count(*) FROM claim"
        )
    };
}
pub(super) use one_statement;

/// An operation whose answer is known before the database is touched and
/// whose change cannot be refused (a charge without a provider) runs as
/// part of its key's claim: one statement, one round trip, committed on its
/// own.
pub struct OneStatement {
    /// From [`one_statement!`]: a fixed text, so it is also the key of
    /// each connection's prepared-statement cache.
    pub statement: &'static str,
    /// `$8` onwards.
    pub params: Vec<Box<dyn ToSql + Sync + Send>>,
    /// The answer recorded with the key.
    pub response: StoredResponse,
}

/// The one-statement path of [`OneStatement`]: claimed, the answer is the
/// one recorded; not claimed, the key's record decides.
pub(super) async fn execute_one_statement(
    client: &deadpool_postgres::Object,
    request: &IdempotentRequest,
    one: OneStatement,
    clock: Clock,
) -> Result<Execution> {
    let response = &one.response;
    let status = response.status as i16;
    let headers = response.encoded_headers();
    let body = &response.body[..];
    let key: &str = request.key.as_ref();
    let fingerprint = &request.fingerprint.as_bytes()[..];
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &request.caller,
        &key,
        &fingerprint,
        &status,
        &headers,
        &body,
        &clock.ttl_secs,
    ];
    params.extend(one.params.iter().map(|p| &**p as &(dyn ToSql + Sync)));
    let statement = cached(client, one.statement).await?;
    let claimed = match client.query_one(&statement, &params).await {
        // The statement commits on its own: a connection that breaks while
        // it runs leaves its outcome unknown, as during a COMMIT.
        Err(e) if e.code().is_none() => {
            return Err(StoreError::outcome_unknown(
                "the connection broke during a statement that commits on its own",
            )
            .caused_by(e))
        }
        claimed => claimed,
    };
    match in_use_or(claimed)? {
        None => Ok(Execution::InUse),
        Some(row) if row.get::<_, i64>(0) == 1 => Ok(Execution::Ran(one.response)),
        Some(_) => decide(client, request, clock).await,
    }
}
