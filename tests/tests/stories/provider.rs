//! Payments through the payment provider simulator, with receipts e-mailed
//! to MailDev: the server runs with `--psp-url` and `--smtp-url`. Each
//! story checks the three places a charge leaves a trace: the shop (its
//! charges, over HTTP and in the page), the provider's ledger, and the
//! inbox (one receipt per charge, `Message-ID: <receipt.CHARGE@exactly-once>`).

use anyhow::{ensure, Result};
use e2e::page::ensure_one_key;
use e2e::steps::{
    ensure_charged_once, ensure_paid_in_one_attempt, ensure_summary, held_charges, pay_with_chaos,
    shopper_with_cart, wait_for_kill, CART_TOTAL,
};
use e2e::{Page, Receipt, Scene, Setup};
use std::time::Duration;
use testkit::Fault;

e2e::stories![
    Setup::provider() =>
    paying_through_the_provider_shows_its_charge_and_the_receipt_in_the_inbox,
    a_server_killed_after_the_provider_charged_ends_with_one_charge_and_one_receipt,
    a_server_killed_before_it_called_the_provider_ends_with_one_charge_and_one_receipt,
    a_declined_card_is_shown_and_paid_again_with_another_card_as_a_new_operation,
    the_operator_panel_lists_a_payment_the_provider_holds_up_until_the_completer_finishes_it,
];

/// Where a story's receipt goes: the e-mail field's prefilled address.
const EMAIL: &str = "ada@example.com";

/// How long after the first receipt a second one would have shown up: the
/// server's relay sends within a second of the commit.
const SECOND_RECEIPT_GRACE: Duration = Duration::from_secs(2);

/// Checks that the provider charged the card once, for the receipt's
/// charge, and that the inbox holds exactly one receipt for it, which the
/// page shows as delivered.
async fn ensure_one_provider_charge_and_one_receipt(
    scene: &Scene,
    page: &Page,
    receipt: &Receipt,
) -> Result<()> {
    let provider_charge = receipt
        .provider_charge
        .clone()
        .filter(|id| id.starts_with("pch_"))
        .ok_or_else(|| anyhow::anyhow!("the receipt shows no provider charge: {receipt:?}"))?;
    let ledger = scene.psp()?.ledger().await?;
    ensure!(
        ledger.len() == 1 && ledger[0].id == provider_charge && ledger[0].amount == CART_TOTAL,
        "the provider's ledger holds {ledger:?}; the receipt shows {provider_charge}"
    );

    let wanted = (
        format!("<receipt.{}@exactly-once>", receipt.charge_id),
        vec![EMAIL.to_owned()],
    );
    let maildev = scene.maildev()?;
    maildev
        .wait_for(Duration::from_secs(30), "the receipt", |emails| {
            !emails.is_empty()
        })
        .await?;
    tokio::time::sleep(SECOND_RECEIPT_GRACE).await;
    let emails: Vec<_> = maildev
        .emails()
        .await?
        .into_iter()
        .map(|email| (email.message_id, email.to))
        .collect();
    ensure!(
        emails == [wanted.clone()],
        "MailDev received {emails:?}, expected only {wanted:?}"
    );

    page.wait_for(
        "the page to see the receipt in the inbox",
        "document.querySelector('#receipt').dataset.mail === 'delivered'",
    )
    .await?;
    let shown = page.text("#receipt-mail").await?;
    ensure!(
        shown == format!("delivered to {EMAIL}"),
        "the receipt's e-mail line reads {shown:?}"
    );
    let inbox: String = page
        .eval("return document.querySelector('#inbox-link').href;")
        .await?;
    ensure!(inbox == maildev.web_url(), "the inbox link goes to {inbox}");
    Ok(())
}

/// The happy path through the provider: the page offers the cards and a
/// prefilled receipt address, pays, and shows the provider's charge id and
/// the receipt delivered to the inbox; one charge everywhere.
async fn paying_through_the_provider_shows_its_charge_and_the_receipt_in_the_inbox(
    scene: &mut Scene,
) -> Result<()> {
    let page = shopper_with_cart(scene).await?;
    let email: String = page
        .eval("return document.querySelector('#receipt-email').value;")
        .await?;
    ensure!(
        email == EMAIL,
        "the receipt address is prefilled with {email:?}"
    );
    page.choose_card("pm_card_visa").await?;
    page.pay().await?;
    let receipt = page.wait_for_receipt().await?;
    ensure_paid_in_one_attempt(&page, &receipt).await?;
    ensure_one_provider_charge_and_one_receipt(scene, &page, &receipt).await?;
    ensure_charged_once(&page, &scene.server, &receipt).await
}

/// Pays with `chaos` killing the server (137) around the provider call,
/// restarts it on the same database, and checks that the page ends on the
/// receipt with one provider charge and one receipt.
async fn pay_through_a_killed_server(scene: &mut Scene, chaos: &str) -> Result<()> {
    let page = pay_with_chaos(scene, chaos).await?;
    wait_for_kill(&mut scene.server)?;
    scene.server.restart()?;

    let (receipt, attempts) = page.wait_for_receipt_and_attempts().await?;
    ensure_one_key(&attempts, &receipt.key)?;
    ensure!(
        attempts.first().map(|a| a.status.as_str()) == Some("network error"),
        "the first attempt should have lost its answer with the server: {attempts:?}"
    );
    let notice = page.text("#resume-notice").await?;
    ensure!(
        notice.contains("killed mid-payment"),
        "the notice says {notice:?}"
    );
    ensure_one_provider_charge_and_one_receipt(scene, &page, &receipt).await?;
    ensure_charged_once(&page, &scene.server, &receipt).await
}

