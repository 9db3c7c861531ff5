//! The load of the Citus tests that change the cluster under it: callers
//! paying at once, each key sent until it is answered 201, and the
//! verdict once they stop.

use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use testkit::{new_key, Caller, Database, Server};

/// One caller's keys and what it was told before each 201.
struct Sent {
    caller: Caller,
    /// Each key, with the id of the charge its 201 named.
    keys: Vec<(String, String)>,
    /// Every answer that was not a 201: its status, and whether it said
    /// when to retry.
    refused: Vec<(u16, bool)>,
}

/// Callers paying until [`Load::stop`].
pub(crate) struct Load {
    sending: Arc<AtomicBool>,
    senders: Vec<tokio::task::JoinHandle<Sent>>,
}

impl Load {
    /// `callers` new callers of `server`, each paying key after key.
    pub(crate) fn start(server: &Server, callers: i64) -> Self {
        let sending = Arc::new(AtomicBool::new(true));
        let senders = (0..callers)
            .map(|c| tokio::spawn(pay(server.caller(), c, sending.clone())))
            .collect();
        Self { sending, senders }
    }

    /// Stops the callers and judges: every key is charged exactly once,
    /// with the charge its 201 named (none lost, none twice), and every
    /// other answer was a 409 or 503 with `Retry-After`, never a 500.
    /// Prints what it saw under `what`.
    pub(crate) async fn stop_and_judge(self, server: &Server, database: &Database, what: &str) {
        self.sending.store(false, Ordering::SeqCst);
        let (mut keys, mut refusals) = (0, Vec::new());
        for sender in self.senders {
            let sent = sender.await.unwrap();
            let charges = server.bearer(sent.caller.token()).charges().await.unwrap();
            assert_eq!(charges.len(), sent.keys.len(), "one charge per key");
            for (key, id) in &sent.keys {
                assert!(
                    charges.iter().any(|c| c["id"] == id.as_str()),
                    "the charge {id} answered for {key} is gone"
                );
            }
            keys += sent.keys.len();
            refusals.extend(sent.refused);
        }
        let mut counted = std::collections::BTreeMap::new();
        for refusal in &refusals {
            *counted.entry(refusal).or_insert(0) += 1;
        }
        println!("{what}: {keys} keys charged; refusals by (status, Retry-After): {counted:?}");
        let wrong: Vec<_> = (refusals.iter())
            .filter(|(status, retry_after)| ![409, 503].contains(status) || !retry_after)
            .collect();
        let log = server.log_text();
        let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
        assert!(
            wrong.is_empty(),
            "answers that are not a retryable refusal: {wrong:?}; the server's errors:\n{}",
            errors.join("\n")
        );
        assert_eq!(database.count("charges").await.unwrap(), keys as i64);
    }
}

/// Caller `c`'s payments while `sending` holds, each key sent every 100 ms
/// until it is answered 201.
async fn pay(caller: Caller, c: i64, sending: Arc<AtomicBool>) -> Sent {
    let (mut keys, mut refused) = (Vec::new(), Vec::new());
    let mut n = 0;
    while sending.load(Ordering::SeqCst) {
        n += 1;
        let (key, amount) = (new_key(), c * 100_000 + n);
        let id = loop {
            let answer = caller
                .post_keyed("/charges", &key, &charge(amount))
                .await
                .unwrap();
            let status = answer.status().as_u16();
            if status == 201 {
                let body: serde_json::Value = answer.json().await.unwrap();
                break body["id"].as_str().unwrap().to_owned();
            }
            refused.push((status, answer.headers().contains_key("retry-after")));
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        keys.push((key, id));
    }
    Sent {
        caller,
        keys,
        refused,
    }
}

/// Charge `n`'s body: its own amount and receipt address.
pub(crate) fn charge(n: i64) -> Value {
    json!({"amount": 100 + n, "currency": "usd", "receipt_email": format!("buyer{n}@shop.example")})
}
