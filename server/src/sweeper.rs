//! Deletes expired idempotency records in small batches without stalling
//! requests.
//!
//! Each batch is one short job for the writer, and after each batch the
//! sweeper rests four times as long as the batch took (queueing included),
//! so it uses at most about a fifth of the writer and backs off by itself
//! when requests keep the writer busy. Deleting a record touches a random
//! page of the `(caller, key)` index, so a large backlog is cleared at a
//! steady pace instead of in one burst: the benchmark in
//! `docs/BENCHMARKS.md` measures request p99 while a million records go.

use crate::metrics::Metrics;
use crate::store::Store;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Records deleted per batch.
pub const BATCH: u32 = 100;
/// Rest after a batch, as a multiple of the time the batch took.
const REST_FACTOR: u32 = 4;

/// Every `interval`, deletes expired records until none are left.
pub async fn run(store: Arc<dyn Store>, metrics: Arc<Metrics>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut total = 0;
        loop {
            let started = Instant::now();
            match store.sweep(BATCH).await {
                Ok(n) => {
                    total += n;
                    metrics.expired(n);
                    tracing::debug!(deleted = n, "swept a batch");
                    if n < u64::from(BATCH) {
                        break;
                    }
                    let rest = started.elapsed() * REST_FACTOR;
                    tokio::time::sleep(rest.max(Duration::from_millis(1))).await;
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
