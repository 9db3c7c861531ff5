//! The README's story, the failures where two payments meet (numbered as
//! in `failures.rs`): two tabs paying the same cart, a second tab joining
//! the payment the moment the cart is sealed, a double click, and three
//! buyers for the last poster. Each checks that the cart was charged (or
//! the poster reserved) exactly once.

use anyhow::{ensure, Result};
use e2e::page::ensure_one_key;
use e2e::steps::{
    ensure_charged_once, ensure_paid_in_one_attempt, ensure_posters_left, shopper_with_cart,
    two_tabs_with_cart,
};
use e2e::Scene;
use serde_json::json;
use std::time::Duration;

e2e::stories![
    two_tabs_paying_the_same_cart_at_once_make_one_charge,
    a_second_tab_paying_the_moment_the_cart_is_sealed_joins_the_same_payment,
    a_double_click_on_pay_sends_one_request_and_makes_one_charge,
    three_buyers_for_the_last_poster_get_one_reservation_and_two_sold_out_messages,
];

/// 6. Two tabs of one browser pay the same cart at once (the second click
///    lands while the first payment is still in flight): one key, one charge,
///    the same receipt in both.
async fn two_tabs_paying_the_same_cart_at_once_make_one_charge(scene: &mut Scene) -> Result<()> {
    let (first, second) = two_tabs_with_cart(scene).await?;
    let cart = first.cart_id().await?;
    ensure!(
        second.cart_id().await? == cart,
        "the second tab shows another cart"
    );

    // The first tab's answer is slow, so the second click overlaps it.
    first.choose_chaos("delay-after-commit=5000").await?;
    first.pay().await?;
    first.wait_for_payment_in_flight().await?;
    second.pay().await?;
    ensure!(
        second.cart_state().await? == "paying",
        "the second tab is not paying"
    );
    ensure!(
        first.cart_state().await? == "paying",
        "the first tab finished before the second clicked: not at once"
    );

    // Each tab's own final attempt: a replayed 201 with the cart's key.
    let own_answer = "[...document.querySelectorAll('#attempts tbody tr')].some(r => r.dataset.status === '201') \
                              && document.querySelector('#cart').dataset.state === 'paid'";
    second
        .wait_for("the second tab's own answer", own_answer)
        .await?;
    first
        .wait_for("the first tab's own answer", own_answer)
        .await?;
    let receipt = first.receipt().await?;
    let other = second.receipt().await?;
    ensure!(
        receipt.charge_id == other.charge_id,
        "two receipts: {receipt:?} and {other:?}"
    );
    ensure!(
        receipt.key == other.key,
        "two keys: {receipt:?} and {other:?}"
    );

    // The key each tab sent, as each tab's own fetch log recorded it:
    // one key, the cart's, in both.
    let first_log = first.charge_attempts().await?;
    let second_log = second.charge_attempts().await?;
    ensure_one_key(&first_log, &receipt.key)?;
    ensure_one_key(&second_log, &receipt.key)?;
    ensure!(
        second_log.iter().all(|a| a.status != "201" || a.replayed),
        "the second tab's payment ran instead of replaying: {second_log:?}"
    );
    // The Web Lock: the server's deduplication alone would also make one
    // charge, but with the lock the second tab sends nothing while the
    // first tab's payment is in flight; it waits, then gets the replay.
    let first_done = first_log
        .iter()
        .map(|a| a.end)
        .collect::<Option<Vec<f64>>>()
        .and_then(|ends| ends.into_iter().reduce(f64::max))
        .ok_or_else(|| anyhow::anyhow!("the first tab has an attempt in flight: {first_log:?}"))?;
    let second_sent = second_log
        .iter()
        .map(|a| a.start)
        .fold(f64::INFINITY, f64::min);
    ensure!(
                second_sent >= first_done,
                "the second tab sent its payment {} ms before the first tab's ended: \
                 both tabs had the key in flight at once (no lock)\nfirst: {first_log:?}\nsecond: {second_log:?}",
                first_done - second_sent
            );
    ensure!(
        second_log.len() == 1,
        "the second tab needed {} attempts for a replay: {second_log:?}",
        second_log.len()
    );
    ensure_charged_once(&first, &scene.server, &receipt).await?;
    ensure_charged_once(&second, &scene.server, &receipt).await
}

