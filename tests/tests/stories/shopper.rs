//! What a shopper's browser and hands do to the page besides paying: site
//! storage switched off, a payment key that ran out on the device while
//! the cart waited, reservations the shop never answered, the keyboard,
//! and a long history of charges.

use anyhow::{ensure, Result};
use e2e::page::SETTLED_RESERVATION;
use e2e::steps::{
    ensure_charged_once, ensure_posters_left, ensure_summary, fill_cart, held_charges,
    pay_and_wait_until_committed_in_flight, pay_to_receipt,
};
use e2e::{Engine, Profile, Scene};
use serde_json::json;
use std::time::Duration;

e2e::stories![
    a_browser_that_blocks_site_storage_still_gets_a_working_shop,
    a_sealed_cart_whose_key_expired_on_the_device_is_found_in_the_charges_not_paid_again,
    several_reservations_left_in_flight_resume_each_into_its_own_outcome,
    an_unconfirmed_reservation_is_tried_again_not_replaced_by_another,
    keyboard_focus_stays_on_plus_and_minus_and_lands_on_the_receipt,
    the_charges_summary_counts_every_charge_not_only_the_listed_page,
];

/// A browser whose shopper switched site storage off still gets a working
/// shop: the page's own reads of `localStorage` and `sessionStorage` are
/// guarded like the client's. The engines differ in what the switch does:
/// Firefox's `dom.storage.enabled` and WebKit's local-storage setting turn
/// Web Storage off and leave cookies on, so the payment goes through (keys
/// in page memory);
/// Chromium's "don't let sites save data" blocks cookies too, so the shop
/// cannot tell who pays and refuses with 401, which the page explains.
async fn a_browser_that_blocks_site_storage_still_gets_a_working_shop(
    scene: &mut Scene,
) -> Result<()> {
    let page = scene.shopper_with(Profile::StorageBlocked).await?;
    fill_cart(&page).await?;
    page.pay().await?;
    match scene.engine() {
        Engine::Firefox | Engine::Webkit => {
            let receipt = page.wait_for_receipt().await?;
            ensure_charged_once(&page, &scene.server, &receipt).await
        }
        Engine::Chromium => {
            page.wait_for_cart("failed").await?;
            let failure = page.text("#failure").await?;
            ensure!(
                failure.contains("cookies"),
                "the refusal does not say why: {failure:?}"
            );
            Ok(())
        }
    }
}

/// A sealed cart whose payment key has run out on the device (the shopper
/// left mid-payment and came back after the key's lifetime) is not paid
/// again with a new key: the page first looks for the cart's charge in
/// `GET /charges`, finds it, and shows its receipt without sending anything.
async fn a_sealed_cart_whose_key_expired_on_the_device_is_found_in_the_charges_not_paid_again(
    scene: &mut Scene,
) -> Result<()> {
    let page = pay_and_wait_until_committed_in_flight(scene).await?;
    let cart = page.cart_id().await?;
    page.leave().await?;
    // A day later: the client's record of the cart's key has expired
    // (its documented schema: created, expires, busy).
    let op = format!("idem:checkout:{cart}");
    let aged: bool = page
                .eval(&format!(
                    "const record = JSON.parse(localStorage.getItem({op:?})); \
                     if (!record) return false; \
                     const day = 86400000; \
                     record.created -= 2 * day; record.expires = Date.now() - day; delete record.busy; \
                     localStorage.setItem({op:?}, JSON.stringify(record)); return true;"
                ))
                .await?;
    ensure!(aged, "the client stored no record under {op}");

    page.open().await?;
    let receipt = page.wait_for_receipt().await?;
    let held = held_charges(&scene.server, &page).await?;
    ensure!(
        held.len() == 1 && held[0]["id"] == receipt.charge_id.as_str(),
        "the page shows {receipt:?}; the server holds {held:?}"
    );
    let sent = page.charge_attempts().await?;
    ensure!(
        sent.len() == 1,
        "the page sent the payment again instead of looking it up: {sent:?}"
    );
    ensure_charged_once(&page, &scene.server, &receipt).await
}

