//! CONTRACT sections 3 and 6, where a phased charge meets time and failure
//! after its start: a key sent again after its record expired is a new
//! charge at the provider too (its own downstream key), never a 5xx and
//! never an unasked charge; a record's life counts from its answer, so an
//! operation the completer finishes after a long outage replays to the
//! client's retry; a failure after the start is answered "outcome not known
//! yet", never "nothing was done"; and a provider answer cut off in its body
//! is asked again with the same key, not called broken.

use crate::helpers::{assert_charged, charges_until, pay_until_free, visa, Checkout, Reply};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use testkit::{new_key, Fault, Psp, Server};

/// A key's record expires (`--key-ttl 1s`), and the same key is sent again:
/// the contract lets it run again, and it does, as a new operation at the
/// provider as well: a second charge under a second downstream key, a 201,
/// not the provider's `idempotency_error` for a key it holds with the first
/// run's parameters.
#[tokio::test]
async fn a_key_sent_again_after_its_record_expired_is_a_new_charge_at_the_provider_too() {
    let shop = Checkout::start(&["--key-ttl", "1s"]).await;
    let key = new_key();
    let first = shop.pay(&key, &visa(500)).await;
    let ledger = shop.ledger().await;
    let first = assert_charged(&first, &ledger[0].id);
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let again = shop.pay(&key, &visa(500)).await;
    assert!(!again.replayed, "the record had expired: it ran again");
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 2, "two runs, two charges: {ledger:?}");
    let new_row = ledger
        .iter()
        .find(|row| first["provider_charge"] != row.id.as_str())
        .expect("a second charge in the ledger");
    let second = assert_charged(&again, &new_row.id);
    assert_ne!(second["id"], first["id"]);
    assert_ne!(
        ledger[0].idempotency_key, ledger[1].idempotency_key,
        "each run has its own downstream key"
    );
}

/// The provider fails for longer than the record's life (`--key-ttl 2s`):
/// the request is answered 503 and the completer finishes the operation
/// once the provider is back. Its record lives from that moment, so the
/// client's retry of the key it never got an answer for is a replay of
/// that charge, not a second run.
#[tokio::test]
async fn an_operation_finished_after_an_outage_longer_than_its_ttl_replays_to_the_retry() {
    let shop = Checkout::start(&[
        "--key-ttl",
        "2s",
        "--operation-lease",
        "1s",
        "--complete-interval",
        "200ms",
    ])
    .await;
    shop.fault(Fault::Fail, 1_000).await;
    let key = new_key();
    let lost = shop.pay(&key, &visa(900)).await;
    assert_eq!(lost.status, 503, "{}", String::from_utf8_lossy(&lost.body));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    shop.psp.clear_faults().await.unwrap();
    charges_until(&shop.app, Duration::from_secs(15), |charges| {
        charges.first().is_some_and(|c| c["status"] == "succeeded")
    })
    .await;

    let retry = shop.pay(&key, &visa(900)).await;
    let charge = shop.assert_charged_once(&retry).await;
    assert!(retry.replayed, "the completer's answer, replayed");
    assert_eq!(shop.app.charges().await, vec![charge]);
}

