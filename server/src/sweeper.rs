//! Deletes expired idempotency records in small batches. Each batch is one
//! short job for the writer, so requests queued meanwhile go between
//! batches instead of waiting for the whole backlog.

use crate::metrics::Metrics;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;

/// Records deleted per batch.
pub const BATCH: u32 = 500;

/// Every `interval`, deletes expired records until none are left.
pub async fn run(store: Arc<dyn Store>, metrics: Arc<Metrics>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut total = 0;
        loop {
            match store.sweep(BATCH).await {
                Ok(n) => {
                    total += n;
                    metrics.expired(n);
                    if n < u64::from(BATCH) {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "sweep failed; will retry next interval");
                    break;
                }
            }
        }
        if total > 0 {
            tracing::info!(deleted = total, "expired idempotency records swept");
        }
    }
}
