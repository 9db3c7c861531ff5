//! The judgement at the end: every operation's answers against its
//! charges (read through the API), then one final retry of each.

use crate::senders::{Operation, Tally};
use serde_json::Value;
use std::collections::HashMap;
use testkit::Caller;

/// Each operation's charges, by description.
pub(crate) type Charges = HashMap<String, Vec<Value>>;

/// Every charge of `callers`, by description.
pub(crate) async fn charges(callers: &[Caller]) -> Charges {
    let mut charges = Charges::new();
    for caller in callers {
        for charge in caller.charges().await.unwrap() {
            let description = charge["description"].as_str().unwrap().to_owned();
            charges.entry(description).or_default().push(charge);
        }
    }
    charges
}

/// What went wrong, one line per operation.
#[derive(Default)]
pub(crate) struct Verdict {
    /// More than one charge.
    pub(crate) duplicates: Vec<String>,
    /// A 201 whose charge is not there.
    pub(crate) lost: Vec<String>,
    /// A charge, yet no attempt that could have made it: some attempt
    /// that made it was answered "nothing was done".
    pub(crate) lies: Vec<String>,
    /// A final retry that is not a 201 replaying the one charge (or, with
    /// none, running the operation).
    pub(crate) retries: Vec<String>,
}

/// Compares every operation's answers with its charges as found, then
/// retries it a last time at the other instance.
pub(crate) async fn judge(operations: &[Operation], tally: &Tally, found: &Charges) -> Verdict {
    let answers = tally.answers.lock().unwrap().clone();
    let bodies = tally.bodies.lock().unwrap().clone();
    let mut verdict = Verdict::default();
    for op in operations {
        let found = found.get(&op.description()).map_or(&[][..], Vec::as_slice);
        let answers = &answers[&op.id];
        if found.len() > 1 {
            verdict.duplicates.push(format!("op {}: {found:?}", op.id));
        }
        let answered: Option<Value> =
            (bodies.get(&op.id)).map(|b| serde_json::from_slice(b).unwrap());
        if let Some(answered) = &answered {
            if !found.contains(answered) {
                verdict.lost.push(format!(
                    "op {}: answered {answered}, found {found:?}",
                    op.id
                ));
            }
        }
        if !found.is_empty() && !answers.iter().any(|a| a.could_have_run()) {
            verdict
                .lies
                .push(format!("op {}: charged, yet answered {answers:?}", op.id));
        }
        let retry = op.callers[(op.id + 1) % 2]
            .post_keyed("/charges", &op.key, &op.body())
            .await
            .unwrap();
        let status = retry.status();
        let replayed = (retry.headers().get("idempotent-replayed")).is_some_and(|v| v == "true");
        let replay: Value = serde_json::from_slice(&retry.bytes().await.unwrap()).unwrap();
        let expected = answered.as_ref().or(found.first());
        if status != 201 || replayed != expected.is_some() || expected.is_some_and(|e| *e != replay)
        {
            verdict.retries.push(format!(
                "op {}: {status} (replayed: {replayed}) {replay}, expected {expected:?}",
                op.id
            ));
        }
    }
    verdict
}
