//! The checks every mode makes once the senders are done: the charges,
//! read once nothing is pending, and for each operation its charge, its
//! answers and its replay.

use crate::sender::{Mode, Operation};
use crate::SENDERS_PER_OPERATION;
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use testkit::Caller;

/// Every caller's charges by description, once none is `pending` (polled
/// for at most `timeout`).
pub(crate) async fn settled_charges(
    callers: &[&Caller],
    timeout: Duration,
) -> HashMap<String, Vec<Value>> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut by_op: HashMap<String, Vec<Value>> = HashMap::new();
        for caller in callers {
            let charges = caller
                .charges()
                .await
                .unwrap_or_else(|e| panic!("listing the charges: {e:#}"));
            for charge in charges {
                let description = charge["description"].as_str().unwrap().to_owned();
                by_op.entry(description).or_default().push(charge);
            }
        }
        let pending: Vec<&Value> = by_op
            .values()
            .flatten()
            .filter(|c| c["status"] == "pending")
            .collect();
        if pending.is_empty() {
            return by_op;
        }
        assert!(
            Instant::now() < deadline,
            "{} charges still pending after {timeout:?}: {pending:#?}",
            pending.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One operation's charge is its outcome, every sender got the same
/// answer, and its record replays that answer.
pub(crate) async fn operation(
    op: &Operation,
    mode: Mode,
    charge: &Value,
    bodies: Option<&Vec<Vec<u8>>>,
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
    let answered = match bodies {
        Some(bodies) => {
            assert_eq!(bodies.len(), SENDERS_PER_OPERATION);
            assert!(
                bodies.iter().all(|b| b == &bodies[0]),
                "op {}: senders got different answers",
                op.id
            );
            Some(&bodies[0])
        }
        None => None,
    };
    if let (Some(answered), false) = (answered, op.declined) {
        let answered: Value = serde_json::from_slice(answered).unwrap();
        assert_eq!(charge, &answered, "op {}: the charge is the answer", op.id);
    }
    // The record is there, finished, and replays the same bytes.
    let replay = op.callers[0]
        .post_keyed("/charges", &op.key, &op.body(mode))
        .await
        .unwrap();
    assert_eq!(replay.status().as_u16(), op.final_status(), "op {}", op.id);
    assert_eq!(
        replay
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..]),
        "op {} is unfinished",
        op.id
    );
    let replayed = replay.bytes().await.unwrap();
    match answered {
        Some(answered) => assert_eq!(&replayed, answered, "op {}: the replay differs", op.id),
        None if !op.declined => {
            let replayed: Value = serde_json::from_slice(&replayed).unwrap();
            assert_eq!(&replayed, charge, "op {}: the replay is the charge", op.id);
        }
        None => {}
    }
}
