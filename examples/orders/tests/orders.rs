//! The sqlx service as its users see it: the real `orders` binary on a
//! fresh PostgreSQL database (`TEST_POSTGRES_URL`, run with
//! `--include-ignored`), charging at the real payment provider simulator
//! (`psp`). A retry gets the first answer byte for byte, another body
//! under the key is a 422, concurrent duplicates charge once, a SIGKILL
//! amid duplicate senders leaves one charge and one order per key, and an
//! order whose process died in its step is finished by the completer.

use anyhow::{bail, Result};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use testkit::{Auth, Binary, Caller, Database, Fault, Launch, LedgerRow, Process, Psp};

/// The service under test (`ORDERS_BIN` overrides).
const ORDERS: Binary = Binary::new("orders", "orders", "ORDERS_BIN");

/// The service, its database and the provider it charges.
struct Shop {
    orders: Process,
    psp: Psp,
    _database: Database,
    customer: Caller,
}

impl Shop {
    /// A fresh database, a provider and the service on them, with `flags`.
    async fn start(flags: &[&str]) -> Result<Self> {
        Self::with_provider_latency(Duration::ZERO, flags).await
    }

    /// [`Shop::start`], the provider taking `latency` over each charge.
    async fn with_provider_latency(latency: Duration, flags: &[&str]) -> Result<Self> {
        let psp = tokio::task::spawn_blocking(move || Psp::with_latency(latency)).await??;
        Self::on(psp, Launch::new(ORDERS), flags).await
    }

    /// A fresh database, and the service `launch` starts on it charging
    /// at `psp`, with `flags`.
    async fn on(psp: Psp, launch: Launch, flags: &[&str]) -> Result<Self> {
        let database = Database::postgres().await?;
        let launch = launch
            .env_remove("DATABASE_URL")
            .args(["--database-url", &database.url()])
            .args(["--provider-url", &psp.base_url()])
            .args(flags);
        let orders = tokio::task::spawn_blocking(move || launch.start()).await??;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        let customer = Caller::new(http, orders.base_url(), Auth::Bearer("tok_ada".into()));
        Ok(Self {
            orders,
            psp,
            _database: database,
            customer,
        })
    }

    /// `POST /orders` under `key`: status, `Idempotent-Replayed`, body.
    async fn order(&self, key: &str, body: &Value) -> Result<(StatusCode, bool, Vec<u8>)> {
        let response = self.customer.post_keyed("/orders", key, body).await?;
        let replayed = response
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true");
        Ok((
            response.status(),
            replayed,
            response.bytes().await?.to_vec(),
        ))
    }

    /// `GET /orders`: the caller's orders.
    async fn orders(&self) -> Result<Vec<Value>> {
        let response = self
            .customer
            .request(reqwest::Method::GET, "/orders")
            .send()
            .await?;
        let body: Value = response.error_for_status()?.json().await?;
        Ok(body["data"].as_array().cloned().unwrap_or_default())
    }

    /// The provider's charges, by our `Idempotency-Key` there.
    async fn charges(&self) -> Result<HashMap<String, Vec<LedgerRow>>> {
        let mut by_key: HashMap<String, Vec<LedgerRow>> = HashMap::new();
        for row in self.psp.ledger().await? {
            by_key
                .entry(row.idempotency_key.clone())
                .or_default()
                .push(row);
        }
        Ok(by_key)
    }

    /// Two concurrent senders per key, each posting the key's order.
    fn send_twice_each(
        &self,
        keys: &[String],
    ) -> Vec<tokio::task::JoinHandle<reqwest::Result<StatusCode>>> {
        let mut senders = Vec::new();
        for key in keys {
            for _ in 0..2 {
                let (customer, key) = (self.customer.clone(), key.clone());
                senders.push(tokio::spawn(async move {
                    customer
                        .post_keyed("/orders", &key, &order_for(&key))
                        .await
                        .map(|r| r.status())
                }));
            }
        }
        senders
    }

