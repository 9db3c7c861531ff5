//! The completer: every interval, finds operations stopped at a recovery
//! point whose lease ran out (their request died, or its step failed, and
//! no client came back) and runs each to its end, so an operation nobody
//! retries still finishes and its record answers later retries. On
//! PostgreSQL with many instances, the lease is taken in the database:
//! exactly one request or completer runs an operation at a time.

use crate::flow::steps::{self, Ended};
use crate::hooks::NoHooks;
use crate::metrics::ResumedBy;
use crate::{Caller, Engine, IdempotencyKey, OperationId};
use std::future::Future;
use std::time::Duration;
use tracing::Instrument;

/// Operations looked at per round.
const BATCH: u32 = 100;

impl Engine {
    /// The completer: every `interval` (and once at start), resumes
    /// abandoned operations, until the future is dropped. Spawn it.
    pub fn completer(&self, interval: Duration) -> impl Future<Output = ()> + Send + 'static {
        run(self.clone(), interval)
    }
}

async fn run(state: Engine, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match state.store.census().await {
            Ok(census) => state.metrics.census(&census),
            Err(e) => tracing::warn!(error = %e, "cannot count the unfinished operations"),
        }
        let abandoned = match state.store.abandoned(BATCH).await {
            Ok(abandoned) => abandoned,
            Err(e) => {
                tracing::warn!(error = %e, "the completer cannot list abandoned operations; next round");
                continue;
            }
        };
        for (caller, key) in abandoned {
            let id = OperationId::new(&caller, &key);
            let span = tracing::info_span!("operation", %caller, op = %id);
            resume(&state, &caller, &key).instrument(span).await;
        }
    }
}

async fn resume(state: &Engine, caller: &Caller, key: &IdempotencyKey) {
    let lease = match state.store.take_over(caller, key).await {
        Ok(Some(lease)) => lease,
        // Taken by a retry, or finished, meanwhile.
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "the completer cannot take the operation over; next round");
            return;
        }
    };
    state.metrics.resumed(ResumedBy::completer);
    tracing::info!(
        point = lease.point.as_str(),
        "the completer resumes an abandoned operation"
    );
    match steps::run_to_end(state, lease, &NoHooks).await {
        Ok(Ended::Finished(response)) => {
            tracing::info!(
                status = response.status,
                "the completer finished the operation"
            )
        }
        Ok(Ended::LeaseLost) => {}
        Err(e) => {
            tracing::warn!(error = %e, "the completer could not finish the operation; next round")
        }
    }
}
