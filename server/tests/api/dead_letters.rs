//! Dead letters (CONTRACT section 3 `operation-needs-attention`):
//! a step that can never succeed, or an operation that kept failing past
//! `--attention-after`, is set aside for an operator instead of being
//! retried forever. Every retry of its key gets the same final answer (424
//! `operation-needs-attention`, not worth retrying); what it did so far is
//! kept; a metric counts it. The same for a receipt the mail server
//! refuses for good. Sent receipts are pruned after `--outbox-retention`.

use crate::helpers::{assert_refused, visa, Checkout, Reply, TestApp};
use std::time::{Duration, Instant};
use testkit::{new_key, Fault, MailDev, Psp, RefusingSmtp, Server};

/// `GET /metrics` until `name` (no labels) reads `want`, for at most 15 s.
async fn metric_until(app: &TestApp, name: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let value = app.counter(name, &[]).await;
        if value == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} stayed {value}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A provider that refuses the charge for good (a 404: the provider URL
/// points at the wrong path, as a misconfigured deployment's would): the
/// operation is set aside at once, answered 424 `operation-needs-attention`
/// (no Retry-After), and so is every retry; the charge it recorded stays
/// (pending), nothing was charged, and the metrics count it. An earlier
/// release answered 500 and the completer retried it forever.
#[tokio::test]
async fn a_charge_the_provider_refuses_for_good_is_set_aside_with_a_final_answer() {
    let psp = Psp::start().unwrap();
    let app = TestApp::with_wrong_provider_path(&psp).await;
    let key = new_key();
    let first = Reply::read(app.post("/charges", &key, &visa(1234)).await).await;
    assert_refused(&first, 424, "operation-needs-attention");
    assert!(!first.retry_after, "not worth retrying: no Retry-After");
    for _ in 0..2 {
        let again = Reply::read(app.post("/charges", &key, &visa(1234)).await).await;
        assert_refused(&again, 424, "operation-needs-attention");
    }
    let other = app.post("/charges", &key, &visa(999)).await;
    assert_eq!(other.status(), 422, "another request under the key");

    let charges = app.charges().await;
    assert_eq!(charges.len(), 1, "what it did so far is kept");
    assert_eq!(charges[0]["status"], "pending");
    assert!(psp.ledger().await.unwrap().is_empty(), "nothing charged");
    assert_eq!(app.counter("operations_set_aside_total", &[]).await, 1.0);
    metric_until(&app, "operations_needing_attention", 1.0).await;
    // The completer leaves it alone: it is resumed by nobody.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        app.counter("operations_resumed_total", &[("by", "completer")])
            .await,
        0.0
    );
}

/// An operation whose provider stays down is retried (503
/// `provider-unavailable`, the completer trying too) until
/// `--attention-after` has passed since it started; its next failure sets
/// it aside, and the shopper's retry gets the final 424.
#[tokio::test]
async fn a_charge_that_keeps_failing_past_attention_after_is_set_aside() {
    let shop = Checkout::start(&[
        "--attention-after",
        "2s",
        "--operation-lease",
        "1s",
        "--complete-interval",
        "1s",
    ])
    .await;
    shop.fault(Fault::Down, 1_000).await;
    let key = new_key();
    let started = Instant::now();
    assert_refused(
        &shop.pay(&key, &visa(4321)).await,
        503,
        "provider-unavailable",
    );
    metric_until(&shop.app, "operations_set_aside_total", 1.0).await;
    // Not at the request's failure, nor at the completer's first tries (a
    // second apart): only once --attention-after has passed since it began.
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "set aside {:?} after it started, before --attention-after (2s)",
        started.elapsed()
    );
    let after = shop.pay(&key, &visa(4321)).await;
    assert_refused(&after, 424, "operation-needs-attention");
    assert!(shop.ledger().await.is_empty());
}

/// A receipt the mail server refuses for good (550, no such mailbox) is
/// tried once, then kept in the outbox as a dead letter: never sent again,
/// counted by `outbox_dead_letters`, no longer waiting. An earlier release
/// retried it forever and `outbox_waiting` never fell.
#[tokio::test]
async fn a_receipt_the_mail_server_refuses_for_good_becomes_a_dead_letter() {
    let smtp = RefusingSmtp::start().await.unwrap();
    let app = TestApp::start(Server::builder().flags(["--smtp-url", &smtp.smtp_url()])).await;
    let body = serde_json::json!({
        "amount": 700, "currency": "usd", "receipt_email": "nobody@example.com"
    });
    assert_eq!(app.post("/charges", &new_key(), &body).await.status(), 201);
    metric_until(&app, "outbox_dead_letters", 1.0).await;
    metric_until(&app, "outbox_waiting", 0.0).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(smtp.refused(), 1, "refused once, never tried again");
    assert_eq!(app.count("outbox").await, 1, "kept for an operator");
}

/// A sent receipt stays in the outbox while `--outbox-retention` lasts,
/// and leaves it once it has passed: an earlier release kept every sent
/// row forever.
#[tokio::test]
async fn sent_receipts_are_pruned_after_the_outbox_retention() {
    let maildev = MailDev::start().await.unwrap();
    let app = TestApp::start(Server::builder().smtp(&maildev).flags([
        "--outbox-retention",
        "3s",
        "--sweep-interval",
        "1s",
    ]))
    .await;
    let body = serde_json::json!({
        "amount": 700, "currency": "usd", "receipt_email": "ada@example.com"
    });
    assert_eq!(app.post("/charges", &new_key(), &body).await.status(), 201);
    maildev
        .wait_for(Duration::from_secs(15), "one receipt", |emails| {
            emails.len() == 1
        })
        .await
        .expect("the receipt is delivered");
    let delivered = Instant::now();
    // Kept while the retention lasts: not deleted as it is sent.
    assert_eq!(
        app.count("outbox").await,
        1,
        "the sent receipt went at once"
    );
    let deadline = delivered + Duration::from_secs(15);
    while app.count("outbox").await > 0 {
        assert!(Instant::now() < deadline, "the sent receipt stayed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Sent before it was seen delivered: a little under the retention.
    assert!(
        delivered.elapsed() >= Duration::from_secs(2),
        "pruned {:?} after delivery, before --outbox-retention (3s)",
        delivered.elapsed()
    );
}
