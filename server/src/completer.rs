//! The completer: every `--complete-interval`, finds operations stopped at
//! a recovery point whose lease ran out (their request died, or gave up on
//! the provider, and no client came back) and runs each to its end, so an
//! operation nobody retries still ends `succeeded` or `failed` and its
//! record answers later retries. On PostgreSQL with many instances, the
//! lease is taken in the database: exactly one request or completer runs an
//! operation at a time.

use crate::chaos::Chaos;
use crate::domain::OperationId;
use crate::idempotency::phases::{self, Ended};
use crate::metrics::ResumedBy;
use crate::state::AppState;
use std::time::Duration;
use tracing::Instrument;

/// Operations looked at per round.
const BATCH: u32 = 100;

/// Every `interval` (and once at start), resumes abandoned operations.
pub async fn run(state: AppState, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
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

async fn resume(
    state: &AppState,
    caller: &crate::domain::Caller,
    key: &crate::domain::IdempotencyKey,
) {
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
    match phases::run_to_end(state, lease, &Chaos::default()).await {
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
