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

//!
//! The loop itself ([`every`]: every interval, delete in batches until a
//! batch comes back short) is shared with the workspace's other binaries.

use crate::backend::Backend;
use crate::engine::Engine;
use crate::store::StoreError;
use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

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
    every(interval, BATCH, REST_FACTOR, move |limit| async move {
        let n = store.sweep(limit).await?;
        metrics.expired(n);
        tracing::debug!(deleted = n, "swept a batch");
        Ok::<_, StoreError>(n)
    })
    .await
}

/// Every `interval`, calls `delete(batch)` (delete up to `batch` expired
/// records, say how many went) until it deletes fewer than `batch`. After
/// each full batch it rests `rest_factor` times as long as the batch took
/// (at least a millisecond; `0`: no rest). A failed batch ends the round
/// with a warning; the next interval tries again. Runs until dropped.
pub async fn every<F, E>(
    interval: Duration,
    batch: u32,
    rest_factor: u32,
    mut delete: impl FnMut(u32) -> F,
) where
    F: Future<Output = Result<u64, E>>,
    E: Display,
{
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let total = round(batch, rest_factor, &mut delete).await;
        if total > 0 {
            tracing::info!(deleted = total, "expired idempotency records swept");
        }
    }
}

/// One round of [`every`]: how many records it deleted.
async fn round<F, E>(batch: u32, rest_factor: u32, delete: &mut impl FnMut(u32) -> F) -> u64
where
    F: Future<Output = Result<u64, E>>,
    E: Display,
{
    let mut total = 0;
    loop {
        let started = Instant::now();
        match delete(batch).await {
            Ok(n) => {
                total += n;
                if n < u64::from(batch) {
                    return total;
                }
                if rest_factor > 0 {
                    let rest = started.elapsed() * rest_factor;
                    tokio::time::sleep(rest.max(Duration::from_millis(1))).await;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "sweep failed; will retry next interval");
                return total;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::ready;

    #[tokio::test]
    async fn a_round_goes_on_while_batches_are_full_and_ends_at_a_short_one() {
        let mut answers = [Ok(10), Ok(10), Ok(3), Ok(10)].into_iter();
        let mut asked = Vec::new();
        let total = round(10, 1, &mut |limit| {
            asked.push(limit);
            ready(answers.next().unwrap_or(Err("no more batches")))
        })
        .await;
        assert_eq!(total, 23);
        assert_eq!(asked, [10, 10, 10]);
        assert_eq!(answers.next(), Some(Ok(10)), "left for the next round");
    }

    #[tokio::test]
    async fn a_failed_batch_ends_the_round_with_what_went_before() {
        let mut answers = [Ok(10), Err("busy"), Ok(10)].into_iter();
        let total = round(10, 0, &mut |_| ready(answers.next().unwrap())).await;
        assert_eq!(total, 10);
        assert_eq!(answers.next(), Some(Ok(10)), "left for the next round");
    }
}
