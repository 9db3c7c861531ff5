//! CONTRACT section 6, receipts: a succeeded charge with a `receipt_email`
//! writes its receipt to the outbox in the commit that finishes it, and the
//! relay delivers it to the SMTP server (MailDev here) with the stable
//! `Message-ID: <receipt.CHARGE_ID@exactly-once>`, retrying until accepted.

use crate::helpers::{Checkout, Reply, TestApp};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use testkit::{new_key, Database, Email, MailDev, Proxy, Server};

/// How long a receipt may take to arrive.
const DELIVERY: Duration = Duration::from_secs(20);

/// A charge of `amount` usd with a receipt to `email`.
fn with_receipt(amount: i64, email: &str) -> Value {
    json!({"amount": amount, "currency": "usd", "receipt_email": email})
}

/// The Message-ID the receipt of `charge` carries.
fn message_id(charge: &Value) -> String {
    format!("<receipt.{}@exactly-once>", charge["id"].as_str().unwrap())
}

/// The messages with `message_id`.
fn copies<'a>(emails: &'a [Email], message_id: &str) -> Vec<&'a Email> {
    emails
        .iter()
        .filter(|e| e.message_id == message_id)
        .collect()
}

/// Polls `GET /metrics` until the series `name` (no labels) is `n`, at
/// most 10 s: the relay counts a receipt once the SMTP server's answer is
/// read, a moment after MailDev shows the message.
async fn metric_reaches(app: &TestApp, name: &str, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let value = app.counter(name, &[]).await;
        if value == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} stayed {value}, expected {n}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for the message `message_id` (at most [`DELIVERY`]): every
/// message received by then.
async fn received(maildev: &MailDev, message_id: &str) -> Vec<Email> {
    maildev
        .wait_for(DELIVERY, &format!("the receipt {message_id}"), |e| {
            !copies(e, message_id).is_empty()
        })
        .await
        .unwrap()
}

/// Pays for a marker charge with a receipt, waits for that receipt, then
/// for an empty outbox: whatever the charges before it wrote to the outbox
/// has been relayed by then. Every message received.
async fn relayed_after_a_marker(shop: &Checkout, maildev: &MailDev) -> Vec<Email> {
    let marker = shop
        .pay(&new_key(), &with_receipt(5, "marker@shop.example"))
        .await;
    received(maildev, &message_id(&marker.json())).await;
    metric_reaches(&shop.app, "outbox_waiting", 0.0).await;
    maildev.emails().await.unwrap()
}

/// A succeeded charge with a `receipt_email` sends exactly one receipt to
/// that address, with its stable Message-ID; a replay sends none.
#[tokio::test]
async fn a_succeeded_charge_sends_one_receipt_with_its_message_id_and_a_replay_sends_none() {
    let maildev = MailDev::start().await.unwrap();
    let shop = Checkout::start_with(Server::builder().smtp(&maildev)).await;
    let key = new_key();
    let body = with_receipt(1999, "ada@shop.example");
    let paid = shop.pay(&key, &body).await;
    assert_eq!(paid.status, 201);
    let charge = paid.json();
    assert_eq!(charge["receipt_email"], "ada@shop.example");
    let id = message_id(&charge);

    let emails = received(&maildev, &id).await;
    assert_eq!(emails.len(), 1, "{emails:#?}");
    assert_eq!(emails[0].to, vec!["ada@shop.example"]);
    assert!(
        emails[0].subject.contains("19.99 USD"),
        "{:?}",
        emails[0].subject
    );
    let provider_charge = charge["provider_charge"].as_str().unwrap();
    assert!(
        emails[0].text.contains(provider_charge),
        "{}",
        emails[0].text
    );
    metric_reaches(&shop.app, "receipts_sent_total", 1.0).await;
    metric_reaches(&shop.app, "outbox_waiting", 0.0).await;

    let replay = shop.pay(&key, &body).await;
    assert!(replay.replayed);
    let emails = relayed_after_a_marker(&shop, &maildev).await;
    assert_eq!(copies(&emails, &id).len(), 1, "{emails:#?}");
    assert_eq!(emails.len(), 2, "{emails:#?}");
}

