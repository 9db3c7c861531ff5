//! Waiting for what a page or the server shows: [`eventually`] polls a
//! check until it holds, within [`PATIENCE`] or a bound of its own.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a page may take to show an outcome. Generous: the stories
/// include a 3 s client timeout, backoff and a server restart, on 2 cores.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `check` every 100 ms until it yields `Some`, or fails after
/// `timeout` with `what` and the last error seen.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if Instant::now() >= deadline {
            return Err(match last_error {
                Some(e) => e.context(format!("timed out after {timeout:?} waiting for {what}")),
                None => anyhow::anyhow!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
