//! The idempotency flow, top to bottom.
//!
//! 1. **At the edge** ([`Keyed`]): caller, key, fingerprint and faults are
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
//! 5. **Answer**, after the hook ([`Faults::after_commit`]).
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

pub(crate) mod keyed;
#[cfg(feature = "tower")]
pub(crate) mod layer;
pub(crate) mod steps;

use crate::backend::Backend;
use crate::backend::Operation;
use crate::caller::Caller;
use crate::clock::BootInstant;
use crate::engine::Engine;
use crate::engine::Replay;
use crate::error::Error;
use crate::faults::Faults;
#[cfg(feature = "axum")]
use crate::flow::keyed::Keyed;
use crate::key::IdempotencyKey;
use crate::metrics::ResumedBy;
use crate::operation_id::OperationId;
use crate::record::{Answer, Lease, Record, StoredResponse, Verdict};
use crate::store::{Execution, FirstPhase, IdempotentRequest};
#[cfg(feature = "axum")]
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use steps::Ended;
use tracing::Instrument;

/// Why [`Engine::execute`] did not answer with an operation's answer.
#[derive(Debug)]
pub enum Refused<E> {
    /// The engine's refusal (422, 409, 503…): answer
    /// [`Error::answer`], or let it render itself in axum.
    Engine(Error),
    /// Your `parse` refused the body (after the key's record had its say):
    /// answer it as your framework renders it.
    Parse(E),
}

impl<E> Refused<E> {
    /// The engine's refusal as the answer to send (its problem+json, with
    /// `Retry-After` where a retry may succeed); your parser's refusal
    /// back, for your framework to render:
    /// `engine.execute(…).await.or_else(Refused::into_answer)`.
    pub fn into_answer(self) -> Result<Answer, E> {
        match self {
            Self::Engine(error) => Ok(Answer {
                response: error.answer(),
                replayed: false,
            }),
            Self::Parse(refused) => Err(refused),
        }
    }
}

impl<E> From<Error> for Refused<E> {
    fn from(error: Error) -> Self {
        Self::Engine(error)
    }
}

impl<E> From<crate::store::StoreError> for Refused<E> {
    fn from(error: crate::store::StoreError) -> Self {
        Self::Engine(error.into())
    }
}

impl<B: Backend> Engine<B> {
    /// The engine's core, with no HTTP types: runs the operation `parse`
    /// makes of `body` at most once for the request's key, and returns its
    /// answer (its own, or the recorded one again for a retry), or why not.
    /// The caller, key and fingerprint come from your edge
    /// ([`Keyed::new`](crate::Keyed::new) makes them from an HTTP request's
    /// parts); `faults` is [`NoFaults`](crate::NoFaults) unless you inject
    /// faults. [`Engine::run`] (axum) and
    /// [`KeyedLayer`](crate::KeyedLayer) (tower) are built on it, and so
    /// is any other framework's handler:
    ///
    /// ```ignore
    /// // actix-web, say: the request's parts have been read into `request`
    /// // (caller, key, fingerprint) and `body` (JSON).
    /// let answer = match engine
    ///     .execute(request, &body, &NoFaults, parse_charge)
    ///     .await
    ///     .or_else(Refused::into_answer)
    /// {
    ///     Ok(answer) => answer,
    ///     Err(bad) => return Ok(HttpResponse::BadRequest().body(bad)),
    /// };
    /// let mut reply = HttpResponse::build(StatusCode::from_u16(answer.response.status)?);
    /// for (name, value) in &answer.response.headers {
    ///     reply.insert_header((name.as_str(), value.as_str()));
    /// }
    /// if answer.replayed {
    ///     reply.insert_header(("idempotent-replayed", "true"));
    /// }
    /// Ok(reply.body(answer.response.body))
    /// ```
    ///
    /// When `parse` refuses the body, the key's record is looked up first,
    /// so a key reused with another request is a 422 even when that
    /// request would not parse.
    pub async fn execute<O, E>(
        &self,
        request: IdempotentRequest,
        body: &serde_json::Value,
        faults: &dyn Faults,
        parse: impl FnOnce(&serde_json::Value) -> Result<O, E>,
    ) -> Result<Answer, Refused<E>>
    where
        O: Operation<B>,
    {
        // The operation's hash is worked out only when its logs are wanted.
        let span = if tracing::enabled!(tracing::Level::INFO) {
            let id = OperationId::new(&request.caller, &request.key);
            tracing::info_span!("operation", caller = %request.caller, op = %id)
        } else {
            tracing::Span::none()
        };
        execute_in_span(self, request, body, faults, parse)
            .instrument(span)
            .await
    }

