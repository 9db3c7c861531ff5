//! What the engine's tests on an application's own pool share.

// Each test binary uses a part.
#![allow(dead_code)]

#[cfg(feature = "sqlx")]
pub(crate) mod notes;

use exactly_once::{Answer, Caller, Fingerprint, IdempotencyKey, IdempotentRequest};
use std::future::Future;

/// `POST /notes` of `{"text": text}` with `key`, by one session.
pub(crate) fn request(key: &str, text: &str) -> IdempotentRequest {
    let body = serde_json::json!({ "text": text });
    IdempotentRequest {
        caller: Caller::of(b"their-session"),
        key: IdempotencyKey::parse(key.as_bytes()).unwrap(),
        fingerprint: Fingerprint::new(&http::Method::POST, "/notes", &body),
    }
}

/// Sends `n` copies of one keyed request at once, each through `send`.
/// Each must be answered as the one run (201) or as in use by another
/// (409); the caller checks its rows for the one run.
pub(crate) async fn duplicates_at_once<F, Fut>(n: usize, send: F) -> Vec<Answer>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Answer> + Send + 'static,
{
    let tasks: Vec<_> = (0..n).map(|_| tokio::spawn(send())).collect();
    let mut answers = Vec::with_capacity(n);
    for task in tasks {
        let answer = task.await.expect("a sender panicked");
        assert!(
            [201, 409].contains(&answer.response.status),
            "a concurrent duplicate got {}",
            answer.response.status
        );
        answers.push(answer);
    }
    answers
}
