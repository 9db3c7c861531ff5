//! The checks every mode makes once the senders are done: the charges,
//! read once nothing is pending, and for each operation its charge (or
//! reservation), its answers and its replay.

use crate::sender::{Answer, Mode, Operation};
use crate::SENDERS_PER_OPERATION;
use serde_json::Value;

/// One operation's charge is its outcome, every sender got the same
/// answer, and its record replays that answer.
pub(crate) async fn operation(
    op: &Operation,
    mode: Mode,
    charge: &Value,
    answers: Option<&Vec<Answer>>,
) {
    assert_eq!(
        charge["status"],
        op.charge_status(),
        "op {}: {charge}",
        op.id
    );
    if mode == Mode::Local {
        assert_eq!(
            charge["provider_charge"],
            Value::Null,
            "op {}: {charge}",
            op.id
        );
    }
    let answered = one_answer(op, answers);
    if let (Some(answered), false) = (answered, op.declined()) {
        let answered: Value = serde_json::from_slice(&answered.body).unwrap();
        assert_eq!(charge, &answered, "op {}: the charge is the answer", op.id);
    }
    let replayed = replay(op, mode, answered).await;
    if answered.is_none() && !op.declined() {
        let replayed: Value = serde_json::from_slice(&replayed.body).unwrap();
        assert_eq!(&replayed, charge, "op {}: the replay is the charge", op.id);
    }
}

/// A reservation: every sender got the same answer, and its record
/// replays it. That answer.
pub(crate) async fn reservation(op: &Operation, answers: Option<&Vec<Answer>>) -> Answer {
    let answered = one_answer(op, answers)
        .unwrap_or_else(|| panic!("op {}: a reservation nobody got an answer to", op.id));
    replay(op, Mode::Local, Some(answered)).await;
    answered.clone()
}

/// Every sender of `op` got an answer, the same one: that answer (none
/// for an abandoned operation).
fn one_answer<'a>(op: &Operation, answers: Option<&'a Vec<Answer>>) -> Option<&'a Answer> {
    let answers = answers?;
    assert_eq!(answers.len(), SENDERS_PER_OPERATION);
    assert!(
        answers.iter().all(|a| a == &answers[0]),
        "op {}: senders got different answers: {answers:?}",
        op.id
    );
    Some(&answers[0])
}

/// The record of `op` is there, finished, and replays `answered` (or,
/// when nobody was answered, the operation's final status): the replay.
async fn replay(op: &Operation, mode: Mode, answered: Option<&Answer>) -> Answer {
    let replay = op.callers[0]
        .post_keyed(op.path(), &op.key, &op.body(mode))
        .await
        .unwrap();
    let status = replay.status().as_u16();
    let expected = answered.map_or(op.final_status(), |a| a.status);
    assert_eq!(status, expected, "op {}", op.id);
    assert_eq!(
        replay
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..]),
        "op {} is unfinished",
        op.id
    );
    let replayed = Answer {
        status,
        body: replay.bytes().await.unwrap().to_vec(),
    };
    if let Some(answered) = answered {
        assert_eq!(&replayed, answered, "op {}: the replay differs", op.id);
    }
    replayed
}
