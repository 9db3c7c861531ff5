//! An operation in phases, from its recovery point to its end: the loop a
//! request runs after the start phase stopped, a retry runs after taking
//! an abandoned operation over, and the completer runs on its own. Each
//! turn does the work outside the database that the recovery point calls
//! for (the provider call, holding no transaction and no writer), then
//! records its result in the next phase's transaction
//! ([`Store::advance`](crate::store::Store::advance)), under the lease.
//!
//! If anything fails before that commit, the operation stays at its
//! recovery point: the lease is given up when the failure is known (the
//! provider did not answer) or runs out (the process died), and the next
//! retry or the completer goes on from there, sending the provider the
//! same downstream key.

use crate::chaos::Chaos;
use crate::domain::{ChargeId, OperationId};
use crate::error::ApiError;
use crate::idempotency::record::{Lease, RecoveryPoint, StoredResponse};
use crate::operation::charge::{FinishCharge, PendingCharge};
use crate::provider::Reply;
use crate::state::AppState;
use crate::store::Advanced;
use std::sync::Arc;
use tracing::Instrument;

/// How a resumed operation ended for the one running it.
#[derive(Debug)]
pub enum Ended {
    /// Finished: its answer is recorded.
    Finished(StoredResponse),
    /// The lease was no longer ours: someone else finished it or holds it.
    LeaseLost,
}

/// Runs the operation from the lease's recovery point to its end.
pub async fn run_to_end(
    state: &AppState,
    mut lease: Lease,
    chaos: &Chaos,
) -> Result<Ended, ApiError> {
    loop {
        let span = tracing::info_span!("phase", point = lease.point.as_str());
        match next_phase(state, &lease, chaos).instrument(span).await? {
            Advanced::Finished(response) => return Ok(Ended::Finished(response)),
            Advanced::Stopped(next) => lease = next,
            Advanced::LeaseLost => return Ok(Ended::LeaseLost),
        }
    }
}

/// The work the lease's recovery point calls for, then its phase.
async fn next_phase(state: &AppState, lease: &Lease, chaos: &Chaos) -> Result<Advanced, ApiError> {
    let phase = match lease.point {
        RecoveryPoint::ChargeCreated => charge_at_provider(state, lease, chaos).await?,
    };
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

/// At `charge_created`: asks the provider to charge (same downstream key
/// every time), and returns the phase that records its verdict.
async fn charge_at_provider(
    state: &AppState,
    lease: &Lease,
    chaos: &Chaos,
) -> Result<Arc<FinishCharge>, ApiError> {
    let pending = PendingCharge::from_state(&lease.state).map_err(|e| {
        ApiError::Internal(format!("a stopped charge's state is unreadable: {e}").into())
    })?;
    let Some(provider) = &state.provider else {
        give_up(state, lease).await;
        return Err(ApiError::ProviderUnavailable(
            "a payment was started with a provider and this server runs without --psp-url".into(),
        ));
    };
    chaos.before_provider();
    let key = pending.downstream_key(&OperationId::new(&lease.caller, &lease.key));
    match provider.charge(&key, &pending).await {
        Reply::Verdict(verdict) => {
            chaos.after_provider();
            tracing::info!(status = verdict.status().as_str(), "the provider answered");
            Ok(Arc::new(FinishCharge {
                charge: ChargeId::parse(&pending.id).ok_or_else(|| {
                    ApiError::internal(format!("a stopped charge has a bad id {:?}", pending.id))
                })?,
                verdict,
                receipts: state.receipts,
            }))
        }
        Reply::Unavailable(why) => {
            tracing::warn!(reason = %why, "no final answer from the provider; the operation waits at its recovery point");
            give_up(state, lease).await;
            Err(ApiError::ProviderUnavailable(why))
        }
        Reply::Broken(why) => {
            tracing::error!(reason = %why, "the provider answered what it never should; the operation waits at its recovery point");
            give_up(state, lease).await;
            Err(ApiError::internal(why))
        }
    }
}

/// Releases the lease so that a retry may go on at once. If even that
/// fails, the lease runs out by itself.
async fn give_up(state: &AppState, lease: &Lease) {
    if let Err(e) = state.store.release(lease).await {
        tracing::warn!(error = %e, "could not release the lease; it runs out by itself");
    }
}
