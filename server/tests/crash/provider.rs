//! The provider mode's own parts: the fault thrower that makes the payment
//! provider misbehave now and then, and the checks of what happened past
//! the database: the provider's ledger against the charges, and MailDev's
//! inbox against the receipts owed.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use testkit::{Fault, MailDev, Psp};

/// How long the receipts owed may take to arrive after the senders are
/// done: a relay killed between its claim and its send leaves the receipt
/// claimed for 60 s.
const DELIVERY: Duration = Duration::from_secs(90);
/// The SMTP connections a relay sends over at once (`CONNECTIONS` in
/// server/src/outbox.rs): each may hold a message accepted and not yet
/// marked when the process dies.
const RELAY_CONNECTIONS: usize = 4;

/// Until `running` is cleared: every 100 to 800 ms a random fault (`fail`,
/// `drop-after-charge`, `delay` 300 ms, `down`) for the next 1 to 3 charge
/// requests. How many of each it threw.
pub(crate) async fn throw_faults(
    psp: Arc<Psp>,
    seed: u64,
    running: Arc<AtomicBool>,
) -> BTreeMap<&'static str, usize> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xfa17);
    let mut thrown = BTreeMap::new();
    while running.load(Ordering::Acquire) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..800))).await;
        let (name, fault) = match rng.random_range(0..4) {
            0 => ("fail", Fault::Fail),
            1 => ("drop-after-charge", Fault::DropAfterCharge),
            2 => ("delay 300ms", Fault::Delay(Duration::from_millis(300))),
            _ => ("down", Fault::Down),
        };
        psp.fault(fault, rng.random_range(1..=3))
            .await
            .unwrap_or_else(|e| panic!("throwing a fault: {e:#}"));
        *thrown.entry(name).or_default() += 1;
    }
    psp.clear_faults().await.unwrap();
    thrown
}

/// The provider's ledger holds exactly one charge per succeeded charge,
/// the one it names, for its amount, and nothing else (so none for a
/// declined one). `charges` are every charge of every operation. How many
/// rows the ledger holds.
pub(crate) async fn check_ledger(psp: &Psp, charges: &[&Value]) -> usize {
    let ledger = psp.ledger().await.unwrap_or_else(|e| panic!("{e:#}"));
    let rows: HashMap<&str, &testkit::LedgerRow> =
        ledger.iter().map(|row| (row.id.as_str(), row)).collect();
    assert_eq!(rows.len(), ledger.len(), "ledger ids repeat: {ledger:#?}");
    let keys: HashSet<&str> = ledger.iter().map(|r| r.idempotency_key.as_str()).collect();
    assert_eq!(
        keys.len(),
        ledger.len(),
        "two charges under one provider key"
    );
    let mut named = HashSet::new();
    for charge in charges {
        match charge["provider_charge"].as_str() {
            Some(id) => {
                assert_eq!(charge["status"], "succeeded", "{charge}");
                let row = rows.get(id).unwrap_or_else(|| {
                    panic!(
                        "charge {} names {id}, which the provider never made",
                        charge["id"]
                    )
                });
                assert_eq!(
                    Some(row.amount),
                    charge["amount"].as_i64(),
                    "{charge} vs {row:?}"
                );
                assert!(named.insert(id), "two charges name the provider's {id}");
            }
            None => assert_ne!(
                charge["status"], "succeeded",
                "succeeded without the provider: {charge}"
            ),
        }
    }
    let orphans: Vec<_> = ledger
        .iter()
        .filter(|r| !named.contains(r.id.as_str()))
        .collect();
    assert!(
        orphans.is_empty(),
        "{} charges at the provider belong to no succeeded charge (a card charged twice, \
         or for a declined or lost operation): {orphans:#?}",
        orphans.len()
    );
    ledger.len()
}

/// Every receipt owed (a succeeded charge with a `receipt_email`, from
/// `charges`) reaches MailDev at least once, to its address, with its
/// Message-ID; nothing else arrives. A second copy can only follow a crash
/// between the SMTP server's acceptance and the mark, where each of the
/// relay's connections holds one message at most, so there are no more
/// duplicates than that per process death (`deaths`). Prints the
/// duplicates; returns (receipts owed, messages received, duplicates).
pub(crate) async fn check_receipts(
    maildev: &MailDev,
    charges: &[&Value],
    deaths: usize,
) -> (usize, usize, usize) {
    let owed: HashMap<String, &str> = charges
        .iter()
        .filter(|c| c["status"] == "succeeded")
        .filter_map(|c| {
            let email = c["receipt_email"].as_str()?;
            Some((
                format!("<receipt.{}@exactly-once>", c["id"].as_str()?),
                email,
            ))
        })
        .collect();
    let emails = maildev
        .wait_for(DELIVERY, "every receipt owed", |emails| {
            let arrived: HashSet<&str> = emails.iter().map(|e| e.message_id.as_str()).collect();
            owed.keys().all(|id| arrived.contains(id.as_str()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut copies: BTreeMap<&str, usize> = BTreeMap::new();
    for email in &emails {
        let recipient = owed.get(&email.message_id).unwrap_or_else(|| {
            panic!(
                "a receipt nobody is owed (declined, no receipt_email, or no charge): {email:#?}"
            )
        });
        assert_eq!(email.to, vec![recipient.to_string()], "{email:#?}");
        *copies.entry(&email.message_id).or_default() += 1;
    }
    let duplicates: Vec<_> = copies.iter().filter(|(_, n)| **n > 1).collect();
    let extra: usize = duplicates.iter().map(|(_, n)| **n - 1).sum();
    println!(
        "crash harness: receipts owed={} received={} duplicate copies={extra} {duplicates:?}",
        owed.len(),
        emails.len()
    );
    assert!(
        extra <= deaths * RELAY_CONNECTIONS,
        "{extra} duplicate receipts, more than the {deaths} process deaths (each with \
         {RELAY_CONNECTIONS} messages in flight at most) could explain"
    );
    (owed.len(), emails.len(), extra)
}
