//! A disk error at `fsync`: SQLite's COMMIT fails after the
//! batch's frames, its commit frame included, are in the WAL. This process
//! no longer sees them, but a process that starts on the file before they
//! are overwritten replays them: the batch did happen. So the answer is
//! "outcome unknown: retry with the same key", never "nothing was done",
//! and the retry gets the truth.

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use testkit::{new_key, new_token, Database, LazyFs, Psp, Server};

/// A payment through the provider whose start phase's commit fails at
/// fsync, then the process is killed (as an orchestrator kills one whose
/// `/healthz` went 503, or the OOM killer does) before anything overwrote
/// the frames. The restart replays the start and the completer charges the
/// card: the shopper must have been told the outcome was unknown, and the
/// retry gets that one charge. An earlier release answered 503 "nothing
/// was done" and charged the card all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_at_commit_is_answered_outcome_unknown_and_the_retry_gets_the_truth() {
    let _alone = super::ONE_AT_A_TIME.lock().await;
    let fs = LazyFs::mount().unwrap();
    let psp = Psp::start().unwrap();
    let database = Database::sqlite_at(fs.path().join("shop.db"));
    let mut server = Server::builder()
        .database(database)
        .durability_full()
        .psp(&psp)
        .flags([
            "--operation-lease",
            "1s",
            "--complete-interval",
            "1s",
            "--sweep-interval",
            "1h",
        ])
        .start()
        .await
        .unwrap();
    let shopper = server.bearer(&new_token());
    let pay = |key: String| {
        let shopper = shopper.clone();
        async move {
            let body = json!({"amount": 2600, "currency": "usd"});
            let answer = shopper.post_keyed("/charges", &key, &body).await.unwrap();
            let status = answer.status().as_u16();
            let retry_after = answer.headers().contains_key("retry-after");
            (status, retry_after, answer.json::<Value>().await.unwrap())
        }
    };
    assert_eq!(pay(new_key()).await.0, 201, "a first payment, synced");

    fs.fail_next_fsync("-wal");
    let key = new_key();
    let (status, retry_after, told) = pay(key.clone()).await;
    server.kill().unwrap();
    assert_eq!(fs.stats().failed_syncs, 1, "the commit's fsync failed");
    assert_eq!(status, 503, "{told}");
    assert_eq!(told["type"], "/problems/unavailable", "{told}");
    assert!(retry_after, "a 503 to retry says when: {told}");
    // Outcome unknown, in the words of the contract: it may have been
    // done, and the same key gets the truth.
    let detail = told["detail"].as_str().unwrap_or_default();
    assert!(
        !detail.contains("nothing was done"),
        "told \"nothing was done\" after a failed fsync: {told}"
    );
    assert!(
        detail.contains("may or may not have been done")
            && detail.contains("retry with the same Idempotency-Key"),
        "not told the outcome is unknown after a failed fsync: {told}"
    );

    server.restart().unwrap();
    // The replayed start is resumed by the completer: the card is charged.
    let deadline = Instant::now() + Duration::from_secs(20);
    while psp.ledger().await.unwrap().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the start was not replayed from the WAL (nothing to prove here)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let shopper = server.bearer(shopper.token());
    let body = json!({"amount": 2600, "currency": "usd"});
    let retry = shopper.post_keyed("/charges", &key, &body).await.unwrap();
    assert_eq!(retry.status(), 201);
    let charge: Value = retry.json().await.unwrap();
    let ledger = psp.ledger().await.unwrap();
    assert_eq!(ledger.len(), 2, "one charge for the operation: {ledger:?}");
    assert_eq!(charge["provider_charge"], ledger[0].id.as_str());
}
