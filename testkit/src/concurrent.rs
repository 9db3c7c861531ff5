//! Many requests at once: each sent from its own task, all released
//! together by a barrier, and their answers read in the order given. What
//! the concurrency tests of every harness (one key from fifty senders, ten
//! buyers for three posters, two instances) are made of.

use anyhow::{bail, Context, Result};
use reqwest::RequestBuilder;
use std::sync::Arc;

/// One answer, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// It carried `Idempotent-Replayed: true`.
    pub replayed: bool,
    /// The body's bytes.
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON (`null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }
}

/// Sends every request at the same moment and reads every answer. An error
/// when a request gets no answer.
pub async fn at_once(requests: impl IntoIterator<Item = RequestBuilder>) -> Result<Vec<Answer>> {
    let requests: Vec<RequestBuilder> = requests.into_iter().collect();
    let barrier = Arc::new(tokio::sync::Barrier::new(requests.len()));
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|request| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let response = request.send().await?;
                let status = response.status().as_u16();
                let replayed = response
                    .headers()
                    .get("idempotent-replayed")
                    .is_some_and(|v| v == "true");
                let body = response.bytes().await?.to_vec();
                Ok::<_, reqwest::Error>(Answer {
                    status,
                    replayed,
                    body,
                })
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(tasks.len());
    for (i, task) in tasks.into_iter().enumerate() {
        answers.push(
            task.await
                .context("a sender panicked")?
                .with_context(|| format!("request {i} got no answer"))?,
        );
    }
    Ok(answers)
}

/// Copies of one keyed request ran once: every answer is a 201, exactly
/// one is the first run (not replayed), and all carry the same bytes.
pub fn exactly_one_run(answers: &[Answer]) -> Result<()> {
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    if statuses.iter().any(|s| *s != 201) {
        bail!("not every copy was answered 201: {statuses:?}");
    }
    let first_runs = answers.iter().filter(|a| !a.replayed).count();
    if first_runs != 1 {
        bail!("{first_runs} answers were first runs, expected exactly one");
    }
    if answers.iter().any(|a| a.body != answers[0].body) {
        bail!("the copies were answered with different bodies");
    }
    Ok(())
}
