//! Reservations under kills: the stock a fresh database holds, the random
//! reservation an operation makes, and the check once the senders are
//! done: every item lost exactly what the reservations answered 201 took,
//! never went below zero, and a reservation refused with 409
//! `insufficient-inventory` took nothing and was right to refuse.

use crate::sender::{Answer, Operation};
use rand::rngs::StdRng;
use rand::Rng;
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use testkit::{Caller, Database};

/// Each item and its stock on a fresh database (docs/CONTRACT.md section
/// 3). `sku-poster` runs out after a few reservations.
pub(crate) const INVENTORY: [(&str, i64); 3] =
    [("sku-tee", 100), ("sku-mug", 20), ("sku-poster", 3)];

/// What a reservation asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reserve {
    pub(crate) item: &'static str,
    pub(crate) quantity: i64,
}

impl Reserve {
    /// A random item, 1 to 3 of it.
    pub(crate) fn random(rng: &mut StdRng) -> Self {
        Self {
            item: INVENTORY[rng.random_range(0..INVENTORY.len())].0,
            quantity: rng.random_range(1..=3),
        }
    }

    /// The body of `POST /reservations`.
    pub(crate) fn body(&self) -> Value {
        json!({"item_id": self.item, "quantity": self.quantity})
    }
}

/// The reservations and their answers (one per operation, whatever the
/// number of senders): the stock left of each item must be the stock a
/// fresh database holds less what the 201s took; `GET /inventory/ITEM`
/// through `caller`, the reservations table read from `database`. A line
/// for the report.
pub(crate) async fn check(
    reservations: &[(&Operation, Answer)],
    caller: &Caller,
    database: &Database,
) -> String {
    let mut taken: BTreeMap<&str, i64> = BTreeMap::new();
    let mut refused: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    let mut ids = Vec::new();
    for (op, answer) in reservations {
        let reserve = op.reservation().expect("a reservation");
        let body: Value = serde_json::from_slice(&answer.body)
            .unwrap_or_else(|e| panic!("op {}: {answer:?}: {e}", op.id));
        match answer.status {
            201 => {
                assert_eq!(
                    (&body["item_id"], &body["quantity"], &body["status"]),
                    (
                        &json!(reserve.item),
                        &json!(reserve.quantity),
                        &json!("reserved")
                    ),
                    "op {}: {answer:?}",
                    op.id
                );
                *taken.entry(reserve.item).or_default() += reserve.quantity;
                ids.push(body["id"].as_str().unwrap_or_default().to_owned());
            }
            409 => refused
                .entry(reserve.item)
                .or_default()
                .push(reserve.quantity),
            _ => panic!("op {}: a reservation answered {answer:?}", op.id),
        }
    }
    let mut lines = Vec::new();
    for (item, initial) in INVENTORY {
        let available = available(caller, item).await;
        let taken = taken.get(item).copied().unwrap_or_default();
        let refused = refused.get(item).map_or(&[][..], Vec::as_slice);
        assert!(available >= 0, "{item}: stock below zero: {available}");
        assert_eq!(
            initial - available,
            taken,
            "{item}: {initial} at first, {available} left, but the reservations answered 201 \
             took {taken} (and {} were refused)",
            refused.len()
        );
        // Stock only goes down: a refusal saw less than it asked for, so
        // less than that is left now.
        if let Some(wrong) = refused.iter().find(|q| **q <= available) {
            panic!("{item}: a reservation of {wrong} was refused, yet {available} are left");
        }
        lines.push(format!(
            "{item} {initial}→{available} ({} reserved, {} refused)",
            taken,
            refused.len()
        ));
    }
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        ids.len(),
        "two operations answered one reservation id"
    );
    let rows = database.count("reservations").await.unwrap();
    assert_eq!(
        usize::try_from(rows).unwrap(),
        ids.len(),
        "reservations stored vs reservations answered 201"
    );
    lines.join(", ")
}

/// `GET /inventory/ITEM`: how many are left.
async fn available(caller: &Caller, item: &str) -> i64 {
    let path = format!("/inventory/{item}");
    let response = caller
        .request(Method::GET, &path)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(response.status(), 200, "GET {path}");
    let body: Value = response.json().await.unwrap();
    body["available"]
        .as_i64()
        .unwrap_or_else(|| panic!("GET {path}: {body}"))
}