/// 6b. The second tab's Pay lands the moment the first tab seals the cart,
/// before the first tab's client has stored its request (it settles a new
/// key for 100 ms and takes the operation's lock first): the second tab
/// joins that payment with the same key instead of taking the sealed cart
/// for one whose key expired; one charge.
async fn a_second_tab_paying_the_moment_the_cart_is_sealed_joins_the_same_payment(
    scene: &mut Scene,
) -> Result<()> {
    let (first, second) = two_tabs_with_cart(scene).await?;
    // The second tab clicks Pay as soon as it hears that the cart was
    // sealed (after the page's own storage listener has read it).
    let armed: bool = second
        .eval(
            "window.addEventListener('storage', e => { \
                   if (e.key === 'shop:cart' && JSON.parse(e.newValue || '{}').sealed) \
                     document.querySelector('#pay').click(); \
                 }); return true;",
        )
        .await?;
    ensure!(armed, "could not arm the second tab");
    first.pay().await?;

    let receipt = first.wait_for_receipt().await?;
    let other = second.wait_for_receipt().await?;
    ensure!(
        receipt.charge_id == other.charge_id && receipt.key == other.key,
        "two receipts: {receipt:?} and {other:?}"
    );
    let sent = second.charge_attempts().await?;
    ensure!(!sent.is_empty(), "the second tab's Pay sent nothing");
    ensure_one_key(&sent, &receipt.key)?;
    ensure_charged_once(&first, &scene.server, &receipt).await?;
    ensure_charged_once(&second, &scene.server, &receipt).await
}

/// 7. A double click on Pay sends one request, not two: the button is off
///    while the payment is in flight; one charge.
async fn a_double_click_on_pay_sends_one_request_and_makes_one_charge(
    scene: &mut Scene,
) -> Result<()> {
    let page = shopper_with_cart(scene).await?;
    page.double_click("#pay").await?;
    let receipt = page.wait_for_receipt().await?;
    // Let a second click's request, if one was queued, show up.
    tokio::time::sleep(Duration::from_millis(500)).await;
    ensure_paid_in_one_attempt(&page, &receipt).await?;
    ensure_charged_once(&page, &scene.server, &receipt).await
}

/// 8. Three buyers in three browsers (three sessions) want the last poster:
///    one gets it, two see a clear "sold out", and the stock ends at zero.
async fn three_buyers_for_the_last_poster_get_one_reservation_and_two_sold_out_messages(
    scene: &mut Scene,
) -> Result<()> {
    // Another customer takes two of the three posters first.
    let early = scene
        .server
        .bearer("e2e-early-bird-session-token")
        .post_keyed(
            "/reservations",
            "early-bird-1",
            &json!({"item_id": "sku-poster", "quantity": 2}),
        )
        .await?;
    let status = early.status();
    ensure!(
        status == 201,
        "the early reservation answered {status}: {}",
        early.text().await?
    );
    ensure_posters_left(&scene.server, 1).await?;

    let mut buyers = Vec::new();
    for _ in 0..3 {
        let page = scene.shopper().await?;
        page.wait_for_text("#poster-stock", "1").await?;
        buyers.push(page);
    }
    for page in &buyers {
        page.click("#reserve").await?;
    }
    let mut results = Vec::new();
    for page in &buyers {
        let shown = page
            .wait_for_reservations(&["reserved", "sold-out"], 1)
            .await?;
        ensure!(shown.len() == 1, "a buyer sees {shown:?}");
        let sent = page.attempts().await?;
        ensure!(
            sent.len() == 1 && sent[0].path == "/reservations",
            "a buyer sent {sent:?}"
        );
        results.push((shown[0].result.clone(), shown[0].text.clone()));
    }
    let reserved = results
        .iter()
        .filter(|(kind, _)| kind == "reserved")
        .count();
    let sold_out: Vec<_> = results
        .iter()
        .filter(|(kind, _)| kind == "sold-out")
        .collect();
    ensure!(
        reserved == 1 && sold_out.len() == 2,
        "outcomes: {results:?}"
    );
    for (_, text) in sold_out {
        ensure!(
            text.starts_with("Sold out"),
            "a sold-out buyer reads {text:?}"
        );
    }
    ensure_posters_left(&scene.server, 0).await?;
    for page in &buyers {
        page.wait_for_text("#poster-stock", "0").await?;
    }
    Ok(())
}
