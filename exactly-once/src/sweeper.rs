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

use crate::backend::Backend;
use crate::engine::Engine;
use crate::store::StoreError;
use std::future::Future;
use std::time::Duration;

/// Records deleted per batch.
pub(crate) const BATCH: u32 = 100;
/// Rest after a batch, as a multiple of the time the batch took.
const REST_FACTOR: u32 = 4;

impl<B: Backend> Engine<B> {
    /// The sweeper: every `interval`, deletes expired records until none
    /// are left, until the future is dropped. Spawn it.
    pub fn sweeper(&self, interval: Duration) -> impl Future<Output = ()> + Send + 'static {
        run(self.clone(), interval)
    }
}

async fn run<B: Backend>(engine: Engine<B>, interval: Duration) {
    // Each batch borrows them; `run` holds them as long as it runs.
    let (store, metrics) = (&*engine.0.store, &*engine.0.metrics);
    crate::sweep::every(interval, BATCH, REST_FACTOR, move |limit| async move {
        let n = store.sweep(limit).await?;
        metrics.expired(n);
        tracing::debug!(deleted = n, "swept a batch");
        Ok::<_, StoreError>(n)
    })
    .await
}
