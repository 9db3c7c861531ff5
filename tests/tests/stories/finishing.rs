//! The demo's hardest story, walked again and again as a shopper of
//! `scripts/demo.sh` meets it (its 5 s operation lease and 2 s completer
//! interval): the server is killed after the provider charged the card,
//! restarted on the same database, and the page must end on the receipt by
//! itself every time, whichever finishes the operation first, the new
//! process's completer or the page's own retry once the lease ran out.

use anyhow::{bail, ensure, Result};
use e2e::steps::{fill_cart, wait_for_kill, CART_TOTAL};
use e2e::{eventually, Page, Receipt, Scene, Setup};
use std::cell::Cell;
use std::time::{Duration, Instant};

e2e::stories![
    Setup::provider_with_the_demos_lease() =>
    a_server_killed_after_the_provider_charged_ends_on_the_receipt_every_time,
];

/// How long the server stays down in each walk: at once (as scripts/demo.sh
/// restarts it), then later, so that the page's retries and the completer's
/// passes fall in different orders.
const DOWN_FOR: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_millis(1000),
    Duration::from_millis(2000),
];

/// The most one walk may take: the demo's lease (5 s) and a completer pass
/// (2 s), the restart, the page's backoff, with room for a loaded machine.
const ONE_WALK: Duration = Duration::from_secs(40);

/// Three carts in a row, each paid with "Kill the server after the
/// provider charged the card": each ends on its receipt (the page never
/// gives up while the shop says the payment is being finished, and says it
/// is waiting), with the provider's ledger holding exactly one more charge,
/// the receipt's, every time.
async fn a_server_killed_after_the_provider_charged_ends_on_the_receipt_every_time(
    scene: &mut Scene,
) -> Result<()> {
    let page = scene.shopper().await?;
    let mut waited_with_a_word = 0;
    for (walk, down_for) in DOWN_FOR.into_iter().enumerate() {
        fill_cart(&page).await?;
        page.choose_chaos("exit-after-provider").await?;
        page.pay().await?;
        wait_for_kill(&mut scene.server)?;
        tokio::time::sleep(down_for).await;
        scene.server.restart()?;

        let started = Instant::now();
        let (receipt, said_so) = wait_for_the_end(&page, walk + 1).await?;
        if said_so {
            waited_with_a_word += 1;
        }
        let ledger = scene.psp()?.ledger().await?;
        ensure!(
            ledger.len() == walk + 1,
            "walk {}: the provider's ledger holds {} charges: {ledger:?}",
            walk + 1,
            ledger.len()
        );
        ensure!(
            receipt.provider_charge.as_deref() == Some(ledger[0].id.as_str())
                && ledger[0].amount == CART_TOTAL,
            "walk {}: the receipt shows {:?}, the ledger's newest charge is {:?}",
            walk + 1,
            receipt.provider_charge,
            ledger[0]
        );
        let keys: Vec<_> = page
            .charge_attempts()
            .await?
            .into_iter()
            .filter(|a| a.key == receipt.key)
            .collect();
        ensure!(
            keys.first().map(|a| a.status.as_str()) == Some("network error"),
            "walk {}: the first attempt should have lost its answer with the server: {keys:?}",
            walk + 1
        );
        eprintln!(
            "walk {} (server down {down_for:?}): receipt {} after {:?} since the restart, {} requests{}",
            walk + 1,
            receipt.charge_id,
            started.elapsed(),
            keys.len(),
            if said_so { ", the page said it waits" } else { "" }
        );
        page.click("#new-order").await?;
        page.wait_for_cart("open").await?;
    }
    ensure!(
        waited_with_a_word > 0,
        "in no walk did the page say it waits for the shop to finish the payment"
    );
    Ok(())
}

/// Waits until walk `walk` ends: the receipt (and whether the page said,
/// meanwhile, that the shop is finishing the payment), or an error as soon
/// as the page gives up.
async fn wait_for_the_end(page: &Page, walk: usize) -> Result<(Receipt, bool)> {
    let said_so = Cell::new(false);
    let state = eventually(&format!("walk {walk} to end"), ONE_WALK, || async {
        let (state, finishing): (String, bool) = page
            .eval(
                "const waiting = document.querySelector('#finishing'); \
                 return [document.querySelector('#cart').dataset.state, !!waiting && !waiting.hidden];",
            )
            .await?;
        said_so.set(said_so.get() || finishing);
        Ok(["paid", "pending", "failed"]
            .contains(&state.as_str())
            .then_some(state))
    })
    .await?;
    if state != "paid" {
        bail!(
            "walk {walk}: the page gave up (cart {state}): {}",
            page.describe().await
        );
    }
    Ok((page.wait_for_receipt().await?, said_so.get()))
}
