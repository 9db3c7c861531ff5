//! What the test reads of the outcome: where each instance writes, when
//! it is healthy again, the charges left pending, the provider's ledger.

use crate::{verdict, Standby};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use testkit::{Psp, Server};

/// The `database_host` of a `GET /healthz` 200.
pub(crate) async fn writes_to(server: &Server) -> String {
    let health: Value = server
        .http()
        .get(server.url("/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok", "{health}");
    health["database_host"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Polls `url` until 200; the time since `since`.
pub(crate) async fn healthy_again(http: &reqwest::Client, url: &str, since: Instant) -> Duration {
    loop {
        let ok = http
            .get(url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        if ok {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "{url} never healthy again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until no charge is `pending` (the completer's work); how many
/// were pending at first.
pub(crate) async fn settle(
    callers: &[&testkit::Caller],
    timeout: Duration,
    standby: Standby,
) -> usize {
    let deadline = Instant::now() + timeout;
    let mut first = None;
    loop {
        let charges = verdict::charges(callers).await;
        let pending = charges
            .values()
            .flatten()
            .filter(|c| c["status"] == "pending")
            .count();
        first.get_or_insert(pending);
        if pending == 0 || (standby == Standby::Asynchronous && Instant::now() >= deadline) {
            return first.unwrap_or_default();
        }
        assert!(
            Instant::now() < deadline,
            "{pending} charges still pending after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The provider's ledger against the charges the database kept.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    pub(crate) rows: usize,
    /// Downstream keys charged more than once.
    pub(crate) charged_twice: usize,
    /// Provider charges no kept charge names.
    pub(crate) orphans: usize,
}

impl Ledger {
    pub(crate) async fn read(psp: &Psp, charges: &HashMap<String, Vec<Value>>) -> Self {
        let ledger = psp.ledger().await.unwrap_or_else(|e| panic!("{e:#}"));
        let keys: HashSet<&str> = ledger.iter().map(|r| r.idempotency_key.as_str()).collect();
        let named: HashSet<&str> = charges
            .values()
            .flatten()
            .filter_map(|c| c["provider_charge"].as_str())
            .collect();
        Self {
            rows: ledger.len(),
            charged_twice: ledger.len() - keys.len(),
            orphans: ledger
                .iter()
                .filter(|r| !named.contains(r.id.as_str()))
                .count(),
        }
    }
}