    /// Runs the request's operation at most once for its key and answers:
    /// the operation's own answer, the stored one again for a retry, or the
    /// engine's refusal (422, 409, 503) as `application/problem+json`.
    /// The axum adapter of [`Engine::execute`] (feature `axum`).
    ///
    /// `parse` turns the body into the route's operation; its refusal (your
    /// error, a 400 say) is answered as it renders. When it refuses the
    /// body, the key's record is looked up first, so a key reused with
    /// another request is a 422 even when that request would not parse.
    #[cfg(feature = "axum")]
    pub async fn run<C, F, O, E>(
        &self,
        keyed: Keyed<C, F>,
        parse: impl FnOnce(&serde_json::Value) -> Result<O, E>,
    ) -> Response
    where
        F: Faults,
        O: Operation<B>,
        E: IntoResponse,
    {
        match self
            .execute(keyed.request, &keyed.body, &keyed.faults, parse)
            .await
        {
            Ok(answer) => answer.into_http(),
            Err(Refused::Engine(error)) => error.into_response(),
            Err(Refused::Parse(refused)) => refused.into_response(),
        }
    }
}

async fn execute_in_span<B: Backend, O: Operation<B>, E>(
    state: &Engine<B>,
    request: IdempotentRequest,
    body: &serde_json::Value,
    faults: &dyn Faults,
    parse: impl FnOnce(&serde_json::Value) -> Result<O, E>,
) -> Result<Answer, Refused<E>> {
    let (caller, key, fingerprint) = (request.caller, request.key.clone(), request.fingerprint);
    let epoch = state.0.store.epoch();
    if let Some(record) = state.0.cache.get(&caller, &key, epoch) {
        return Ok(answer(state, &caller, &key, record.verdict(&fingerprint))?);
    }

    let operation: Arc<dyn Operation<B>> = match parse(body) {
        Ok(operation) => Arc::new(operation),
        // The record decides before the body's fields do: a key reused
        // with a body that does not even parse is a 422, not a 400.
        Err(refused) => {
            let since = BootInstant::now();
            return match state.0.store.lookup(&caller, &key).await? {
                Some(found) => {
                    state
                        .0
                        .cache
                        .put(&caller, &key, &found.record, since, found.life, epoch);
                    Ok(answer(
                        state,
                        &caller,
                        &key,
                        found.record.verdict(&fingerprint),
                    )?)
                }
                // Unfinished, the key's operation is another request all
                // the same: 422, as it is once finished.
                None => match state.0.store.unfinished(&caller, &key).await? {
                    Some(running) if running != fingerprint => {
                        Ok(answer(state, &caller, &key, Verdict::Mismatch)?)
                    }
                    _ => Err(Refused::Parse(refused)),
                },
            };
        }
    };
    let life = operation
        .key_ttl()
        .unwrap_or_else(|| state.0.store.key_ttl());
    let since = BootInstant::now();
    let answered = match state
        .0
        .store
        .execute(FirstPhase {
            request,
            operation,
            end: faults.first_phase_end(),
            max_unfinished: state.0.max_unfinished,
        })
        .await?
    {
        Execution::Ran(response) => {
            state.0.metrics.executed();
            tracing::info!(status = response.status, "executed");
            let record = Record {
                fingerprint,
                response,
            };
            state
                .0
                .cache
                .put(&caller, &key, &record, since, life, epoch);
            finished(record.response, faults).await
        }
        Execution::Stopped(lease) => {
            state.0.metrics.executed();
            tracing::info!(point = lease.point.as_str(), "started");
            go_on(state, lease, faults).await
        }
        Execution::Resumed(lease) if !state.0.steps.knows(&lease.point) => {
            steps::leave_to_another_release(state, &lease).await;
            Err(steps::not_known(&lease.point))
        }
        Execution::Resumed(lease) => {
            state.0.metrics.resumed(ResumedBy::retry);
            tracing::info!(
                point = lease.point.as_str(),
                "resuming an abandoned operation"
            );
            go_on(state, lease, faults).await
        }
        Execution::Found(found) => {
            state
                .0
                .cache
                .put(&caller, &key, &found.record, since, found.life, epoch);
            answer(state, &caller, &key, found.record.verdict(&fingerprint))
        }
        Execution::Mismatch => answer(state, &caller, &key, Verdict::Mismatch),
        Execution::NeedsAttention(reason) => {
            tracing::info!(%reason, "refused: the key's operation is set aside for an operator");
            Err(Error::OperationNeedsAttention)
        }
        Execution::InUse => {
            state.0.metrics.in_conflict();
            tracing::info!("refused: the key's operation is running");
            Err(Error::IdempotencyKeyInUse)
        }
        Execution::TooManyUnfinished(cap) => {
            tracing::info!(
                cap,
                "refused: the caller has too many unfinished operations"
            );
            Err(Error::TooManyUnfinished(cap))
        }
        Execution::RolledBack => {
            tracing::warn!("rolled back before commit on purpose");
            faults.rolled_back().await?;
            Err(Error::Unavailable(
                "the transaction was rolled back on purpose".into(),
            ))
        }
    };
    Ok(answered?)
}

