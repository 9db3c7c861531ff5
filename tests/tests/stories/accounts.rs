//! The page among real checkouts: two shoppers on one browser,
//! the strict Content-Security-Policy it is served with, and what axe-core
//! finds on it.

use super::privacy::{b_token, storage, token_not_in_local_storage};
use anyhow::{ensure, Context, Result};
use e2e::paths;
use e2e::steps::{fill_cart, pay_with_chaos, wait_for_kill};
use e2e::Scene;
use serde::Deserialize;
use serde_json::Value;

e2e::stories![
    a_second_shopper_on_the_same_browser_is_never_charged_for_the_first_shoppers_cart,
    the_page_is_served_under_a_strict_content_security_policy,
    axe_finds_no_accessibility_violation_after_one_add_to_cart,
];

/// The descriptions of a list of charges.
fn descriptions(charges: &[Value]) -> Vec<&str> {
    charges
        .iter()
        .map(|c| c["description"].as_str().unwrap_or(""))
        .collect()
}

/// Shopper A's payment is left unanswered (the server dies right after
/// committing it), and A switches to Shopper B on the same browser: the
/// first press says that A has a request the shop has not confirmed, the
/// second signs A out, and the client forgets A's key and stored request
/// (no record of A's payment is left in storage). B's visits (a reload runs
/// the page's start-up resume loop) never send A's cart: B is charged for
/// B's own cart only, once, with a token that is never in localStorage.
/// Back as A, the sealed cart's key is gone, so the page looks its charge
/// up in A's charges and shows its receipt: still one charge.
async fn a_second_shopper_on_the_same_browser_is_never_charged_for_the_first_shoppers_cart(
    scene: &mut Scene,
) -> Result<()> {
    let page = pay_with_chaos(scene, "exit-after-commit").await?;
    let cart_a = page.cart_id().await?;
    wait_for_kill(&mut scene.server)?;
    page.wait_for_cart("pending").await?;
    let sid = page.sid().await?;
    let record_of_a = |entries: &[(String, String)]| {
        entries
            .iter()
            .any(|(name, value)| name.starts_with("idem:") && value.contains(&cart_a))
    };
    ensure!(
        record_of_a(&storage(&page, "localStorage").await?),
        "the client keeps no record of A's unanswered payment"
    );

    page.click("#switch-shopper").await?;
    page.wait_for_words("#resume-notice", "not confirmed")
        .await?;
    ensure!(
        page.text("#shopper-name").await? == "Shopper A",
        "the first press switched without saying what A leaves unconfirmed"
    );
    page.click("#switch-shopper").await?;
    page.wait_for_text("#shopper-name", "Shopper B").await?;
    let local = storage(&page, "localStorage").await?;
    ensure!(
        !record_of_a(&local),
        "after the switch the client still keeps A's payment: {local:?}"
    );
    scene.server.restart()?;
    page.reload().await?;
    page.wait_for_text("#shopper-name", "Shopper B").await?;
    let cart_b = page.cart_id().await?;
    ensure!(cart_b != cart_a, "Shopper B sees Shopper A's cart {cart_a}");
    fill_cart(&page).await?;
    page.pay().await?;
    let receipt_b = page.wait_for_receipt().await?;
    ensure!(
        !receipt_b.replayed,
        "B's payment was a replay: {receipt_b:?}"
    );

    let token = b_token(&page).await?;
    token_not_in_local_storage(&page, &token).await?;
    let charges_b = scene.server.bearer(&token).charges().await?;
    ensure!(
        descriptions(&charges_b) == [format!("cart {cart_b}")],
        "Shopper B holds {:?}, expected only B's cart {cart_b}",
        descriptions(&charges_b)
    );
    let charges_a = scene.server.session(&sid).charges().await?;
    ensure!(
        descriptions(&charges_a) == [format!("cart {cart_a}")],
        "Shopper A holds {:?}, expected A's cart {cart_a} once",
        descriptions(&charges_a)
    );

    page.click("#switch-shopper").await?;
    page.wait_for_text("#shopper-name", "Shopper A").await?;
    let receipt_a = page.wait_for_receipt().await?;
    let recovered: bool = page
        .eval("return !document.querySelector('#receipt-recovered').hidden;")
        .await?;
    ensure!(
        recovered && page.cart_id().await? == cart_a,
        "back as A, the page shows {receipt_a:?} (found in the charges: {recovered}) for cart {}",
        page.cart_id().await?
    );
    let charges_a = scene.server.session(&sid).charges().await?;
    ensure!(
        charges_a.len() == 1,
        "Shopper A holds {} charges after the return",
        charges_a.len()
    );
    Ok(())
}

/// The page and its files come with `Content-Security-Policy: script-src
/// 'self' 'wasm-unsafe-eval'`, and under it the page starts (its wasm
/// client instantiated: no inline script, nothing evaluated) and pays.
async fn the_page_is_served_under_a_strict_content_security_policy(
    scene: &mut Scene,
) -> Result<()> {
    let page = scene.shopper().await?;
    let origin: String = page.eval("return location.origin;").await?;
    for path in ["/", "/app.js", "/pkg/client_wasm.js"] {
        let answer = reqwest::get(format!("{origin}{path}")).await?;
        let policy = answer
            .headers()
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        ensure!(
            policy == "script-src 'self' 'wasm-unsafe-eval'",
            "{path} is served with Content-Security-Policy {policy:?}"
        );
    }
    fill_cart(&page).await?;
    page.pay().await?;
    page.wait_for_receipt().await?;
    Ok(())
}

/// One violation as axe-core reports it.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // read by the failure message
struct Violation {
    id: String,
    impact: Option<String>,
    help: String,
    nodes: Vec<String>,
}

/// axe-core 4 (`.tools/node_modules/axe-core`, installed by
/// scripts/test-e2e.sh), run in the browser on the page after one "Add to
/// cart", finds no violation of its rules.
async fn axe_finds_no_accessibility_violation_after_one_add_to_cart(
    scene: &mut Scene,
) -> Result<()> {
    let page = scene.shopper().await?;
    page.add_to_cart("sku-tee").await?;
    page.wait_for_text("#total", "$25.00").await?;
    let source = paths::workspace().join(".tools/node_modules/axe-core/axe.min.js");
    let axe = std::fs::read_to_string(&source).with_context(|| {
        format!(
            "reading {} (scripts/test-e2e.sh installs it)",
            source.display()
        )
    })?;
    // axe reads colours as they are drawn: the Pay button fades in from
    // its disabled opacity over 0.15 s, which WebKit was still drawing
    // here (a contrast violation); it runs once the page is still.
    let violations: Vec<Violation> = page
        .eval_async(&format!(
            "{axe}\n;const engine = window.axe; \
             await Promise.all(document.getAnimations().map(a => a.finished)); \
             const result = await engine.run(document, {{ resultTypes: ['violations'] }}); \
             return result.violations.map(v => ({{ id: v.id, impact: v.impact, help: v.help, \
               nodes: v.nodes.map(n => n.target.join(' ')) }}));"
        ))
        .await?;
    ensure!(
        violations.is_empty(),
        "axe-core finds {} violations: {violations:#?}",
        violations.len()
    );
    Ok(())
}
