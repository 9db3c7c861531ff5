//! The checkout's user stories, each in real headless browsers (Chromium,
//! then Firefox: `E2E_BROWSERS`) against a real server process with a
//! fresh database. Every payment story ends by checking that the shopper
//! was charged exactly once: in the page's own list of charges and, over
//! HTTP with the browser's session cookie, on the server (and, through the
//! provider, in the provider's ledger and in MailDev).
//!
//! Run with `scripts/test-e2e.sh` (it builds the wasm client, the server
//! and psp first). Screenshots land in `target/e2e/`.
//!
//! - [`failures`]: the README's story told failure by failure, numbered.
//! - [`shopper`]: what a shopper's browser and hands do to the page:
//!   storage switched off, a key expired on the device, reservations left
//!   unanswered, the keyboard, a long history of charges.
//! - [`provider`]: payments through the payment provider simulator, with
//!   receipts to MailDev.
//!
//! Each story runs once per engine (`e2e::story!`), each time in a fresh
//! scene: a new server, new browsers.

mod failures;
mod provider;
mod shopper;

use anyhow::{ensure, Result};
use e2e::{Page, Receipt, Scene, Server};
use std::time::Duration;

/// How many attempts the page's client makes before it gives up
/// (`maxAttempts` in www/app.js).
pub const PAGE_MAX_ATTEMPTS: usize = 8;

/// The cart every story buys: two tees and a poster.
pub const CART_TOTAL: i64 = 2 * 2500 + 1800;

pub async fn fill_cart(page: &Page) -> Result<()> {
    page.add_to_cart("sku-tee").await?;
    page.add_to_cart("sku-tee").await?;
    page.add_to_cart("sku-poster").await?;
    page.wait_for(
        "the cart total",
        "document.querySelector('#total').textContent === '$68.00'",
    )
    .await
}

/// A new shopper fills the cart, asks for `chaos` on the payment, and
/// clicks Pay.
pub async fn pay_with_chaos(scene: &mut Scene, chaos: &str) -> Result<Page> {
    let page = scene.shopper().await?;
    fill_cart(&page).await?;
    page.choose_chaos(chaos).await?;
    page.pay().await?;
    Ok(page)
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
    let summary = page.text("#charges-summary").await?;
    ensure!(
        summary.contains("1 charge in total; 1 for this cart"),
        "charges summary says {summary:?}"
    );

    let sid = page.sid().await?;
    let held = server.session(&sid).charges().await?;
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

/// Waits until the page's first payment attempt is in flight and the
/// server has committed the charge.
pub async fn wait_until_committed_in_flight(page: &Page, server: &Server) -> Result<()> {
    page.wait_for(
        "the first payment attempt to be in flight",
        "[...document.querySelectorAll('#attempts tbody tr')].some(r => r.dataset.path === '/charges' && r.dataset.status === 'pending')",
    )
    .await?;
    let sid = page.sid().await?;
    e2e::eventually(
        "the server to commit the charge",
        Duration::from_secs(10),
        || async { Ok((server.session(&sid).charges().await?.len() == 1).then_some(())) },
    )
    .await
}
