//! What the page leaves in the browser's storage for the next person at
//! it: after a receipt, no receipt address in the page's own entries; after
//! a sign-out, nothing of the shopper (no key, no stored request, no cart,
//! no token); Shopper B's bearer token never in localStorage. Each check
//! reads `localStorage` and `sessionStorage` whole, as a developer with
//! devtools (or a script of the page's origin) would.

use anyhow::{ensure, Result};
use e2e::steps::fill_cart;
use e2e::{Page, Scene, Setup};

e2e::stories![
    Setup::provider() =>
    the_receipt_address_is_forgotten_once_the_receipt_is_shown,
    signing_out_forgets_the_shoppers_keys_requests_cart_and_token,
];

/// An address the page never prefills, so that finding it means the
/// shopper's own input was kept.
const ADDRESS: &str = "grace.hopper@example.org";

/// The client's entries (`storagePrefix`, the page's default).
const CLIENT_PREFIX: &str = "idem:";

/// Every entry of `area` (`localStorage` or `sessionStorage`), name and value.
pub(crate) async fn storage(page: &Page, area: &str) -> Result<Vec<(String, String)>> {
    page.eval(&format!(
        "const s = window.{area}; \
         return Array.from({{ length: s.length }}, (_, i) => s.key(i)).map(k => [k, s.getItem(k)]);"
    ))
    .await
}

/// The page's own entries (not the client's records) of both storages
/// that contain `text`.
async fn page_entries_holding(page: &Page, text: &str) -> Result<Vec<(String, String)>> {
    let mut found = Vec::new();
    for area in ["localStorage", "sessionStorage"] {
        found.extend(
            storage(page, area)
                .await?
                .into_iter()
                .filter(|(name, value)| !name.starts_with(CLIENT_PREFIX) && value.contains(text)),
        );
    }
    Ok(found)
}

/// Types `address` into the receipt e-mail field, as the shopper would.
/// A new shopper's page with a cart filled, paying with [`ADDRESS`] for
/// its receipt.
async fn paying_with_an_address(scene: &mut Scene) -> Result<Page> {
    let page = scene.shopper().await?;
    fill_cart(&page).await?;
    give_address(&page, ADDRESS).await?;
    page.pay().await?;
    Ok(page)
}

async fn give_address(page: &Page, address: &str) -> Result<()> {
    let address = serde_json::to_string(address)?;
    page.eval::<bool>(&format!(
        "const e = document.querySelector('#receipt-email'); e.focus(); e.value = {address}; \
         e.dispatchEvent(new Event('input', {{ bubbles: true }})); e.blur(); return true;"
    ))
    .await?;
    Ok(())
}

/// The shopper pays with an address of their own; the receipt shows where
/// it went, and from then on none of the page's entries holds the address
/// (the cart and its receipt are stored without it), not even after New
/// order, whose cart starts with the prefilled address again.
async fn the_receipt_address_is_forgotten_once_the_receipt_is_shown(
    scene: &mut Scene,
) -> Result<()> {
    let page = paying_with_an_address(scene).await?;
    let receipt = page.wait_for_receipt().await?;
    ensure!(
        receipt.mail != "none",
        "the receipt shows no e-mail: {receipt:?}"
    );
    let shown = page.text("#receipt-mail").await?;
    ensure!(
        shown.contains(ADDRESS),
        "the receipt's e-mail line reads {shown:?}"
    );
    let kept = page_entries_holding(&page, ADDRESS).await?;
    ensure!(
        kept.is_empty(),
        "after the receipt the page still stores the address: {kept:?}"
    );

    page.reload().await?;
    page.wait_for_receipt().await?;
    let shown = page.text("#receipt-mail").await?;
    ensure!(
        !shown.contains(ADDRESS) && (shown.starts_with("queued") || shown.starts_with("delivered")),
        "after a reload the receipt's e-mail line reads {shown:?}"
    );
    page.click("#new-order").await?;
    page.wait_for_cart("open").await?;
    let prefilled: String = page
        .eval("return document.querySelector('#receipt-email').value;")
        .await?;
    ensure!(
        prefilled != ADDRESS,
        "the new order carried the forgotten address over"
    );
    let kept = page_entries_holding(&page, ADDRESS).await?;
    ensure!(kept.is_empty(), "after New order the page stores {kept:?}");
    Ok(())
}