/// Runs a stopped operation to its end and answers; if another holder got
/// the lease meanwhile, answers what the record says now.
///
/// The operation's start is committed, so whatever fails from here on is
/// answered as what it is: the outcome is not known yet, and the same key
/// sent again gets it ([`Error::in_later_phase`]), never "nothing was
/// done".
async fn go_on<B: Backend>(
    state: &Engine<B>,
    lease: Lease,
    faults: &dyn Faults,
) -> Result<Answer, Error> {
    let (caller, key) = (lease.caller, lease.key.clone());
    let ended = steps::run_to_end(state, lease, faults)
        .await
        .map_err(Error::in_later_phase)?;
    match ended {
        Ended::Finished(response) => finished(response, faults).await,
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
async fn taken_over<B: Backend>(
    state: &Engine<B>,
    caller: &crate::caller::Caller,
    key: &crate::key::IdempotencyKey,
) -> Result<Answer, Error> {
    let deadline = tokio::time::Instant::now() + WAIT_FOR_HOLDER;
    loop {
        match state.0.store.lookup(caller, key).await {
            // Another holder finished it: its answer is this request's first
            // (so not marked replayed).
            Ok(Some(found)) => {
                return Ok(Answer {
                    response: found.record.response,
                    replayed: false,
                })
            }
            Ok(None) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Ok(None) => {
                state.0.metrics.in_conflict();
                return Err(Error::IdempotencyKeyInUse);
            }
            Err(e) => return Err(Error::from(e).in_later_phase()),
        }
    }
}

/// The operation finished and its answer is committed: answer, after the
/// hook.
async fn finished(response: StoredResponse, faults: &dyn Faults) -> Result<Answer, Error> {
    faults.after_commit().await?;
    Ok(Answer {
        response,
        replayed: false,
    })
}

/// The answer to a request that found a finished record of its key.
fn answer<B: Backend>(
    state: &Engine<B>,
    caller: &Caller,
    key: &IdempotencyKey,
    verdict: Verdict,
) -> Result<Answer, Error> {
    match verdict {
        Verdict::Replay(response) => {
            state.0.metrics.replayed();
            tracing::info!(status = response.status, "replayed");
            if let Some(on_replay) = &state.0.on_replay {
                on_replay(&Replay {
                    caller,
                    key,
                    operation: OperationId::new(caller, key),
                    status: response.status,
                });
            }
            Ok(Answer {
                response,
                replayed: true,
            })
        }
        Verdict::Mismatch => {
            state.0.metrics.mismatched();
            tracing::info!("refused: key reused with another request");
            Err(Error::IdempotencyKeyMismatch)
        }
    }
}
