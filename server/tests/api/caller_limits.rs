//! Per-caller limits on what is kept: `--caller-unfinished`, how many
//! operations one caller may have started and not finished (so one token
//! cannot fill the database with records that never expire), and
//! `--caller-receipts`, how many receipts one caller may be sent an hour.

use crate::helpers::{assert_refused, new_key, new_token, visa, Checkout, Reply, TestApp};
use serde_json::json;
use std::time::Duration;
use testkit::{Fault, MailDev, Server};

/// A caller whose operations wait for a provider that is down may start
/// `--caller-unfinished` of them; a new key past it is refused 429
/// `rate-limited` with `Retry-After`, runs nothing and stores nothing,
/// while the retries of its unfinished ones resume, and another caller is
/// not touched. Once one finishes, the refused key runs.
#[tokio::test]
async fn past_its_unfinished_operations_a_callers_new_key_is_refused_and_stores_nothing() {
    let shop = Checkout::start(&["--caller-unfinished", "3"]).await;
    shop.fault(Fault::Down, 1_000).await;
    let keys: Vec<String> = (0..3).map(|_| new_key()).collect();
    for key in &keys {
        assert_refused(
            &shop.pay(key, &visa(100)).await,
            503,
            "provider-unavailable",
        );
    }

    let refused_key = new_key();
    let refused = shop.pay(&refused_key, &visa(200)).await;
    assert_refused(&refused, 429, "rate-limited");
    assert!(refused.retry_after, "a 429 says when to retry");
    assert_eq!(
        shop.app.charges().await.len(),
        3,
        "the refused key stored nothing"
    );
    assert_eq!(shop.app.records().await, 3);

    let other = shop
        .app
        .post_as(&new_token(), "/charges", &new_key(), &visa(300))
        .await;
    assert_refused(&Reply::read(other).await, 503, "provider-unavailable");

    shop.psp.clear_faults().await.unwrap();
    let resumed = shop.pay(&keys[0], &visa(100)).await;
    assert_eq!(
        resumed.status, 201,
        "a retry of an unfinished key resumes it"
    );
    let ran = shop.pay(&refused_key, &visa(200)).await;
    assert_eq!(ran.status, 201, "{}", String::from_utf8_lossy(&ran.body));
    assert!(!ran.replayed);
}

/// The cap holds for a caller whose new keys arrive at once at two
/// instances on one database: exactly `--caller-unfinished` start, every
/// other one is refused.
#[tokio::test]
async fn the_unfinished_cap_holds_across_instances_on_one_database() {
    let shop = Checkout::start(&["--caller-unfinished", "4"]).await;
    let second = TestApp::start(
        Server::builder()
            .database(shop.app.server.database().clone())
            .chaos()
            .psp(&shop.psp)
            .flags(["--caller-unfinished", "4"]),
    )
    .await;
    shop.fault(Fault::Down, 1_000).await;
    let token = new_token();
    let mut sends = tokio::task::JoinSet::new();
    for i in 0..16 {
        let app = if i % 2 == 0 { &shop.app } else { &second };
        let caller = app.server.bearer(&token);
        sends.spawn(async move {
            let sent = caller.charge(&visa(100)).await;
            Reply::read(sent.expect("an answer")).await
        });
    }
    let replies = sends.join_all().await;
    let started = replies.iter().filter(|r| r.status == 503).count();
    let refused = replies.iter().filter(|r| r.status == 429).count();
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!((started, refused), (4, 12), "{statuses:?}");
    assert_eq!(shop.app.charges_of(&token).await.len(), 4);
}

/// A caller is sent at most `--caller-receipts` receipts an hour: past
/// it the charge succeeds as usual but its receipt is withheld (logged,
/// counted); another caller's receipt still goes.
#[tokio::test]
async fn past_its_hourly_receipts_a_caller_is_charged_and_sent_no_receipt() {
    let maildev = MailDev::start().await.unwrap();
    let app = TestApp::start(
        Server::builder()
            .smtp(&maildev)
            .flags(["--caller-receipts", "2"]),
    )
    .await;
    let with_receipt = |n: i64| json!({"amount": 100 + n, "currency": "usd", "receipt_email": format!("to{n}@shop.example")});
    for n in 0..3 {
        let paid = app.post("/charges", &new_key(), &with_receipt(n)).await;
        assert_eq!(paid.status(), 201, "the charge itself succeeds");
    }
    let other = app
        .post_as(&new_token(), "/charges", &new_key(), &with_receipt(9))
        .await;
    assert_eq!(other.status(), 201);

    maildev
        .wait_for(Duration::from_secs(20), "three receipts", |e| e.len() >= 3)
        .await
        .unwrap();
    // The withheld one never comes: the outbox is empty and nothing more
    // arrives.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(app.counter("outbox_waiting", &[]).await, 0.0);
    let emails = maildev.emails().await.unwrap();
    let mut to: Vec<String> = emails.iter().flat_map(|e| e.to.clone()).collect();
    to.sort();
    assert_eq!(
        to,
        ["to0@shop.example", "to1@shop.example", "to9@shop.example"]
    );
    assert_eq!(app.counter("receipts_withheld_total", &[]).await, 1.0);
    assert!(app.server.log_text().contains("receipt withheld"));
}
