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
//! step returned an error) or runs out (the process died), and the next
//! retry or the completer goes on from there, and the step sends the same
//! downstream key.

use crate::error::Error;
use crate::hooks::Hooks;
use crate::record::{Lease, StoredResponse};
use crate::store::Advanced;
use crate::Engine;
use tracing::Instrument;

/// How a resumed operation ended for the one running it.
#[derive(Debug)]
pub(crate) enum Ended {
    /// Finished: its answer is recorded.
    Finished(StoredResponse),
    /// The lease was no longer ours: someone else finished it or holds it.
    LeaseLost,
}

/// Runs the operation from the lease's recovery point to its end.
pub(crate) async fn run_to_end(
    state: &Engine,
    mut lease: Lease,
    hooks: &dyn Hooks,
) -> Result<Ended, Error> {
    loop {
        let span = tracing::info_span!("phase", point = lease.point.as_str());
        match next_phase(state, &lease, hooks).instrument(span).await? {
            Advanced::Finished(response) => return Ok(Ended::Finished(response)),
            Advanced::Stopped(next) => lease = next,
            Advanced::LeaseLost => return Ok(Ended::LeaseLost),
        }
    }
}

/// The step the lease's recovery point calls for, then its phase.
async fn next_phase(state: &Engine, lease: &Lease, hooks: &dyn Hooks) -> Result<Advanced, Error> {
    hooks.before_step();
    let phase = match state.steps.step(lease).await {
        Ok(phase) => phase,
        Err(e) => {
            // The step's own logs say why; the request's answer says what.
            tracing::debug!(error = %crate::error::Chain(&e), "the step failed; the operation waits at its recovery point");
            give_up(state, lease).await;
            return Err(e);
        }
    };
    hooks.after_step();
    let advanced = match state.store.advance(lease, phase).await {
        Ok(advanced) => advanced,
        Err(e) => {
            // Recorded nothing: the operation stays where it was, and a
            // retry may go on as soon as the database is back.
            give_up(state, lease).await;
            return Err(e.into());
        }
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

/// Releases the lease so that a retry may go on at once. If even that
/// fails, the lease runs out by itself.
async fn give_up(state: &Engine, lease: &Lease) {
    if let Err(e) = state.store.release(lease).await {
        tracing::warn!(error = %e, "could not release the lease; it runs out by itself");
    }
}