/// The database fails after the start phase committed and while the
/// provider charges the card (the charges table is renamed away during a
/// slow provider call): the answer is a 503 with `Retry-After` that says
/// the outcome is not known yet, never "nothing was done", for the card
/// was charged. Once the database is back, the same key answers with that
/// one charge.
#[tokio::test]
async fn a_database_failure_after_the_start_is_outcome_not_known_yet_never_nothing_was_done() {
    let shop = Checkout::start(&["--complete-interval", "1h"]).await;
    shop.fault(Fault::Delay(Duration::from_millis(1500)), 1)
        .await;
    let key = new_key();
    let (away, back) = (
        "ALTER TABLE charges RENAME TO charges_away",
        "ALTER TABLE charges_away RENAME TO charges",
    );
    let paying = async { Reply::read(shop.app.post("/charges", &key, &visa(4100)).await).await };
    let meddling = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        shop.app.sql(away, away).await;
    };
    let (failed, ()) = tokio::join!(paying, meddling);
    shop.app.sql(back, back).await;

    assert_eq!(
        failed.status,
        503,
        "{}",
        String::from_utf8_lossy(&failed.body)
    );
    assert!(failed.retry_after, "503 without Retry-After");
    let detail = failed.json()["detail"].as_str().unwrap().to_owned();
    assert!(!detail.contains("nothing was done"), "{detail}");
    assert!(detail.contains("not known yet"), "{detail}");
    assert_eq!(shop.ledger().await.len(), 1, "the card was charged");

    let retry = pay_until_free(&shop, &key, &visa(4100)).await;
    shop.assert_charged_once(&retry).await;
}

/// The provider charges and its 201 breaks off in the body (the connection
/// is cut after the headers and one byte): that is no answer, so the server
/// asks again with the same downstream key, the provider repeats its 201,
/// and the request is answered with the one charge.
#[tokio::test]
async fn a_201_cut_off_in_its_body_is_asked_again_with_the_same_key() {
    let psp = Psp::start().unwrap();
    let cutter = cut_first_reply(psp.addr());
    let shop = Checkout {
        app: crate::helpers::TestApp::start(
            Server::builder()
                .chaos()
                .flag("--psp-url")
                .flag(format!("http://{cutter}")),
        )
        .await,
        psp,
    };
    let paid = shop.pay(&new_key(), &visa(1200)).await;
    shop.assert_charged_once(&paid).await;
    assert!(!paid.replayed);
}

/// A relay to `upstream` that cuts the first reply it carries after its
/// header block and one byte of body (closing both connections), and
/// relays everything after it whole; its address.
fn cut_first_reply(upstream: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for (n, client) in listener.incoming().enumerate() {
            let Ok(mut client) = client else { return };
            let Ok(mut server) = TcpStream::connect(upstream) else {
                return;
            };
            let (mut to_server, mut from_server) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || std::io::copy(&mut to_server, &mut server));
            std::thread::spawn(move || {
                if n > 0 {
                    let _ = std::io::copy(&mut from_server, &mut client);
                    return;
                }
                let mut seen = Vec::new();
                let mut buf = [0; 4096];
                while let Ok(read @ 1..) = from_server.read(&mut buf) {
                    seen.extend_from_slice(&buf[..read]);
                    if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        let _ = client.write_all(&seen[..end + 5]);
                        break;
                    }
                }
                let _ = client.shutdown(std::net::Shutdown::Both);
                let _ = from_server.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    addr
}

/// A body that does not even parse, sent under the key of an operation
/// that is still running (its provider call is slow), is another request
/// under that key: 422, as it is once the operation has finished, not the
/// 400 a key of its own would get.
#[tokio::test]
async fn a_body_that_does_not_parse_under_an_unfinished_operations_key_is_422() {
    let shop = Checkout::start(&[]).await;
    shop.fault(Fault::Delay(Duration::from_secs(2)), 1).await;
    let key = new_key();
    // The same key, a body that does not parse: 422, not 400.
    let unparseable = || async {
        let broken = shop
            .app
            .post_raw(
                &shop.app.token,
                "/charges",
                &key,
                r#"{"amount": "lots"}"#,
                &[],
            )
            .await;
        crate::helpers::assert_problem(broken, 422, "idempotency-key-mismatch").await;
    };
    let running = async { shop.pay(&key, &visa(3300)).await };
    let meddling = async {
        charges_until(&shop.app, Duration::from_secs(10), |c| c.len() == 1).await;
        unparseable().await;
    };
    let (paid, ()) = tokio::join!(running, meddling);
    shop.assert_charged_once(&paid).await;
    unparseable().await;
}