/// A declined charge and a charge without `receipt_email` send no receipt.
#[tokio::test]
async fn a_declined_charge_and_a_charge_without_receipt_email_send_none() {
    let maildev = MailDev::start().await.unwrap();
    let shop = Checkout::start_with(Server::builder().smtp(&maildev)).await;
    let declined = json!({
        "amount": 300, "currency": "usd",
        "payment_method": "pm_card_chargeDeclined", "receipt_email": "bob@shop.example"
    });
    assert_eq!(shop.pay(&new_key(), &declined).await.status, 402);
    let silent = json!({"amount": 300, "currency": "usd"});
    assert_eq!(shop.pay(&new_key(), &silent).await.status, 201);
    let emails = relayed_after_a_marker(&shop, &maildev).await;
    assert_eq!(emails.len(), 1, "only the marker: {emails:#?}");
    assert_eq!(
        shop.app.counter("receipts_sent_total", &[]).await,
        1.0,
        "the marker's"
    );
}

/// Without a provider, with `--smtp-url`, a local charge with a
/// `receipt_email` sends its receipt too.
#[tokio::test]
async fn a_local_charge_with_a_receipt_email_sends_a_receipt() {
    let maildev = MailDev::start().await.unwrap();
    let app = TestApp::start(Server::builder().smtp(&maildev)).await;
    let paid = Reply::read(
        app.post(
            "/charges",
            &new_key(),
            &with_receipt(250, "cy@shop.example"),
        )
        .await,
    )
    .await;
    assert_eq!(paid.status, 201);
    let id = message_id(&paid.json());
    let emails = received(&maildev, &id).await;
    assert_eq!(emails.len(), 1, "{emails:#?}");
    assert_eq!(emails[0].to, vec!["cy@shop.example"]);
}

/// The SMTP server is down when the charge succeeds: the receipt waits in
/// the outbox, and is delivered once the server comes up, once.
#[tokio::test]
async fn a_receipt_waits_for_an_smtp_server_that_is_down_and_is_sent_once() {
    let port = testkit::maildev::free_port().unwrap();
    let shop = Checkout::start_with(
        Server::builder()
            .flag("--smtp-url")
            .flag(format!("smtp://127.0.0.1:{port}")),
    )
    .await;
    let paid = shop
        .pay(&new_key(), &with_receipt(1500, "dee@shop.example"))
        .await;
    assert_eq!(paid.status, 201);
    let id = message_id(&paid.json());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(shop.app.counter("outbox_waiting", &[]).await, 1.0);
    assert_eq!(shop.app.counter("receipts_sent_total", &[]).await, 0.0);

    let maildev = MailDev::start_on(port).await.unwrap();
    let emails = received(&maildev, &id).await;
    assert_eq!(emails[0].to, vec!["dee@shop.example"]);
    metric_reaches(&shop.app, "outbox_waiting", 0.0).await;
    assert_eq!(shop.app.counter("receipts_sent_total", &[]).await, 1.0);
    assert_eq!(maildev.emails().await.unwrap().len(), 1, "sent once");
}

/// Two instances on one database (two processes on one SQLite file, or
/// one PostgreSQL database), each with its relay, and an SMTP server that
/// takes 100 ms over every reply (a proxy before MailDev): a relay's 8 s
/// claim on the receipts runs out before it could send them all, and the
/// other relay claims what is left. A relay whose claim ran out sends no
/// more, and every receipt arrives exactly once. (A 4 s claim leaves a
/// mark one second after its send: on a loaded machine, whose commits
/// waited on a busy disk, marks came later than that, the claims ran out
/// under sent receipts, and the other relay sent 7 of 12 again, as the
/// relay's at-least-once promise allows.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_relays_behind_a_slow_smtp_server_send_each_receipt_once() {
    const RECEIPTS: usize = 48;
    const CLAIM: Duration = Duration::from_secs(8);
    let maildev = MailDev::start().await.unwrap();
    let slow = Proxy::start(maildev.smtp_addr()).unwrap();
    slow.delay_replies(Duration::from_millis(100));
    let database = Database::fresh().await.unwrap();
    let relay = Server::builder()
        .database(database)
        .flag("--smtp-url")
        .flag(format!("smtp://{}", slow.addr()))
        .flag("--receipt-claim")
        .flag(format!("{}s", CLAIM.as_secs()));
    let instances = [
        relay.clone().start().await.unwrap(),
        relay.start().await.unwrap(),
    ];
    let caller = instances[0].caller();
    let mut ids = Vec::new();
    for i in 0..RECEIPTS {
        let email = format!("shopper{i}@shop.example");
        let paid = caller.charge(&with_receipt(100, &email)).await.unwrap();
        assert_eq!(paid.status(), 201);
        ids.push(message_id(&paid.json().await.unwrap()));
    }

    maildev
        .wait_for(Duration::from_secs(40), "every receipt", |emails| {
            ids.iter().all(|id| !copies(emails, id).is_empty())
        })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while instances[0]
        .metrics()
        .await
        .unwrap()
        .counter("outbox_waiting", &[])
        .unwrap()
        != 0.0
    {
        assert!(Instant::now() < deadline, "receipts left unmarked");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Whatever a relay still held is sent by the time its claim ends.
    tokio::time::sleep(CLAIM).await;
    let emails = maildev.emails().await.unwrap();
    let twice: Vec<_> = ids
        .iter()
        .map(|id| (id, copies(&emails, id).len()))
        .filter(|(_, n)| *n != 1)
        .collect();
    assert!(
        twice.is_empty(),
        "receipts not sent exactly once: {twice:?}"
    );
    assert_eq!(emails.len(), RECEIPTS);
    let mut sent = 0.0;
    for instance in &instances {
        sent += instance
            .metrics()
            .await
            .unwrap()
            .counter("receipts_sent_total", &[])
            .unwrap();
    }
    assert_eq!(sent, RECEIPTS as f64, "acceptances counted");
}

