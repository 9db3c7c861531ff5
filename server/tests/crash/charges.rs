//! The shop's charges as the harnesses read them: every caller's, by
//! description (each operation's own), and once none is `pending`.

use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use testkit::Caller;

/// Every charge of `callers`, by description.
pub(crate) async fn by_description(callers: &[&Caller]) -> HashMap<String, Vec<Value>> {
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
    by_op
}

/// Every charge of `callers` by description, once none is `pending` (the
/// completer's work), polled for at most `timeout`.
pub(crate) async fn settled(callers: &[&Caller], timeout: Duration) -> HashMap<String, Vec<Value>> {
    let deadline = Instant::now() + timeout;
    loop {
        let by_op = by_description(callers).await;
        let pending: Vec<&Value> = (by_op.values().flatten())
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
