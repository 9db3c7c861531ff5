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
use crate::store::{Store, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// Records deleted per batch.
pub const BATCH: u32 = 100;
/// Rest after a batch, as a multiple of the time the batch took.
const REST_FACTOR: u32 = 4;

/// Every `interval`, deletes expired records until none are left.
pub async fn run(store: Arc<dyn Store>, metrics: Arc<Metrics>, interval: Duration) {
    // Each batch borrows them; `run` holds them as long as it runs.
    let (store, metrics) = (&*store, &*metrics);
    serve::sweep::every(interval, BATCH, REST_FACTOR, move |limit| async move {
        let n = store.sweep(limit).await?;
        metrics.expired(n);
        tracing::debug!(deleted = n, "swept a batch");
        Ok::<_, StoreError>(n)
    })
    .await
}
