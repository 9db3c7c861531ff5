//! The idempotency flow, top to bottom.
//!
//! 1. **At the edge** ([`Keyed`]): caller, key, fingerprint and hooks are
//!    parsed; a request refused there stores nothing.
//! 2. **Replay from memory**: a finished record this process has seen
//!    lately ([`cache`]) answers at once. Same fingerprint: the stored
//!    response again, byte for byte, with `Idempotent-Replayed: true`.
//!    Another fingerprint: 422 ([`record::Record::verdict`]).
//! 3. **Claim, run, record** in one transaction
//!    ([`Store::execute`]): the store looks
//!    again under its write lock, then claims the key, runs the operation
//!    and records its response together, and answers once that commit is
//!    durable. A concurrent duplicate therefore either finds the finished
//!    record (and replays it) or, on a backend where a transaction can be
//!    seen in flight, gets 409 with `Retry-After`. Never a second run. A
//!    failure anywhere rolls back everything: 503 or 500, and a retry runs
//!    afresh.
//! 4. **Phases**: an operation that calls something outside the database
//!    stops at a recovery point instead of finishing; the request then runs
//!    it to its end ([`steps`]), each later phase under a lease.
//! 5. **Answer**, after the hook ([`Hooks::after_commit`]).
//!
//! One atomic phase is enough while everything the operation changes lives
//! in the same database as its key: the transaction makes "the work
//! happened" and "the answer is recorded" one fact. An operation that calls
//! something outside the database (a partner's API) cannot be inside
//! that transaction; it runs in phases instead, each phase a transaction
//! that records how far the operation got (its recovery point), with the
//! outside call between phases carrying its own idempotency key.
//!
//! Every log line of a keyed request carries its operation (`op`, a hash of
//! caller and key, never the token); the lines of a later phase carry the
//! recovery point it started from (`phase{point=…}`).

pub(crate) mod cache;
pub(crate) mod keyed;
pub(crate) mod steps;

use crate::clock::BootInstant;
use crate::error::Error;
use crate::hooks::Hooks;
use crate::metrics::ResumedBy;
use crate::record::{Lease, Record, StoredResponse, Verdict};
use crate::store::{Execution, FirstPhase, Operation};
use crate::{Engine, Keyed, OperationId};
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderName, HeaderValue, StatusCode};
use std::sync::Arc;
use steps::Ended;
use tracing::Instrument;

/// The header that marks a replayed answer.
pub static IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

impl Engine {
    /// Runs the request's operation at most once for its key and answers:
    /// the operation's own answer, the stored one again for a retry, or the
    /// engine's refusal (422, 409, 503) as `application/problem+json`.
    ///
    /// `parse` turns the body into the route's operation; its refusal (your
    /// error, a 400 say) is answered as it renders. When it refuses the
    /// body, the key's record is looked up first, so a key reused with
    /// another request is a 422 even when that request would not parse.
    pub async fn run<C, H, O, E>(
        &self,
        keyed: Keyed<C, H>,
        parse: impl FnOnce(&serde_json::Value) -> Result<O, E>,
    ) -> Response
    where
        H: Hooks,
        O: Operation,
        E: IntoResponse,
    {
        // The operation's hash is worked out only when its logs are wanted.
        let span = if tracing::enabled!(tracing::Level::INFO) {
            let caller = keyed.request.caller;
            let id = OperationId::new(&caller, &keyed.request.key);
            tracing::info_span!("operation", %caller, op = %id)
        } else {
            tracing::Span::none()
        };
        let parse = |body: &serde_json::Value| -> Result<Arc<dyn Operation>, Box<Response>> {
            match parse(body) {
                Ok(operation) => Ok(Arc::new(operation)),
                Err(refused) => Err(Box::new(refused.into_response())),
            }
        };
        match run_in_span(self, keyed, parse).instrument(span).await {
            Ok(response) => response,
            Err(error) => error.into_response(),
        }
    }
}

