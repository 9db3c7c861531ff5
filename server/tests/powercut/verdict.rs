//! The judgement after the cuts: each operation's answers against the
//! charges the database kept, then a last retry of each.

pub(crate) use crate::harness::charges::by_description as charges;
use crate::sender::{Answer, Mode, Operation};
use serde_json::Value;
use std::collections::HashMap;
use testkit::Caller;

/// What the judgement found, one line per operation that went wrong.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// 201s received in all.
    pub(crate) answered: usize,
    /// 201s whose charge is not in the database any more.
    pub(crate) lost_answers: usize,
    /// Operations that lost answered work: a 201's charge is gone, or its
    /// senders were answered two different charges (the first forgotten,
    /// the operation run again).
    pub(crate) lost: Vec<String>,
    /// Operations with more than one charge.
    pub(crate) duplicates: Vec<String>,
    /// Last retries of an operation that lost nothing that are not its
    /// answer replayed byte for byte.
    pub(crate) retries: Vec<String>,
    /// Operations without exactly one charge after the last retries.
    pub(crate) not_one: Vec<String>,
}

impl Report {
    /// `--durability full`: every answer survived every cut.
    pub(crate) fn assert_nothing_answered_was_lost(&self) {
        none_of(&[
            ("operations lost answered work", &self.lost),
            ("operations charged more than once", &self.duplicates),
            ("last retries did not replay the answer", &self.retries),
            ("operations without exactly one charge", &self.not_one),
        ]);
        assert!(self.answered > 0, "nothing was answered");
    }

    /// `--durability relaxed`: answered work was lost (the harness can
    /// see it), yet never charged twice, and a retry still ends every
    /// operation with one charge.
    pub(crate) fn assert_sound_but_lost_answers(&self) {
        assert!(
            !self.lost.is_empty(),
            "no answered operation was lost with relaxed durability: the harness \
             cannot tell an answer sent before its commit is durable"
        );
        none_of(&[
            ("operations charged more than once", &self.duplicates),
            ("operations without exactly one charge", &self.not_one),
        ]);
    }
}

/// Fails, with the first ten of each, when any list of problems is not
/// empty.
fn none_of(lists: &[(&str, &Vec<String>)]) {
    for (what, problems) in lists {
        assert!(
            problems.is_empty(),
            "{} {what}, first ones:\n{}",
            problems.len(),
            problems[..problems.len().min(10)].join("\n")
        );
    }
}

/// Judges every operation, retries each once more, and counts the
/// charges again.
pub(crate) async fn judge(
    operations: &[Operation],
    answers: &HashMap<usize, Vec<Answer>>,
    callers: &[&Caller],
    mode: Mode,
) -> Report {
    let found = charges(callers).await;
    let mut report = Report::default();
    for op in operations {
        let kept = found.get(&op.description()).map_or(&[][..], Vec::as_slice);
        if kept.len() > 1 {
            report.duplicates.push(format!("op {}: {kept:?}", op.id));
        }
        let answered: Vec<&Answer> = answers
            .get(&op.id)
            .map(|a| a.iter().filter(|a| a.status == 201).collect())
            .unwrap_or_default();
        report.answered += answered.len();
        let mut lost = false;
        for answer in &answered {
            let body: Value = serde_json::from_slice(&answer.body).unwrap();
            if !kept.iter().any(|charge| charge["id"] == body["id"]) {
                report.lost_answers += 1;
                lost = true;
            }
        }
        if answered.iter().any(|a| a.body != answered[0].body) {
            lost = true;
        }
        if lost {
            report.lost.push(format!(
                "op {}: answered {answered:?}, the database holds {kept:?}",
                op.id
            ));
        }
        let retry = op.callers[0]
            .post_keyed(op.path(), &op.key, &op.body(mode))
            .await
            .unwrap();
        let status = retry.status().as_u16();
        let replayed = (retry.headers().get("idempotent-replayed")).is_some_and(|v| v == "true");
        let body = retry.bytes().await.unwrap().to_vec();
        if !lost {
            if let Some(first) = answered.first() {
                if status != 201 || !replayed || body != first.body {
                    report.retries.push(format!(
                        "op {}: {status} (replayed: {replayed}) {}, answered {first:?}",
                        op.id,
                        String::from_utf8_lossy(&body)
                    ));
                }
            }
        }
    }
    let after = charges(callers).await;
    for op in operations {
        let n = after.get(&op.description()).map_or(0, Vec::len);
        if n != 1 {
            report.not_one.push(format!("op {}: {n} charges", op.id));
        }
    }
    report
}
