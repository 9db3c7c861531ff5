//! The steps the stories repeat, each named once: a shopper with the
//! stories' cart (two tees and a poster), paying it (with chaos, or from
//! two tabs), a server that chaos killed, and the checks that close a
//! payment story (exactly one charge, a payment made in one attempt, what
//! the charges summary says).

use crate::page::{ensure_one_key, Page, Receipt};
use crate::scene::Scene;
use anyhow::{ensure, Result};
use serde_json::Value;
use std::time::Duration;
use testkit::Server;

/// How many attempts the page's client makes before it gives up
/// (`MAX_ATTEMPTS` in www/js/state.js).
pub const PAGE_MAX_ATTEMPTS: usize = 8;

/// The cart every story buys: two tees and a poster.
pub const CART_TOTAL: i64 = 2 * 2500 + 1800;

/// Puts the stories' cart in `page`'s cart and waits for its total.
pub async fn fill_cart(page: &Page) -> Result<()> {
    page.add_to_cart("sku-tee").await?;
    page.add_to_cart("sku-tee").await?;
    page.add_to_cart("sku-poster").await?;
    page.wait_for_text("#total", "$68.00").await
}

/// A new shopper (a new browser) with the stories' cart.
pub async fn shopper_with_cart(scene: &mut Scene) -> Result<Page> {
    let page = scene.shopper().await?;
    fill_cart(&page).await?;
    Ok(page)
}

/// A new shopper with the stories' cart in two tabs of one browser: the
/// first, and a second opened after the cart was filled.
pub async fn two_tabs_with_cart(scene: &mut Scene) -> Result<(Page, Page)> {
    let first = shopper_with_cart(scene).await?;
    let second = first.new_window().await?;
    second.open().await?;
    Ok((first, second))
}

/// A new shopper fills the cart, clicks Pay, and waits for the receipt.
pub async fn pay_to_receipt(scene: &mut Scene) -> Result<(Page, Receipt)> {
    let page = shopper_with_cart(scene).await?;
    page.pay().await?;
    let receipt = page.wait_for_receipt().await?;
    Ok((page, receipt))
}

/// A new shopper fills the cart, asks for `chaos` on the payment, and
/// clicks Pay.
pub async fn pay_with_chaos(scene: &mut Scene, chaos: &str) -> Result<Page> {
    let page = shopper_with_cart(scene).await?;
    page.choose_chaos(chaos).await?;
    page.pay().await?;
    Ok(page)
}

/// A new shopper pays with the answer delayed past the client's timeout;
/// returns once the server has committed the charge while the page's first
/// attempt still waits for its answer.
pub async fn pay_and_wait_until_committed_in_flight(scene: &mut Scene) -> Result<Page> {
    let page = pay_with_chaos(scene, "delay-after-commit=5000").await?;
    page.wait_for_payment_in_flight().await?;
    crate::wait::eventually(
        "the server to commit the charge",
        Duration::from_secs(10),
        || async { Ok((held_charges(&scene.server, &page).await?.len() == 1).then_some(())) },
    )
    .await?;
    Ok(page)
}

/// Waits until chaos has killed the server (`exit-…` chaos: exit code 137).
pub fn wait_for_kill(server: &mut Server) -> Result<()> {
    let exit = server.wait_for_exit(Duration::from_secs(30))?;
    ensure!(
        exit.code() == Some(137),
        "the server exited with {exit}, expected code 137"
    );
    Ok(())
}

/// Fails unless the shop has `left` posters in stock.
pub async fn ensure_posters_left(server: &Server, left: i64) -> Result<()> {
    let available = server.available("sku-poster").await?;
    ensure!(
        available == left,
        "the shop has {available} posters left, expected {left}"
    );
    Ok(())
}

/// The charges the server holds for `page`'s shopper (its `sid` cookie),
/// newest first.
pub async fn held_charges(server: &Server, page: &Page) -> Result<Vec<Value>> {
    server.session(&page.sid().await?).charges().await
}

/// Fails unless the page's charges summary says `expected` (for example
/// "1 charge in total; 1 for this cart").
pub async fn ensure_summary(page: &Page, expected: &str) -> Result<()> {
    let summary = page.text("#charges-summary").await?;
    ensure!(
        summary.contains(expected),
        "the charges summary says {summary:?}, expected {expected:?}"
    );
    Ok(())
}

/// Fails unless the payment on `receipt` took one request: one
/// `POST /charges` in the attempt log, with the receipt's key, answered 201
/// and not a replay, and a receipt that says so.
pub async fn ensure_paid_in_one_attempt(page: &Page, receipt: &Receipt) -> Result<()> {
    let attempts = page.charge_attempts().await?;
    ensure!(
        attempts.len() == 1,
        "the payment took {} requests: {attempts:?}",
        attempts.len()
    );
    ensure_one_key(&attempts, &receipt.key)?;
    ensure!(
        attempts[0].status == "201" && !attempts[0].replayed,
        "the one attempt was not a fresh 201: {attempts:?}"
    );
    ensure!(
        !receipt.replayed && receipt.attempts == 1,
        "the receipt does not show one fresh attempt: {receipt:?}"
    );
    Ok(())
}

/// Checks, in the page and on the server, that the shopper has exactly one
/// charge, the one on `receipt`, for this cart and its total.
pub async fn ensure_charged_once(page: &Page, server: &Server, receipt: &Receipt) -> Result<()> {
    let cart = page.cart_id().await?;
    let listed = page.listed_charges().await?;
    ensure!(
        listed.len() == 1,
        "the page lists {} charges, expected exactly one: {listed:?}",
        listed.len()
    );
    ensure!(
        listed[0].id == receipt.charge_id,
        "the page lists {:?}, the receipt shows {}",
        listed[0],
        receipt.charge_id
    );
    ensure!(
        listed[0].description == format!("cart {cart}"),
        "listed charge is not for cart {cart}: {listed:?}"
    );
    ensure_summary(page, "1 charge in total; 1 for this cart").await?;

    let held = held_charges(server, page).await?;
    ensure!(
        held.len() == 1,
        "the server holds {} charges for this shopper, expected one: {held:?}",
        held.len()
    );
    ensure!(
        held[0]["id"] == receipt.charge_id.as_str(),
        "the server holds {}, the receipt shows {}",
        held[0],
        receipt.charge_id
    );
    ensure!(
        held[0]["amount"] == CART_TOTAL,
        "charged {} instead of {CART_TOTAL}",
        held[0]["amount"]
    );
    ensure!(
        held[0]["description"] == format!("cart {cart}").as_str(),
        "charge not for cart {cart}: {}",
        held[0]
    );
    Ok(())
}