/// Two reservations an earlier visit left unanswered (sent while the shop
/// was down, then the tab was closed) both resume when the page loads, each
/// into its own line: two posters reserved, two outcomes shown.
async fn several_reservations_left_in_flight_resume_each_into_its_own_outcome(
    scene: &mut Scene,
) -> Result<()> {
    let page = scene.shopper().await?;
    scene.server.kill()?;
    // What a page leaves behind when its reservations got no answer:
    // the client keeps each one's key and request to resume.
    let pending: Vec<String> = page
                .eval_async(
                    "const m = await import('/pkg/client_wasm.js'); await m.default(); \
                     const client = new m.IdempotentClient(); \
                     for (const op of ['reserve:earlier-1', 'reserve:earlier-2']) { \
                       await client.post('/reservations', { item_id: 'sku-poster', quantity: 1 }, op, { maxAttempts: 1 }) \
                         .then(o => { throw new Error(`answered ${o.status}`); }, e => { if (e.kind !== 'exhausted') throw e; }); \
                     } \
                     return client.pendingOperations().sort();",
                )
                .await?;
    ensure!(
        pending == ["reserve:earlier-1", "reserve:earlier-2"],
        "pending: {pending:?}"
    );
    scene.server.restart()?;

    page.reload().await?;
    let shown = page.wait_for_reservations(&["reserved"], 2).await?;
    let reserved: Vec<_> = shown.iter().filter(|r| r.result == "reserved").collect();
    ensure!(reserved.len() == 2, "the page shows {shown:?}");
    ensure!(
        reserved[0].text != reserved[1].text,
        "two reservations, one outcome shown twice: {shown:?}"
    );
    ensure_posters_left(&scene.server, 1).await?;
    Ok(())
}

/// A reservation the shop did not confirm says it is kept and sent again,
/// and the page does not contradict that by offering another one: the
/// button sends the same reservation again ("Try again"), which reserves
/// one poster once the shop is back; then it offers another.
async fn an_unconfirmed_reservation_is_tried_again_not_replaced_by_another(
    scene: &mut Scene,
) -> Result<()> {
    let page = scene.shopper().await?;
    page.wait_for_text("#poster-stock", "3").await?;
    scene.server.kill()?;
    page.click("#reserve").await?;
    let shown = page.wait_for_reservations(SETTLED_RESERVATION, 1).await?;
    let button = page.text("#reserve").await?;
    ensure!(
        shown.len() == 1 && shown[0].result != "reserved",
        "with the shop down the page shows {shown:?}"
    );
    ensure!(
        !button.contains("another"),
        "the page says {:?} and offers {button:?}: a new reservation beside the one it \
         keeps sending would reserve two posters",
        shown[0].text
    );

    scene.server.restart()?;
    page.click("#reserve").await?;
    let shown = page.wait_for_reservations(&["reserved"], 1).await?;
    ensure!(
        shown.len() == 1 && shown[0].result == "reserved",
        "after Try again the page shows {shown:?}"
    );
    ensure_posters_left(&scene.server, 2).await?;
    let button = page.text("#reserve").await?;
    ensure!(
        button == "Reserve another poster",
        "the button reads {button:?}"
    );
    Ok(())
}

/// A keyboard user keeps the focus on + and − while changing a quantity,
/// and lands on the receipt after paying.
async fn keyboard_focus_stays_on_plus_and_minus_and_lands_on_the_receipt(
    scene: &mut Scene,
) -> Result<()> {
    let page = scene.shopper().await?;
    page.press_enter_on("button[data-add=\"sku-tee\"]").await?;
    for (button, total) in [("1", "$50.00"), ("1", "$75.00"), ("-1", "$50.00")] {
        let css = format!("#cart-lines li[data-sku=\"sku-tee\"] button[data-step=\"{button}\"]");
        page.press_enter_on(&css).await?;
        page.wait_for_text("#total", total).await?;
        ensure!(
            page.focused(&css).await?,
            "after {css} the focus is on {}",
            page.focus_description().await?
        );
    }
    page.press_enter_on("#pay").await?;
    page.wait_for_receipt().await?;
    // Focus is moved right after the receipt is drawn.
    page.wait_for_within(
        "the focus on the receipt",
        "document.activeElement === document.querySelector('#receipt')",
        Duration::from_secs(2),
    )
    .await
    .map_err(|e| e.context("after paying by keyboard the focus is not on the receipt"))
}

/// "N charges in total" counts every charge of the shopper, not only the
/// page of them the list shows.
async fn the_charges_summary_counts_every_charge_not_only_the_listed_page(
    scene: &mut Scene,
) -> Result<()> {
    let (page, _) = pay_to_receipt(scene).await?;
    // Sixty earlier orders of the same shopper, from elsewhere.
    let shopper = scene.server.session(&page.sid().await?);
    for n in 0..60 {
        let answer = shopper
            .post_keyed(
                "/charges",
                &format!("elsewhere-{n}"),
                &json!({"amount": 100, "currency": "usd", "description": format!("order {n}")}),
            )
            .await?;
        ensure!(answer.status() == 201, "charge {n}: {}", answer.status());
    }
    page.listed_charges().await?;
    ensure_summary(&page, "61 charges in total; 1 for this cart").await
}
