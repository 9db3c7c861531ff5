//! CONTRACT section 6, recovery: a request that dies at either side of
//! the provider call leaves its operation at a recovery point under a
//! lease; a retry once the lease runs out, or the completer, resumes it,
//! and a holder whose lease was taken over cannot record. Still one charge
//! in the provider's ledger per operation.

use crate::helpers::Checkout;
use crate::helpers::{assert_refused, charges_until, pay_until_free, visa};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::{new_key, Fault, LedgerRow};

/// `crash-before-commit` with the provider: the start phase rolls back, so
/// nothing is stored and nothing charged; the retry runs once.
#[tokio::test]
async fn crash_before_commit_stores_nothing_charges_nothing_and_the_retry_runs_once() {
    let shop = Checkout::start(&[]).await;
    let key = new_key();
    let lost = shop
        .pay_with_chaos(&key, &visa(800), "crash-before-commit")
        .await;
    assert!(lost.is_none(), "no answer: {lost:?}");
    shop.app.assert_nothing_stored().await;
    assert_eq!(shop.ledger().await, vec![]);

    let retry = shop.pay(&key, &visa(800)).await;
    assert!(!retry.replayed, "it ran for real this time");
    shop.assert_charged_once(&retry).await;
}

/// Flags for a lease of `lease`, and a completer that keeps out of the way
/// of a test about retries.
fn lease_of(lease: &str) -> [&str; 4] {
    ["--operation-lease", lease, "--complete-interval", "1h"]
}

/// The process exits (137) at `chaos`, and starts again on the same
/// database; once the lease runs out the retry resumes the operation:
/// one charge, the one in the ledger. Returns the ledger after the exit.
async fn exit_restart_and_retry(chaos: &str) -> Vec<LedgerRow> {
    let mut shop = Checkout::start(&lease_of("2s")).await;
    let key = new_key();
    shop.pay_and_exit(&key, &visa(5100), chaos).await;
    let after_exit = shop.ledger().await;

    shop.app.server.restart().unwrap();
    let pending = shop.app.charges().await;
    assert_eq!(pending.len(), 1, "the start was committed: {pending:?}");
    assert_eq!(pending[0]["status"], "pending");
    let resumed = pay_until_free(&shop, &key, &visa(5100)).await;
    let charge = shop.assert_charged_once(&resumed).await;
    assert!(!resumed.replayed);
    assert_eq!(charge["id"], pending[0]["id"]);
    assert_eq!(shop.resumed("retry").await, 1.0);
    assert_eq!(shop.resumed("completer").await, 0.0);
    after_exit
}

/// `exit-before-provider`: the start is committed and the process exits
/// (137) before the provider is called: nothing charged; after a restart
/// and the lease, the retry charges once.
#[tokio::test]
async fn exit_before_provider_charges_nothing_and_the_retry_after_the_lease_charges_once() {
    let after_exit = exit_restart_and_retry("exit-before-provider").await;
    assert_eq!(after_exit, vec![], "the provider was never called");
}

/// `exit-after-provider`: the provider charged, the process exits (137)
/// before that is committed; after a restart and the lease, the retry
/// answers with the charge that was already in the ledger.
#[tokio::test]
async fn exit_after_provider_and_the_retry_answers_with_the_charge_already_made() {
    let after_exit = exit_restart_and_retry("exit-after-provider").await;
    assert_eq!(after_exit.len(), 1, "the provider charged before the exit");
    // exit_restart_and_retry checked that the answer is the one ledger row.
}

/// A retry while the first request holds the lease (its provider call is
/// slow) is `409 idempotency-key-in-use` with Retry-After, and runs
/// nothing; the first request still answers 201, once.
#[tokio::test]
async fn a_retry_during_the_lease_is_409_in_use_and_the_first_request_answers_once() {
    let shop = std::sync::Arc::new(Checkout::start(&[]).await);
    let key = new_key();
    shop.fault(Fault::Delay(Duration::from_millis(3000)), 1)
        .await;
    let first = {
        let (shop, key) = (shop.clone(), key.clone());
        tokio::spawn(async move { shop.pay(&key, &visa(6000)).await })
    };
    charges_until(&shop.app, Duration::from_secs(10), |c| c.len() == 1).await;
    let retry = shop.pay(&key, &visa(6000)).await;
    assert_refused(&retry, 409, "idempotency-key-in-use");
    assert!(retry.retry_after, "409 in use without Retry-After");

    let first = first.await.unwrap();
    shop.assert_charged_once(&first).await;
    assert!(!first.replayed);
    assert_eq!(shop.app.keyed_requests("conflict").await, 1.0);
    let replay = shop.pay(&key, &visa(6000)).await;
    assert!(replay.replayed);
    assert_eq!(replay.body, first.body);
}

