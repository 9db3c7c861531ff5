//! An operation in phases, from its recovery point to its end: the loop a
//! request runs after the first phase stopped, a retry runs after taking
//! an abandoned operation over, and the completer runs on its own. Each
//! turn does the work outside the database that the recovery point calls
//! for (the application's [`Steps`](crate::Steps), holding no transaction
//! and no writer), then records its result in the next phase's transaction
//! ([`Store::advance`](crate::store::Store::advance)), under the lease.
//!
//! If anything fails before that commit, the operation stays at its
//! recovery point: the lease is given up when the failure is known (the
//! step returned an error; the failure is counted and kept as the
//! operation's last error) or runs out (the process died), and the next
//! retry or the completer goes on from there, and the step sends the same
//! downstream key. A step that can never succeed
//! ([`Error::StepFailedForGood`]), or an operation still failing longer
//! than the store's `attention_after` after its start, is set aside for an
//! operator instead (a dead letter): nothing resumes it, and its key
//! answers [`Error::OperationNeedsAttention`].
//!
//! While its step runs, the holder renews its lease every third of it, so
//! a step slower than the lease (a provider that takes 40 s against a 30 s
//! lease) is not taken over halfway by a retry or the completer.

use crate::backend::Backend;
use crate::backend::Operation;
use crate::engine::Engine;
use crate::error::{Chain, Error};
use crate::faults::Faults;
use crate::record::{Lease, StoredResponse};
use crate::store::{Advanced, AfterFailure};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// How an operation in phases ended for the one running it.
#[derive(Debug)]
pub(crate) enum Ended {
    /// LiveRecord: its answer is recorded.
    Finished(StoredResponse),
    /// The lease was no longer ours: someone else finished it or holds it.
    LeaseLost,
    /// The operation waits at a recovery point this release does not know
    /// (a later release's): nothing ran, and the lease was given up for a
    /// release that knows it.
    NotKnown(String),
}

/// Runs the operation from the lease's recovery point to its end.
pub(crate) async fn run_to_end<B: Backend>(
    state: &Engine<B>,
    mut lease: Lease,
    faults: &dyn Faults,
) -> Result<Ended, Error> {
    loop {
        if !state.0.steps.knows(&lease.point) {
            leave_to_another_release(state, &lease).await;
            return Ok(Ended::NotKnown(lease.point));
        }
        let span = tracing::info_span!("phase", point = lease.point.as_str());
        match next_phase(state, &lease, faults).instrument(span).await? {
            Advanced::Finished(response) => return Ok(Ended::Finished(response)),
            Advanced::Stopped(next) => lease = next,
            Advanced::LeaseLost => return Ok(Ended::LeaseLost),
        }
    }
}

/// An operation at a recovery point this release does not know is left to
/// a release that does: its lease is given up at once, and nothing is run
/// or counted (neither a failure nor a step towards a dead letter).
pub(crate) async fn leave_to_another_release<B: Backend>(state: &Engine<B>, lease: &Lease) {
    tracing::info!(
        point = lease.point.as_str(),
        "the operation waits at a recovery point this release does not know; left to a release \
         that does"
    );
    if let Err(e) = state.0.store.release(lease).await {
        tracing::warn!(error = %e, "could not give the lease up; it runs out by itself");
    }
}

/// What a request whose operation waits at a recovery point this release
/// does not know is told: the outcome is not known yet (503, retry with
/// the same key).
pub(crate) fn not_known(point: &str) -> Error {
    Error::Unfinished(
        format!(
            "the operation waits at the recovery point {point:?}, which this release does not \
             know; a release that knows it finishes it"
        )
        .into(),
    )
}

