//! The idempotency flow, top to bottom.
//!
//! 1. **At the edge** ([`Keyed`]): caller, key, fingerprint and chaos are
//!    parsed; a request refused there stores nothing.
//! 2. **Replay from memory**: a finished record this process has seen
//!    lately ([`cache`]) answers at once. Same fingerprint: the stored
//!    response again, byte for byte, with `Idempotent-Replayed: true`.
//!    Another fingerprint: 422 ([`record::Record::verdict`]).
//! 3. **Claim, run, record** in one transaction
//!    ([`Store::execute`](crate::store::Store::execute)): the store looks
//!    again under its write lock, then claims the key, runs the operation
//!    and records its response together, and answers once that commit is
//!    durable. A concurrent duplicate therefore either finds the finished
//!    record (and replays it) or, on a backend where a transaction can be
//!    seen in flight, gets 409 with `Retry-After`. Never a second run. A
//!    failure anywhere rolls back everything: 503 or 500, and a retry runs
//!    afresh.
//! 4. **Phases**: an operation that calls something outside the database
//!    stops at a recovery point instead of finishing; the request then runs
//!    it to its end ([`phases`]), each later phase under a lease.
//! 5. **Answer**, after the chaos hook
//!    ([`Chaos::after_commit`](crate::chaos::Chaos::after_commit)).
//!
//! One atomic phase is enough while everything the operation changes lives
//! in the same database as its key: the transaction makes "the work
//! happened" and "the answer is recorded" one fact. An operation that calls
//! something outside the database (a payment provider) cannot be inside
//! that transaction; it runs in phases instead, each phase a transaction
//! that records how far the operation got (its recovery point), with the
//! outside call between phases carrying its own idempotency key.
//!
//! Every log line of a keyed request carries its operation (`op`, a hash of
//! caller and key, never the token); the lines of a later phase carry the
//! recovery point it started from (`phase{point=…}`).

pub mod cache;
pub mod keyed;
pub mod phases;
pub mod record;

pub use keyed::{Keyed, MAX_BODY_BYTES};

use crate::chaos::Chaos;
use crate::clock::BootInstant;
use crate::domain::OperationId;
use crate::error::ApiError;
use crate::metrics::ResumedBy;
use crate::state::AppState;
use crate::store::{Execution, FirstPhase, Operation};
use axum::body::Body;
use axum::response::Response;
use http::{HeaderName, HeaderValue, StatusCode};
use phases::Ended;
use record::{Lease, Record, StoredResponse, Verdict};
use std::sync::Arc;
use tracing::Instrument;

/// The header that marks a replayed answer.
pub static IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Runs the request's operation at most once for its key and answers.
///
/// `parse` turns the body into the route's operation. When it refuses the
/// body, the key's record is looked up first, so a key reused with another
/// request is a 422 even when that request would not parse.
pub async fn run(
    state: &AppState,
    keyed: Keyed,
    parse: impl FnOnce(&serde_json::Value) -> Result<Arc<dyn Operation>, ApiError>,
) -> Result<Response, ApiError> {
    // The operation's hash is worked out only when its logs are wanted.
    let span = if tracing::enabled!(tracing::Level::INFO) {
        let caller = keyed.request.caller;
        let id = OperationId::new(&caller, &keyed.request.key);
        tracing::info_span!("operation", %caller, op = %id)
    } else {
        tracing::Span::none()
    };
    run_in_span(state, keyed, parse).instrument(span).await
}

