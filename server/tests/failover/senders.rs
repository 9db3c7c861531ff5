//! The failover's own senders, beside the crash harness's: one that
//! measures instead of failing (the asynchronous standby), and the one
//! attempt of a client that gave up.

use crate::sender::{self, Mode, Operation};
use crate::tally::Tally;
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::Value;
use std::time::{Duration, Instant};

/// How many 500s a measuring sender takes before it calls its operation
/// stuck.
pub(crate) const STUCK_AFTER: usize = 5;

/// Sends `op` until a 201, retrying like the crash harness's sender, but
/// counting (not failing on) what the contract rules out: after
/// [`STUCK_AFTER`] 500s the operation is stuck and the sender stops
/// (`None`).
pub(crate) async fn send_measuring(
    op: &Operation,
    tally: &Tally,
    rng: &mut StdRng,
) -> Option<sender::Answer> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut errors = 0;
    while Instant::now() < deadline {
        let instance = rng.random_range(0..op.callers.len());
        tally.sent(instance);
        let sent = op.callers[instance]
            .post_keyed(op.path(), &op.key, &op.body(Mode::Provider))
            .await;
        let answer = match sent {
            Ok(response) => {
                let status = response.status().as_u16();
                response.bytes().await.ok().map(|b| (status, b.to_vec()))
            }
            Err(_) => None,
        };
        tally.back(instance);
        match answer {
            Some((201, body)) => {
                tally.kinds.count("201");
                return Some(sender::Answer { status: 201, body });
            }
            Some((status, body)) => {
                let problem: Value = serde_json::from_slice(&body).unwrap_or_default();
                let kind = problem["type"].as_str().unwrap_or_default();
                tally.kinds.count(format!("{status} {kind}"));
                if status == 500 {
                    errors += 1;
                    if errors >= STUCK_AFTER {
                        tally.kinds.count("stuck (gave up after 500s)");
                        return None;
                    }
                }
            }
            None => tally.kinds.count("transport error"),
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..250))).await;
    }
    tally.kinds.count("never answered in 120 s");
    None
}

/// One attempt, never retried: a client that gave up. Whether it was
/// told that nothing was done.
pub(crate) async fn send_once(op: &Operation, tally: &Tally, rng: &mut StdRng) -> bool {
    let instance = rng.random_range(0..op.callers.len());
    tally.sent(instance);
    let answer = op.callers[instance]
        .post_keyed(op.path(), &op.key, &op.body(Mode::Provider))
        .await;
    let answer = match answer {
        Ok(response) => {
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or_default();
            Some((status, body))
        }
        Err(_) => None,
    };
    tally.back(instance);
    let nothing_done = answer.as_ref().is_some_and(|(status, body)| {
        *status == 503
            && body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("nothing was done"))
    });
    tally.kinds.count(match &answer {
        Some(_) if nothing_done => "503 nothing was done (one-shot)".to_owned(),
        Some((status, _)) => format!("{status} (one-shot)"),
        None => "no answer (one-shot)".to_owned(),
    });
    nothing_done
}