/// The step the lease's recovery point calls for, then its phase.
async fn next_phase<B: Backend>(
    state: &Engine<B>,
    lease: &Lease,
    faults: &dyn Faults,
) -> Result<Advanced, Error> {
    faults.before_step();
    let phase = match step_under_lease(state, lease).await {
        Stepped::Done(Ok(phase)) => phase,
        Stepped::Done(Err(e)) => return Err(failed(state, lease, e).await),
        Stepped::LeaseLost => {
            tracing::warn!("the lease was taken over while the step ran; its result is dropped");
            return Ok(Advanced::LeaseLost);
        }
    };
    faults.after_step();
    let advanced = match state.0.store.advance(lease, phase).await {
        Ok(advanced) => advanced,
        // Recorded nothing: the operation stays where it was, and a retry
        // may go on as soon as the database is back.
        Err(e) => return Err(failed(state, lease, e.into()).await),
    };
    match &advanced {
        Advanced::Finished(response) => tracing::info!(status = response.status, "finished"),
        Advanced::Stopped(next) => tracing::info!(next = next.point.as_str(), "stopped"),
        Advanced::LeaseLost => {
            tracing::warn!("the lease ran out and another holder took over; nothing recorded")
        }
    }
    Ok(advanced)
}

/// How a step run under a renewed lease ended.
enum Stepped<B: Backend> {
    /// The step's own result.
    Done(Result<Arc<dyn Operation<B>>, Error>),
    /// Another holder has the operation now: the step was dropped.
    LeaseLost,
}

/// Runs the step while renewing the lease every third of it. A renewal
/// that fails for the database's sake is tried again at the next turn (the
/// step goes on: its phase checks the lease anyway); one that finds the
/// lease taken drops the step. A recovery point with a lease of its own
/// ([`Steps::lease`](crate::Steps::lease)) has it from the start.
async fn step_under_lease<B: Backend>(state: &Engine<B>, lease: &Lease) -> Stepped<B> {
    let length = state
        .0
        .steps
        .lease(&lease.point)
        .unwrap_or_else(|| state.0.store.lease());
    if length != state.0.store.lease() {
        match state.0.store.renew(lease, length).await {
            Ok(true) => {}
            Ok(false) => return Stepped::LeaseLost,
            Err(e) => tracing::warn!(error = %e, "could not set the point's lease; trying again"),
        }
    }
    let every = (length / 3).max(Duration::from_millis(10));
    let step = state.0.steps.step(lease);
    tokio::pin!(step);
    let mut renewals = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            done = &mut step => return Stepped::Done(done),
            _ = renewals.tick() => match state.0.store.renew(lease, length).await {
                Ok(true) => tracing::debug!("lease renewed while the step runs"),
                Ok(false) => return Stepped::LeaseLost,
                Err(e) => tracing::warn!(error = %e, "could not renew the lease; trying again"),
            },
        }
    }
}

/// A step or its phase failed with `error`: the failure is recorded and
/// the lease given up, or the operation set aside for an operator. What
/// the request answers.
async fn failed<B: Backend>(state: &Engine<B>, lease: &Lease, error: Error) -> Error {
    let reason = Chain(&error).to_string();
    let after = match &error {
        Error::StepFailedForGood(why) => {
            tracing::error!(reason = %why, "the step failed for good; the operation is set aside for an operator");
            state
                .0
                .store
                .set_aside(lease, &reason)
                .await
                .map(|held| match held {
                    true => AfterFailure::SetAside,
                    false => AfterFailure::NotHeld,
                })
        }
        _ => {
            // The step's own logs say why; the request's answer says what.
            tracing::debug!(error = %reason, "the step failed; the operation waits at its recovery point");
            state.0.store.step_failed(lease, &reason).await
        }
    };
    match after {
        Ok(AfterFailure::SetAside) => {
            state.0.metrics.set_aside();
            tracing::error!(error = %reason, "the operation needs attention: set aside for an operator");
            Error::OperationNeedsAttention
        }
        Ok(AfterFailure::Released | AfterFailure::NotHeld) => error,
        // If even that fails, the lease runs out by itself.
        Err(e) => {
            tracing::warn!(error = %e, "could not record the failure; the lease runs out by itself");
            error
        }
    }
}
