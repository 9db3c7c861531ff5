//! The idempotency flow, top to bottom.
//!
//! 1. **At the edge** ([`Keyed`]): caller, key, fingerprint and chaos are
//!    parsed; a request refused there stores nothing.
//! 2. **Replay**: a finished record is read without waiting for the
//!    writer. Same fingerprint: the stored response again, byte for byte,
//!    with `Idempotent-Replayed: true`. Another fingerprint: 422
//!    ([`record::Record::verdict`]).
//! 3. **Claim, run, record** in one transaction
//!    ([`Store::execute`](crate::store::Store::execute)): the store looks
//!    again under its write lock, then claims the key, runs the operation
//!    and records its response together, and answers once that commit is
//!    durable. A concurrent duplicate therefore either finds the finished
//!    record (and replays it) or, on a backend where a transaction can be
//!    seen in flight, gets 409 with `Retry-After`. Never a second run. A
//!    failure anywhere rolls back everything: 503 or 500, and a retry runs
//!    afresh.
//! 4. **Answer**, after the one chaos hook ([`Chaos::after_commit`]).
//!
//! One atomic phase is enough while everything the operation changes lives
//! in the same database as its key: the transaction makes "the work
//! happened" and "the answer is recorded" one fact. An operation that calls
//! something outside the database (a payment provider) cannot be inside
//! that transaction; it runs in phases instead, each phase a transaction
//! that records how far the operation got (its recovery point), with the
//! outside call between phases carrying its own idempotency key.

pub mod keyed;
pub mod record;

pub use keyed::{Keyed, MAX_BODY_BYTES};

use crate::domain::{Caller, IdempotencyKey};
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::{Execution, Operation};
use axum::body::Body;
use axum::response::Response;
use http::{HeaderName, HeaderValue, StatusCode};
use record::{StoredResponse, Verdict};
use std::sync::Arc;

/// The header that marks a replayed answer.
pub static IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Runs the request's operation at most once for its key and answers.
///
/// `parse` turns the body into the route's operation. It is called only
/// when the key has no finished record, so a key reused with another
/// request is a 422 even when that request would not parse.
pub async fn run(
    state: &AppState,
    keyed: Keyed,
    parse: impl FnOnce(&serde_json::Value) -> Result<Arc<dyn Operation>, ApiError>,
) -> Result<Response, ApiError> {
    let Keyed {
        request,
        body,
        chaos,
    } = keyed;
    let (caller, key) = (request.caller, request.key.clone());

    if let Some(record) = state.store.lookup(&caller, &key).await? {
        return answer(state, &caller, &key, record.verdict(&request.fingerprint));
    }

    let operation = parse(&body)?;
    match state
        .store
        .execute(request, operation, chaos.finish())
        .await?
    {
        Execution::Ran(response) => {
            state.metrics.executed();
            tracing::info!(%caller, %key, status = response.status, "executed");
            chaos.after_commit().await?;
            Ok(respond(response, false))
        }
        Execution::Found(verdict) => answer(state, &caller, &key, verdict),
        Execution::InUse => {
            state.metrics.in_conflict();
            tracing::info!(%caller, %key, "refused: first request still running");
            Err(ApiError::IdempotencyKeyInUse)
        }
        Execution::RolledBack => {
            tracing::warn!(%caller, %key, "chaos: rolled back before commit, dropping the connection");
            chaos.drop_connection().await
        }
    }
}

/// The answer to a request that found a finished record of its key.
fn answer(
    state: &AppState,
    caller: &Caller,
    key: &IdempotencyKey,
    verdict: Verdict,
) -> Result<Response, ApiError> {
    match verdict {
        Verdict::Replay(response) => {
            state.metrics.replayed();
            tracing::info!(%caller, %key, status = response.status, "replayed");
            Ok(respond(response, true))
        }
        Verdict::Mismatch => {
            state.metrics.mismatched();
            tracing::info!(%caller, %key, "refused: key reused with another request");
            Err(ApiError::IdempotencyKeyMismatch)
        }
    }
}

/// Builds the HTTP answer from a stored response.
pub fn respond(stored: StoredResponse, replayed: bool) -> Response {
    let mut response = Response::new(Body::from(stored.body));
    *response.status_mut() =
        StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    for (name, value) in &stored.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            headers.append(name, value);
        }
    }
    if replayed {
        headers.insert(
            IDEMPOTENT_REPLAYED.clone(),
            HeaderValue::from_static("true"),
        );
    }
    response
}