/// The completer finishes an operation no client comes back for: after
/// `exit-after-provider` and a restart, with no retry, the charge ends
/// succeeded with the ledger's charge, and a later retry replays it.
#[tokio::test]
async fn the_completer_finishes_an_abandoned_operation_that_no_client_retries() {
    let mut shop = Checkout::start(&["--operation-lease", "1s", "--complete-interval", "1s"]).await;
    let key = new_key();
    shop.pay_and_exit(&key, &visa(3300), "exit-after-provider")
        .await;
    shop.app.server.restart().unwrap();

    let charges = charges_until(&shop.app, Duration::from_secs(20), |c| {
        c.len() == 1 && c[0]["status"] != "pending"
    })
    .await;
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(charges[0]["status"], "succeeded");
    assert_eq!(charges[0]["provider_charge"], ledger[0].id.as_str());
    assert_eq!(shop.resumed("completer").await, 1.0);
    assert_eq!(shop.resumed("retry").await, 0.0);

    let later = shop.pay(&key, &visa(3300)).await;
    assert_eq!(later.status, 201);
    assert!(later.replayed, "the completer recorded the answer");
    assert_eq!(later.json(), charges[0]);
    assert_eq!(shop.ledger().await, ledger);
}

/// A step slower than its lease finishes under the request that started
/// it: the provider takes 4 s against a 1 s lease, with the
/// completer looking every second. The request renews its lease while the
/// call runs, so nobody takes the operation over: a retry meanwhile is
/// told `409 in use` (with Retry-After) and resumes nothing, and the first
/// request answers the charge it made, 201. One provider charge. (An
/// earlier release let the completer take the operation over again and
/// again while the first call was in flight, and answered the request
/// whose call charged the card 409.)
#[tokio::test]
async fn a_step_slower_than_its_lease_finishes_under_the_request_that_started_it() {
    let shop =
        Arc::new(Checkout::start(&["--operation-lease", "1s", "--complete-interval", "1s"]).await);
    let key = new_key();
    shop.fault(Fault::Delay(Duration::from_secs(4)), 1).await;
    let first = {
        let (shop, key) = (shop.clone(), key.clone());
        tokio::spawn(async move { shop.pay(&key, &visa(7700)).await })
    };
    charges_until(&shop.app, Duration::from_secs(10), |c| c.len() == 1).await;
    // Past the lease, twice over: the holder renewed it.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let meanwhile = shop.pay(&key, &visa(7700)).await;
    assert_refused(&meanwhile, 409, "idempotency-key-in-use");
    assert!(meanwhile.retry_after, "409 in use without Retry-After");

    let first = first.await.unwrap();
    shop.assert_charged_once(&first).await;
    assert!(!first.replayed, "the first answer to its request");
    assert_eq!(shop.resumed("retry").await, 0.0, "nobody took it over");
    assert_eq!(shop.resumed("completer").await, 0.0, "nobody took it over");
    let replay = shop.pay(&key, &visa(7700)).await;
    assert!(replay.replayed);
    assert_eq!(replay.body, first.body, "the record is the first answer");
}

/// A record stopped at a recovery point never expires while unfinished:
/// past its `--key-ttl` and a sweep, the retry still resumes the same
/// charge instead of starting a new one.
#[tokio::test]
async fn an_unfinished_operation_outlives_its_key_ttl() {
    // No completer during the test: the retry below is what resumes.
    let shop = Checkout::start(&[
        "--key-ttl",
        "1s",
        "--sweep-interval",
        "1s",
        "--complete-interval",
        "1h",
    ])
    .await;
    let key = new_key();
    shop.fault(Fault::Down, 3).await;
    assert_refused(
        &shop.pay(&key, &visa(450)).await,
        503,
        "provider-unavailable",
    );
    let pending = shop.app.charges().await;
    // A finished record beside it, with the same TTL: once a sweep has
    // deleted that one, the unfinished one has been past its TTL in a sweep.
    let beside = json!({"item_id": "sku-tee", "quantity": 1});
    let reserved = shop.app.post("/reservations", &new_key(), &beside).await;
    assert_eq!(reserved.status(), 201);
    let deadline = Instant::now() + Duration::from_secs(10);
    while shop.app.records().await > 1 {
        assert!(
            Instant::now() < deadline,
            "no sweep expired the finished record"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(shop.app.records().await, 1, "the unfinished one stays");

    let resumed = shop.pay(&key, &visa(450)).await;
    let charge = shop.assert_charged_once(&resumed).await;
    assert_eq!(charge["id"], pending[0]["id"], "the same operation went on");
    assert_eq!(shop.app.charges().await.len(), 1);
}