/// Shopper A pays and reserves a poster, then signs out: the client's
/// records of A (keys and stored requests) are gone, and so are A's cart
/// and reservations. Shopper B, signed in on the tab, pays with a bearer
/// token that is kept in sessionStorage only (never localStorage), and
/// keeps it across a reload; B's sign-out forgets B's records and the
/// token.
async fn signing_out_forgets_the_shoppers_keys_requests_cart_and_token(
    scene: &mut Scene,
) -> Result<()> {
    let page = paying_with_an_address(scene).await?;
    page.wait_for_receipt().await?;
    let cart_a = page.cart_id().await?;
    page.click("#reserve").await?;
    page.wait_for_words("#reservations", "Reserved").await?;
    let records: Vec<String> = storage(&page, "localStorage")
        .await?
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name.starts_with(CLIENT_PREFIX))
        .collect();
    ensure!(
        !records.is_empty(),
        "the client stored no record of A's payment: nothing to forget"
    );

    page.click("#sign-out").await?;
    page.wait_for_words("#status", "signed out").await?;
    let left = storage(&page, "localStorage").await?;
    let of_a: Vec<_> = left
        .iter()
        .filter(|(name, value)| {
            name.starts_with(CLIENT_PREFIX)
                || value.contains(&cart_a)
                || value.contains(ADDRESS)
                || name.starts_with("shop:reservations")
        })
        .collect();
    ensure!(
        of_a.is_empty(),
        "after A signed out, localStorage still holds {of_a:?}"
    );
    ensure!(
        page.cart_id().await? != cart_a,
        "after the sign-out the page shows A's cart {cart_a}"
    );

    page.click("#switch-shopper").await?;
    page.wait_for_text("#shopper-name", "Shopper B").await?;
    fill_cart(&page).await?;
    page.pay().await?;
    page.wait_for_receipt().await?;
    let token = b_token(&page).await?;
    token_not_in_local_storage(&page, &token).await?;
    let charges = scene.server.bearer(&token).charges().await?;
    ensure!(charges.len() == 1, "Shopper B holds {charges:?}");
    page.reload().await?;
    page.wait_for_text("#shopper-name", "Shopper B").await?;
    ensure!(
        b_token(&page).await? == token,
        "a reload gave Shopper B another token"
    );

    page.click("#sign-out").await?;
    page.wait_for_text("#shopper-name", "Shopper A").await?;
    for area in ["localStorage", "sessionStorage"] {
        let left: Vec<_> = storage(&page, area)
            .await?
            .into_iter()
            .filter(|(name, value)| {
                name.starts_with(CLIENT_PREFIX) || value.contains(&token) || name.ends_with(":b")
            })
            .collect();
        ensure!(
            left.is_empty(),
            "after B signed out, {area} still holds {left:?}"
        );
    }
    Ok(())
}

/// No entry of the page's localStorage holds Shopper B's bearer `token`
/// (it belongs in sessionStorage only).
pub(crate) async fn token_not_in_local_storage(page: &Page, token: &str) -> Result<()> {
    let in_local: Vec<_> = storage(page, "localStorage")
        .await?
        .into_iter()
        .filter(|(_, value)| value.contains(token))
        .collect();
    ensure!(
        in_local.is_empty(),
        "Shopper B's token is in localStorage: {in_local:?}"
    );
    Ok(())
}

/// Shopper B's bearer token, from this tab's sessionStorage.
pub(crate) async fn b_token(page: &Page) -> Result<String> {
    page.eval("return JSON.parse(sessionStorage.getItem('shop:shopper-b')).token;")
        .await
}