async fn run_in_span<C, H: Hooks>(
    state: &Engine,
    keyed: Keyed<C, H>,
    parse: impl FnOnce(&serde_json::Value) -> Result<Arc<dyn Operation>, Box<Response>>,
) -> Result<Response, Error> {
    let Keyed {
        request,
        body,
        hooks,
        ..
    } = keyed;
    let hooks: &dyn Hooks = &hooks;
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
                    _ => Ok(*refused),
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
            finish: hooks.finish(),
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
            finished(record.response, hooks).await
        }
        Execution::Stopped(lease) => {
            state.metrics.executed();
            tracing::info!(point = lease.point.as_str(), "started");
            go_on(state, lease, hooks).await
        }
        Execution::Resumed(lease) if !state.steps.knows(&lease.point) => {
            steps::leave_to_another_release(state, &lease).await;
            Err(steps::not_known(&lease.point))
        }
        Execution::Resumed(lease) => {
            state.metrics.resumed(ResumedBy::retry);
            tracing::info!(
                point = lease.point.as_str(),
                "resuming an abandoned operation"
            );
            go_on(state, lease, hooks).await
        }
        Execution::Found(found) => {
            state
                .cache
                .put(&caller, &key, &found.record, since, found.life, epoch);
            answer(state, found.record.verdict(&fingerprint))
        }
        Execution::Mismatch => answer(state, Verdict::Mismatch),
        Execution::NeedsAttention(reason) => {
            tracing::info!(%reason, "refused: the key's operation is set aside for an operator");
            Err(Error::OperationNeedsAttention)
        }
        Execution::InUse => {
            state.metrics.in_conflict();
            tracing::info!("refused: the key's operation is running");
            Err(Error::IdempotencyKeyInUse)
        }
        Execution::RolledBack => {
            tracing::warn!("rolled back before commit on purpose");
            hooks.rolled_back().await?;
            Err(Error::Unavailable(
                "the transaction was rolled back on purpose".into(),
            ))
        }
    }
}

/// Runs a stopped operation to its end and answers; if another holder got
/// the lease meanwhile, answers what the record says now.
///
/// The operation's start is committed, so whatever fails from here on is
/// answered as what it is: the outcome is not known yet, and the same key
/// sent again gets it ([`Error::in_later_phase`]), never "nothing was
/// done".
async fn go_on(state: &Engine, lease: Lease, hooks: &dyn Hooks) -> Result<Response, Error> {
    let (caller, key) = (lease.caller, lease.key.clone());
    let ended = steps::run_to_end(state, lease, hooks)
        .await
        .map_err(Error::in_later_phase)?;
    match ended {
        Ended::Finished(response) => finished(response, hooks).await,
        Ended::LeaseLost => taken_over(state, &caller, &key).await,
        Ended::NotKnown(point) => Err(steps::not_known(&point)),
    }
}

/// How long a request whose lease another holder took waits for that
/// holder's answer before it answers 409.
const WAIT_FOR_HOLDER: std::time::Duration = std::time::Duration::from_secs(5);

/// The answer of a request whose operation another holder took over (its
/// lease could not be renewed in time): that holder's answer, once it has
/// recorded one, so the request that started the step gets its outcome
/// rather than a 409; 409 if it takes longer than [`WAIT_FOR_HOLDER`].
async fn taken_over(
    state: &Engine,
    caller: &crate::Caller,
    key: &crate::IdempotencyKey,
) -> Result<Response, Error> {
    let deadline = tokio::time::Instant::now() + WAIT_FOR_HOLDER;
    loop {
        match state.store.lookup(caller, key).await {
            // Another holder finished it: its answer is this request's first
            // (so not marked replayed).
            Ok(Some(found)) => return Ok(respond(found.record.response, false)),
            Ok(None) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Ok(None) => {
                state.metrics.in_conflict();
                return Err(Error::IdempotencyKeyInUse);
            }
            Err(e) => return Err(Error::from(e).in_later_phase()),
        }
    }
}

/// The operation finished and its answer is committed: answer, after the
/// hook.
async fn finished(response: StoredResponse, hooks: &dyn Hooks) -> Result<Response, Error> {
    hooks.after_commit().await?;
    Ok(respond(response, false))
}

/// The answer to a request that found a finished record of its key.
fn answer(state: &Engine, verdict: Verdict) -> Result<Response, Error> {
    match verdict {
        Verdict::Replay(response) => {
            state.metrics.replayed();
            tracing::info!(status = response.status, "replayed");
            Ok(respond(response, true))
        }
        Verdict::Mismatch => {
            state.metrics.mismatched();
            tracing::info!("refused: key reused with another request");
            Err(Error::IdempotencyKeyMismatch)
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