/// An SMTP server that takes the connection and never answers: the relay
/// gives the send up within its claim (`--receipt-claim 4s`), and sends
/// the receipt once over a new connection when the server answers again.
/// (A 2 s claim leaves half a second for a send's mark: on a loaded Citus
/// cluster the mark came later, the claim ran out, and the receipt was
/// sent twice, as the relay's at-least-once promise allows.)
#[tokio::test]
async fn a_receipt_to_an_smtp_server_that_never_answers_is_sent_once_it_does() {
    let maildev = MailDev::start().await.unwrap();
    let silent = Proxy::start(maildev.smtp_addr()).unwrap();
    silent.blackhole(true);
    let app = TestApp::start(
        Server::builder()
            .flag("--smtp-url")
            .flag(format!("smtp://{}", silent.addr()))
            .flags(["--receipt-claim", "4s"]),
    )
    .await;
    let paid = Reply::read(
        app.post(
            "/charges",
            &new_key(),
            &with_receipt(700, "eve@shop.example"),
        )
        .await,
    )
    .await;
    assert_eq!(paid.status, 201);
    let id = message_id(&paid.json());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(app.counter("outbox_waiting", &[]).await, 1.0);
    assert!(maildev.emails().await.unwrap().is_empty());

    silent.blackhole(false);
    let emails = received(&maildev, &id).await;
    assert_eq!(emails[0].to, vec!["eve@shop.example"]);
    metric_reaches(&app, "outbox_waiting", 0.0).await;
    assert_eq!(maildev.emails().await.unwrap().len(), 1, "sent once");
}

/// A receipt whose send failed while the server's wall clock ran a day
/// ahead (the SMTP server never answered) is tried again soon after the
/// clock is set right, not a day later: the outbox's schedule and claims
/// are on the database's clock, like leases (SQLite's own; on PostgreSQL,
/// `now()`).
#[tokio::test]
async fn a_receipt_that_failed_while_the_clock_was_a_day_ahead_is_sent_once_it_is_set_right() {
    let clock = testkit::SteppedClock::new().unwrap();
    clock.set_wall(25 * 3_600_000).unwrap();
    let maildev = MailDev::start().await.unwrap();
    let silent = Proxy::start(maildev.smtp_addr()).unwrap();
    silent.blackhole(true);
    let mut builder = Server::builder()
        .flag("--smtp-url")
        .flag(format!("smtp://{}", silent.addr()))
        .flags(["--receipt-claim", "2s"]);
    for (name, value) in clock.env().unwrap() {
        builder = builder.env(name, value);
    }
    let app = TestApp::start(builder).await;
    let paid = Reply::read(
        app.post(
            "/charges",
            &new_key(),
            &with_receipt(800, "fay@shop.example"),
        )
        .await,
    )
    .await;
    assert_eq!(paid.status, 201);
    let id = message_id(&paid.json());
    // The first send is given up (a quarter of the claim) and marked failed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(maildev.emails().await.unwrap().is_empty());

    clock.set_wall(0).unwrap();
    silent.blackhole(false);
    silent.cut();
    let emails = received(&maildev, &id).await;
    assert_eq!(emails[0].to, vec!["fay@shop.example"]);
    assert_eq!(copies(&emails, &id).len(), 1, "sent once");
}