/// The server is killed after the provider charged the card and before it
/// recorded that; restarted on the same database, it finishes the
/// operation (a retry or its completer takes it over and asks the provider
/// again with the same downstream key, which replays the charge): one
/// provider charge, one receipt, and the page shows the receipt.
async fn a_server_killed_after_the_provider_charged_ends_with_one_charge_and_one_receipt(
    scene: &mut Scene,
) -> Result<()> {
    pay_through_a_killed_server(scene, "exit-after-provider").await
}

/// The server is killed after the operation started and before it called
/// the provider; restarted, it calls the provider for the first time: one
/// provider charge, one receipt, the receipt shown.
async fn a_server_killed_before_it_called_the_provider_ends_with_one_charge_and_one_receipt(
    scene: &mut Scene,
) -> Result<()> {
    pay_through_a_killed_server(scene, "exit-before-provider").await
}

/// A declined card: the page shows the decline (nothing charged) and pays
/// again with another card as a new operation, a new cart with a new key;
/// the provider charges once, the inbox gets one receipt, and the shop
/// lists the declined charge beside the paid one.
async fn a_declined_card_is_shown_and_paid_again_with_another_card_as_a_new_operation(
    scene: &mut Scene,
) -> Result<()> {
    let page = shopper_with_cart(scene).await?;
    page.choose_card("pm_card_chargeDeclined").await?;
    page.pay().await?;
    page.wait_for_cart("failed").await?;
    let failure = page.text("#failure").await?;
    ensure!(
        failure.contains("declined") && failure.contains("nothing was charged"),
        "the page says {failure:?}"
    );
    let declined_cart = page.cart_id().await?;
    let declined = page.charge_attempts().await?;
    ensure!(
        declined.len() == 1 && declined[0].status == "402",
        "the declined payment's attempts: {declined:?}"
    );

    page.click("#pay-again").await?;
    page.wait_for_cart("open").await?;
    ensure!(
        page.cart_id().await? != declined_cart,
        "paying again kept the declined cart"
    );
    ensure!(
        page.text("#total").await? == "$68.00",
        "the new cart lost the items"
    );
    page.choose_card("pm_card_visa").await?;
    page.pay().await?;
    let receipt = page.wait_for_receipt().await?;
    ensure!(
        receipt.key != declined[0].key,
        "the second payment reused the declined one's key {}",
        receipt.key
    );
    ensure_one_provider_charge_and_one_receipt(scene, &page, &receipt).await?;

    let held = held_charges(&scene.server, &page).await?;
    let statuses: Vec<_> = held
        .iter()
        .map(|c| c["status"].as_str().unwrap_or("?"))
        .collect();
    ensure!(
        statuses == ["succeeded", "failed"],
        "the shop holds {held:?}"
    );
    page.listed_charges().await?;
    ensure_summary(&page, "2 charges in total; 1 for this cart").await
}

/// The operator panel (chaos mode): the provider is down, so the payment
/// stays unfinished at `charge_created`; the panel lists it, its failed
/// attempts counted and the provider's error shown, while the completer
/// keeps trying. Once the provider is back the completer (or the page's
/// own retry) finishes it, the panel empties, and the page ends on the
/// receipt, paid once at the provider with one receipt.
async fn the_operator_panel_lists_a_payment_the_provider_holds_up_until_the_completer_finishes_it(
    scene: &mut Scene,
) -> Result<()> {
    scene.psp()?.fault(Fault::Down, 100_000).await?;
    let page = shopper_with_cart(scene).await?;
    page.choose_card("pm_card_visa").await?;
    page.pay().await?;
    page.wait_for_within(
        "the operator panel to list the payment with a failed attempt",
        "[...document.querySelectorAll('#operations tbody tr')] \
           .some(r => r.dataset.point === 'charge_created' && Number(r.dataset.attempts) >= 1)",
        Duration::from_secs(30),
    )
    .await?;
    let (state, last_error): (String, String) = page
        .eval(
            "const r = document.querySelector('#operations tbody tr'); \
             return [r.dataset.state, r.dataset.lastError];",
        )
        .await?;
    ensure!(
        state == "running" || state == "stalled",
        "the panel shows the payment {state:?}"
    );
    ensure!(
        !last_error.is_empty(),
        "the panel shows no error for the failed attempt"
    );

    scene.psp()?.clear_faults().await?;
    page.wait_for_within(
        "the operator panel to empty once the provider is back",
        "(() => { const t = document.querySelector('#operations'); \
           return t.dataset.count === '0' && Number(t.dataset.loads) > 1; })()",
        Duration::from_secs(30),
    )
    .await?;
    // The page either got the answer on a retry of its own, or gave up
    // meanwhile and offers "Try again", which replays it.
    page.wait_for_within(
        "the page to end the payment",
        "['paid', 'pending'].includes(document.querySelector('#cart').dataset.state)",
        Duration::from_secs(60),
    )
    .await?;
    if page.cart_state().await? == "pending" {
        page.pay().await?;
    }
    let receipt = page.wait_for_receipt().await?;
    ensure_one_key(&page.charge_attempts().await?, &receipt.key)?;
    ensure_one_provider_charge_and_one_receipt(scene, &page, &receipt).await?;
    ensure_charged_once(&page, &scene.server, &receipt).await
}