async fn run_in_span(
    state: &AppState,
    keyed: Keyed,
    parse: impl FnOnce(&serde_json::Value) -> Result<Arc<dyn Operation>, ApiError>,
) -> Result<Response, ApiError> {
    let Keyed {
        request,
        body,
        chaos,
    } = keyed;
    let (caller, key, fingerprint) = (request.caller, request.key.clone(), request.fingerprint);
    let epoch = state.store.epoch();
    if let Some(record) = state.cache.get(&caller, &key, epoch) {
        return answer(state, record.verdict(&fingerprint));
    }

    let operation = match parse(&body) {
        Ok(operation) => operation,
        // The record decides before the body's fields do: a key reused
        // with a body that does not even parse is a 422, not a 400.
        Err(refused) => {
            let since = BootInstant::now();
            return match state.store.lookup(&caller, &key).await? {
                Some(found) => {
                    state
                        .cache
                        .put(&caller, &key, &found.record, since, found.life, epoch);
                    answer(state, found.record.verdict(&fingerprint))
                }
                // Unfinished, the key's operation is another request all
                // the same: 422, as it is once finished.
                None => match state.store.unfinished(&caller, &key).await? {
                    Some(running) if running != fingerprint => answer(state, Verdict::Mismatch),
                    _ => Err(refused),
                },
            };
        }
    };
    let since = BootInstant::now();
    match state
        .store
        .execute(FirstPhase {
            request,
            operation,
            finish: chaos.finish(),
        })
        .await?
    {
        Execution::Ran(response) => {
            state.metrics.executed();
            tracing::info!(status = response.status, "executed");
            let record = Record {
                fingerprint,
                response,
            };
            let life = state.store.key_ttl();
            state.cache.put(&caller, &key, &record, since, life, epoch);
            finished(record.response, &chaos).await
        }
        Execution::Stopped(lease) => {
            state.metrics.executed();
            tracing::info!(point = lease.point.as_str(), "started");
            go_on(state, lease, &chaos).await
        }
        Execution::Resumed(lease) => {
            state.metrics.resumed(ResumedBy::retry);
            tracing::info!(
                point = lease.point.as_str(),
                "resuming an abandoned operation"
            );
            go_on(state, lease, &chaos).await
        }
        Execution::Found(found) => {
            state
                .cache
                .put(&caller, &key, &found.record, since, found.life, epoch);
            answer(state, found.record.verdict(&fingerprint))
        }
        Execution::Mismatch => answer(state, Verdict::Mismatch),
        Execution::InUse => {
            state.metrics.in_conflict();
            tracing::info!("refused: the key's operation is running");
            Err(ApiError::IdempotencyKeyInUse)
        }
        Execution::RolledBack => {
            tracing::warn!("chaos: rolled back before commit, dropping the connection");
            chaos.drop_connection().await
        }
    }
}

/// Runs a stopped operation to its end and answers; if another holder got
/// the lease meanwhile, answers what the record says now.
///
/// The operation's start is committed, so whatever fails from here on is
/// answered as what it is: the outcome is not known yet, and the same key
/// sent again gets it ([`ApiError::in_later_phase`]), never "nothing was
/// done".
async fn go_on(state: &AppState, lease: Lease, chaos: &Chaos) -> Result<Response, ApiError> {
    let (caller, key) = (lease.caller, lease.key.clone());
    let ended = phases::run_to_end(state, lease, chaos)
        .await
        .map_err(ApiError::in_later_phase)?;
    match ended {
        Ended::Finished(response) => finished(response, chaos).await,
        Ended::LeaseLost => match state.store.lookup(&caller, &key).await {
            // Another holder finished it: its answer is this request's first
            // (so not marked replayed).
            Ok(Some(found)) => Ok(respond(found.record.response, false)),
            Ok(None) => {
                state.metrics.in_conflict();
                Err(ApiError::IdempotencyKeyInUse)
            }
            Err(e) => Err(ApiError::from(e).in_later_phase()),
        },
    }
}

/// The operation finished and its answer is committed: answer, after the
/// chaos hook.
async fn finished(response: StoredResponse, chaos: &Chaos) -> Result<Response, ApiError> {
    chaos.after_commit().await?;
    Ok(respond(response, false))
}

/// The answer to a request that found a finished record of its key.
fn answer(state: &AppState, verdict: Verdict) -> Result<Response, ApiError> {
    match verdict {
        Verdict::Replay(response) => {
            state.metrics.replayed();
            tracing::info!(status = response.status, "replayed");
            Ok(respond(response, true))
        }
        Verdict::Mismatch => {
            state.metrics.mismatched();
            tracing::info!("refused: key reused with another request");
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