    /// Retries each key until its final answer (a 201), as a client
    /// would: 409 while another request holds it, 503 while unknown.
    async fn retry_until_answered(&self, keys: &[String]) -> Result<HashMap<String, Vec<u8>>> {
        let mut answers = HashMap::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        for key in keys {
            loop {
                let (status, _, bytes) = self.order(key, &order_for(key)).await?;
                if status == StatusCode::CREATED {
                    answers.insert(key.clone(), bytes);
                    break;
                }
                assert!(
                    [StatusCode::CONFLICT, StatusCode::SERVICE_UNAVAILABLE].contains(&status),
                    "{key}: {status} {}",
                    String::from_utf8_lossy(&bytes)
                );
                assert!(Instant::now() < deadline, "{key} never got its answer");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(answers)
    }

    /// How many answers the provider has dropped after charging.
    fn dropped_answers(&self) -> usize {
        self.psp
            .log_text()
            .matches("fault: dropping the answer")
            .count()
    }

    /// SIGKILL, then a start on the same address and database.
    fn kill_and_restart(&mut self) -> Result<()> {
        let orders = &mut self.orders;
        tokio::task::block_in_place(|| {
            orders.kill()?;
            orders.restart()
        })
    }
}

fn body(item: &str, amount: i64) -> Value {
    json!({ "item": item, "amount": amount })
}

/// The order a key stands for: the same body on every retry.
fn order_for(key: &str) -> Value {
    body(key, 100 + key.len() as i64)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs PostgreSQL: TEST_POSTGRES_URL, --include-ignored"]
async fn a_retry_is_the_first_answer_byte_for_byte_and_another_body_is_a_422() -> Result<()> {
    let shop = Shop::start(&[]).await?;
    let (status, replayed, first) = shop.order("o-1", &body("lamp", 4200)).await?;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&first)
    );
    assert!(!replayed);
    let (status, replayed, again) = shop.order("o-1", &body("lamp", 4200)).await?;
    assert_eq!((status, replayed), (StatusCode::CREATED, true));
    assert_eq!(
        again, first,
        "the retry's body is the first answer's, byte for byte"
    );
    let (status, _, problem) = shop.order("o-1", &body("chair", 9900)).await?;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(String::from_utf8_lossy(&problem).contains("idempotency-key-mismatch"));

    let orders = shop.orders().await?;
    assert_eq!(orders.len(), 1);
    assert_eq!(orders[0]["status"], "paid");
    assert_eq!(serde_json::from_slice::<Value>(&first)?, orders[0]);
    let charges = shop.charges().await?;
    assert_eq!(charges.len(), 1, "one charge at the provider: {charges:?}");
    assert_eq!(charges.values().next().unwrap()[0].amount, 4200);
    Ok(())
}

/// A provider over TLS is charged when its certificate's CA is trusted
/// (`SSL_CERT_FILE` beside the platform's roots); with the platform's
/// roots alone it is never charged, and the order waits for a retry (503
/// `provider-unavailable`).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs PostgreSQL: TEST_POSTGRES_URL, --include-ignored"]
async fn a_provider_over_tls_is_charged_only_when_its_certificate_is_trusted() -> Result<()> {
    let ca = testkit::TestCa::new("orders-provider")?;
    let psp = Psp::start_tls(&ca)?;
    assert!(psp.base_url().starts_with("https://"), "{}", psp.base_url());
    let trusting = Launch::new(ORDERS).env("SSL_CERT_FILE", ca.ca_pem());
    let shop = Shop::on(psp, trusting, &[]).await?;
    let (status, _, answer) = shop.order("tls-1", &body("lamp", 4200)).await?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(shop.psp.ledger().await?.len(), 1);

    let psp = Psp::start_tls(&ca)?;
    let untrusting = Launch::new(ORDERS).env_remove("SSL_CERT_FILE");
    let shop = Shop::on(psp, untrusting, &[]).await?;
    let (status, _, answer) = shop.order("tls-2", &body("lamp", 4200)).await?;
    let problem: Value = serde_json::from_slice(&answer)?;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
    assert!(
        problem["type"]
            .as_str()
            .unwrap_or_default()
            .ends_with("provider-unavailable"),
        "{problem}"
    );
    assert!(
        shop.psp.ledger().await?.is_empty(),
        "an untrusted provider was charged"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs PostgreSQL: TEST_POSTGRES_URL, --include-ignored"]
async fn concurrent_duplicates_charge_once() -> Result<()> {
    let shop = std::sync::Arc::new(Shop::start(&[]).await?);
    let senders: Vec<_> = (0..20)
        .map(|_| {
            let shop = std::sync::Arc::clone(&shop);
            tokio::spawn(async move { shop.order("o-2", &body("desk", 15000)).await })
        })
        .collect();
    let mut created = Vec::new();
    for sender in senders {
        let (status, _, bytes) = sender.await??;
        match status {
            StatusCode::CREATED => created.push(bytes),
            // The first still runs: retry later.
            StatusCode::CONFLICT => {}
            other => bail!("a concurrent duplicate got {other}"),
        }
    }
    let (status, _, last) = shop.order("o-2", &body("desk", 15000)).await?;
    assert_eq!(status, StatusCode::CREATED);
    assert!(
        created.iter().all(|bytes| *bytes == last),
        "every 201 is the same answer"
    );
    assert_eq!(shop.orders().await?.len(), 1);
    let charges = shop.charges().await?;
    assert_eq!(charges.len(), 1);
    assert!(charges.values().all(|rows| rows.len() == 1));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs PostgreSQL: TEST_POSTGRES_URL, --include-ignored"]
async fn a_sigkill_amid_duplicate_senders_leaves_one_charge_and_one_order_per_key() -> Result<()> {
    // Leases short enough that the completer and the retries take over
    // what the killed process held.
    // The provider takes 100 ms over each charge, so that the kill finds
    // orders in every phase: placed, charging, charged but not recorded.
    let mut shop = Shop::with_provider_latency(
        Duration::from_millis(100),
        &["--operation-lease", "1s", "--complete-interval", "200ms"],
    )
    .await?;
    let keys: Vec<String> = (0..24).map(|n| format!("k-{n}")).collect();
    // The first charges are made but their answers lost. Whether those
    // requests outlive the kill is a race (a request whose sender is
    // SIGKILLed is cancelled by the provider's server with its fault
    // already taken, before its charge); the round after the restart
    // below makes the dropped answers certain.
    shop.psp.fault(Fault::DropAfterCharge, 6).await?;
    // Two senders per key, all at once; the process dies under them.
    let senders = shop.send_twice_each(&keys);
    tokio::time::sleep(Duration::from_millis(150)).await;
    shop.kill_and_restart()?;
    let mut cut_off = 0;
    for sender in senders {
        // Answered or cut off by the kill: either is what a client sees.
        cut_off += usize::from(sender.await?.is_err());
    }
    assert!(
        cut_off > 0,
        "the kill came after every answer: it tested nothing"
    );
    let mut answers = shop.retry_until_answered(&keys).await?;
    let pending = shop.psp.pending_fault().await?;
    assert_eq!(pending["mode"], "none", "faults left unused: {pending}");

    // Then, on the restarted process, three more answers are lost after
    // their charges: each such order is charged again under the same
    // downstream key and gets the provider's first charge back.
    let dropped_before = shop.dropped_answers();
    let later: Vec<String> = (0..3).map(|n| format!("later-{n}")).collect();
    shop.psp.fault(Fault::DropAfterCharge, 3).await?;
    for sender in shop.send_twice_each(&later) {
        sender.await??;
    }
    answers.extend(shop.retry_until_answered(&later).await?);
    assert_eq!(
        shop.dropped_answers() - dropped_before,
        3,
        "answers the provider dropped after charging, after the restart"
    );

    let keys: Vec<String> = keys.into_iter().chain(later).collect();
    for key in &keys {
        let (status, replayed, bytes) = shop.order(key, &order_for(key)).await?;
        assert_eq!((status, replayed), (StatusCode::CREATED, true));
        assert_eq!(bytes, answers[key], "{key}: one answer, whatever the kill");
    }
    let orders = shop.orders().await?;
    assert_eq!(orders.len(), keys.len(), "one order per key: {orders:?}");
    assert!(orders.iter().all(|order| order["status"] == "paid"));
    let charges = shop.charges().await?;
    assert_eq!(charges.len(), keys.len(), "one downstream key per order");
    for (key, rows) in &charges {
        assert_eq!(rows.len(), 1, "{key} was charged {} times", rows.len());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs PostgreSQL: TEST_POSTGRES_URL, --include-ignored"]
async fn an_order_whose_process_died_in_its_step_is_finished_by_the_completer() -> Result<()> {
    let mut shop =
        Shop::start(&["--operation-lease", "1s", "--complete-interval", "200ms"]).await?;
    // The provider charges the card and loses its answer: the request
    // cannot know, and answers 503 with the order placed.
    shop.psp.fault(Fault::DropAfterCharge, 1).await?;
    let (status, _, _) = shop.order("o-3", &body("sofa", 50000)).await?;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(shop.orders().await?[0]["status"], "pending");
    // The process dies before anyone retries.
    shop.kill_and_restart()?;

    // Nobody retries: the restarted process's completer takes the order
    // over, charges under the same downstream key (and gets the charge the
    // provider made back, not a second one) and finishes it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let orders = shop.orders().await?;
        if orders[0]["status"] == "paid" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the completer never finished it: {orders:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let charges = shop.charges().await?;
    assert_eq!(charges.len(), 1, "charged once, under one key: {charges:?}");
    assert!(charges.values().all(|rows| rows.len() == 1), "{charges:?}");
    let (status, replayed, _) = shop.order("o-3", &body("sofa", 50000)).await?;
    assert_eq!((status, replayed), (StatusCode::CREATED, true));
    Ok(())
}
