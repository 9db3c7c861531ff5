//! The completer: every interval, finds operations stopped at a recovery
//! point whose lease ran out (their request died, or its step failed, and
//! no client came back) and runs each to its end, so an operation nobody
//! retries still finishes and its record answers later retries. On
//! PostgreSQL with many instances, the lease is taken in the database:
//! exactly one request or completer runs an operation at a time.
//!
//! An operation stopped at a recovery point this release does not know
//! ([`Steps::knows`](crate::Steps::knows): a later release's, during a
//! rolling deploy) is left alone: the completer neither takes it over nor
//! counts a failure, and lists past it (the points it skips are left out
//! of the listing, so any number of them never hides the others).

use crate::backend::Backend;
use crate::caller::Caller;
use crate::engine::Engine;
use crate::faults::NoFaults;
use crate::flow::steps::{self, Ended};
use crate::key::IdempotencyKey;
use crate::metrics::ResumedBy;
use crate::operation_id::OperationId;
use std::future::Future;
use std::time::Duration;
use tracing::Instrument;

/// Operations looked at per round.
const BATCH: u32 = 100;

impl<B: Backend> Engine<B> {
    /// The completer: every `interval` (and once at start), resumes
    /// abandoned operations, until the future is dropped. Spawn it.
    pub fn completer(&self, interval: Duration) -> impl Future<Output = ()> + Send + 'static {
        run(self.clone(), interval)
    }
}

async fn run<B: Backend>(state: Engine<B>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Recovery points seen that this release does not know: never listed
    // again.
    let mut unknown: Vec<String> = Vec::new();
    loop {
        tick.tick().await;
        match state.0.store.census().await {
            Ok(census) => state.0.metrics.census(&census),
            Err(e) => tracing::warn!(error = %e, "cannot count the unfinished operations"),
        }
        while round(&state, &mut unknown).await == Round::ListAgain {}
    }
}

/// Whether a round's listing should be read again at once.
#[derive(Debug, PartialEq, Eq)]
enum Round {
    /// The listing was full of operations at points this release does not
    /// know, now left out: the others may be behind them.
    ListAgain,
    /// Next interval.
    Done,
}

/// Resumes the abandoned operations of one listing, skipping (and
/// remembering in `unknown`) the points this release does not know.
async fn round<B: Backend>(state: &Engine<B>, unknown: &mut Vec<String>) -> Round {
    let abandoned = match state.0.store.abandoned(BATCH, unknown).await {
        Ok(abandoned) => abandoned,
        Err(e) => {
            tracing::warn!(error = %e, "the completer cannot list abandoned operations; next round");
            return Round::Done;
        }
    };
    let full = abandoned.len() >= BATCH as usize;
    let mut skipped = false;
    for operation in abandoned {
        if !state.0.steps.knows(&operation.point) {
            if !unknown.contains(&operation.point) {
                tracing::info!(
                    point = operation.point.as_str(),
                    "abandoned operations wait at a recovery point this release does not know; \
                     the completer leaves them to a release that does"
                );
                unknown.push(operation.point);
            }
            skipped = true;
            continue;
        }
        let id = OperationId::new(&operation.caller, &operation.key);
        let span = tracing::info_span!("operation", caller = %operation.caller, op = %id);
        resume(state, &operation.caller, &operation.key)
            .instrument(span)
            .await;
    }
    if full && skipped {
        Round::ListAgain
    } else {
        Round::Done
    }
}

async fn resume<B: Backend>(state: &Engine<B>, caller: &Caller, key: &IdempotencyKey) {
    let lease = match state.0.store.take_over(caller, key).await {
        Ok(Some(lease)) => lease,
        // Taken by a retry, or finished, meanwhile.
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "the completer cannot take the operation over; next round");
            return;
        }
    };
    if !state.0.steps.knows(&lease.point) {
        // A later release moved it on since the listing.
        steps::leave_to_another_release(state, &lease).await;
        return;
    }
    state.0.metrics.resumed(ResumedBy::completer);
    tracing::info!(
        point = lease.point.as_str(),
        "the completer resumes an abandoned operation"
    );
    match steps::run_to_end(state, lease, &NoFaults).await {
        Ok(Ended::Finished(response)) => {
            tracing::info!(
                status = response.status,
                "the completer finished the operation"
            )
        }
        Ok(Ended::LeaseLost | Ended::NotKnown(_)) => {}
        Err(e) => {
            tracing::warn!(error = %e, "the completer could not finish the operation; next round")
        }
    }
}
