//! The demo's story (docs/DEMO.md), failure by failure: each story makes one thing go
//! wrong on the way (a lost answer, a timeout, a reload, a killed server,
//! two tabs, a double click, a crash) and checks that the cart was
//! charged exactly once. Told in order, its failures numbered 1 to 11;
//! those where two payments meet (6 to 8: two tabs, a double click, three
//! buyers of the last poster) are in `concurrent.rs`.

use anyhow::{ensure, Result};
use e2e::page::ensure_one_key;
use e2e::steps::{
    ensure_charged_once, ensure_paid_in_one_attempt, ensure_summary, fill_cart, held_charges,
    pay_and_wait_until_committed_in_flight, pay_to_receipt, pay_with_chaos, shopper_with_cart,
    wait_for_kill, PAGE_MAX_ATTEMPTS,
};
use e2e::{Receipt, Scene, Server};

e2e::stories![
    paying_once_shows_a_receipt_and_lists_exactly_one_charge,
    an_answer_lost_after_commit_is_retried_and_replayed_with_one_charge,
    an_answer_delayed_past_the_timeout_is_retried_with_the_same_key_and_charged_once,
    reloading_during_a_delayed_payment_resumes_it_with_the_same_key_and_shows_the_receipt,
    a_server_killed_after_commit_and_restarted_replays_the_payment_with_one_charge,
    a_crash_before_commit_charges_nothing_and_the_resent_request_charges_once,
    a_new_order_after_a_receipt_is_a_new_operation_with_a_new_key,
    a_payment_the_page_gave_up_on_is_finished_by_try_again_with_the_same_key,
];

/// 1. The happy path: pay once, by keyboard; one charge listed, a receipt.
async fn paying_once_shows_a_receipt_and_lists_exactly_one_charge(scene: &mut Scene) -> Result<()> {
    let page = shopper_with_cart(scene).await?;
    page.press_enter_on("#pay").await?;
    let receipt = page.wait_for_receipt().await?;
    ensure!(
        receipt.charge_id.starts_with("ch_"),
        "receipt without a charge id: {receipt:?}"
    );
    ensure_paid_in_one_attempt(&page, &receipt).await?;
    ensure!(
        page.text("#receipt-amount").await? == "$68.00",
        "receipt amount"
    );
    ensure_charged_once(&page, &scene.server, &receipt).await?;
    // The finished payment survives a reload as a receipt, not a new Pay button.
    page.reload().await?;
    let again = page.wait_for_receipt().await?;
    ensure!(
        again.charge_id == receipt.charge_id,
        "after a reload the receipt shows {again:?}"
    );
    ensure!(
        page.eval::<bool>("return document.querySelector('#pay').hidden;")
            .await?,
        "a paid cart offers Pay again after a reload"
    );
    ensure!(
        page.charge_attempts().await?.len() == 1,
        "the reload sent the payment again"
    );
    Ok(())
}

/// How many attempts a retry takes.
#[derive(Debug, Clone, Copy)]
enum Retries {
    /// The first attempt failed, the second was the replay.
    Once,
    /// The first attempts failed alike until the server came back (a
    /// restart takes as long as it takes); the last was the replay.
    UntilBack,
}

/// Fails unless the log shows failed attempts (the first ending
/// `first_failure`) and then one replayed 201, all with the receipt's key,
/// and as many attempts as `retries` says.
fn ensure_retried_then_replayed(
    attempts: &[e2e::Attempt],
    receipt: &Receipt,
    first_failure: &str,
    retries: Retries,
) -> Result<()> {
    ensure_one_key(attempts, &receipt.key)?;
    match retries {
        Retries::Once => ensure!(
            attempts.len() == 2,
            "expected exactly one retry, the attempt log shows {attempts:?}"
        ),
        Retries::UntilBack => ensure!(
            attempts.len() >= 2,
            "expected a retry, the attempt log shows {attempts:?}"
        ),
    }
    let (last, failed) = attempts.split_last().expect("at least two attempts");
    ensure!(
        failed.iter().all(|a| a.status == first_failure),
        "the attempts before the answer did not all end {first_failure:?}: {attempts:?}"
    );
    ensure!(
        last.status == "201" && last.replayed,
        "the last attempt was not a replayed 201: {attempts:?}"
    );
    ensure!(
        receipt.replayed,
        "the receipt does not say replayed: {receipt:?}"
    );
    Ok(())
}

/// `idempotency_requests_total{outcome=OUTCOME}` of the server: how many
/// keyed requests it `executed`, `replayed`, …
async fn keyed_requests(server: &Server, outcome: &str) -> Result<f64> {
    server
        .metrics()
        .await?
        .counter("idempotency_requests_total", &[("outcome", outcome)])
}

/// 2. The answer is lost after the commit: the page retries with the same
///    key, gets the stored answer and says "replayed"; one charge.
async fn an_answer_lost_after_commit_is_retried_and_replayed_with_one_charge(
    scene: &mut Scene,
) -> Result<()> {
    let page = pay_with_chaos(scene, "drop-after-commit").await?;
    let (receipt, attempts) = page.wait_for_receipt_and_attempts().await?;
    // The browser itself resends a request once when a reused keep-alive
    // connection drops without an answer, so the page may see the
    // replay on its first attempt; on a fresh connection the client's
    // own retry does it. Either way the second request is a replay.
    if attempts.len() == 1 {
        ensure_one_key(&attempts, &receipt.key)?;
        ensure!(
            attempts[0].status == "201" && attempts[0].replayed && receipt.replayed,
            "one attempt, yet not a replay: {attempts:?}"
        );
    } else {
        ensure_retried_then_replayed(&attempts, &receipt, "network error", Retries::Once)?;
    }
    ensure!(
        keyed_requests(&scene.server, "executed").await? == 1.0,
        "the charge did not run exactly once"
    );
    ensure!(
        keyed_requests(&scene.server, "replayed").await? == 1.0,
        "the server did not replay the lost answer exactly once"
    );
    ensure!(
        page.eval::<bool>("return !document.querySelector('#receipt-replayed').hidden;")
            .await?,
        "the receipt does not show the replayed note"
    );
    ensure_charged_once(&page, &scene.server, &receipt).await
}

/// 3. The answer is delayed past the client's 3 s timeout: the page gives
///    up on that attempt and retries with the same key; one charge.
async fn an_answer_delayed_past_the_timeout_is_retried_with_the_same_key_and_charged_once(
    scene: &mut Scene,
) -> Result<()> {
    let page = pay_with_chaos(scene, "delay-after-commit=5000").await?;
    let (receipt, attempts) = page.wait_for_receipt_and_attempts().await?;
    ensure_retried_then_replayed(&attempts, &receipt, "timeout", Retries::Once)?;
    ensure_charged_once(&page, &scene.server, &receipt).await
}

/// 4. The shopper reloads while a payment's answer is delayed: the reloaded
///    page says "Resuming your payment", resends with the same key and shows
///    the receipt; one charge.
async fn reloading_during_a_delayed_payment_resumes_it_with_the_same_key_and_shows_the_receipt(
    scene: &mut Scene,
) -> Result<()> {
    let page = pay_and_wait_until_committed_in_flight(scene).await?;
    let before = page.charge_attempts().await?;
    ensure!(
        before.len() == 1 && before[0].status == "pending",
        "expected one attempt in flight before the reload: {before:?}"
    );
    let key = before[0].key.clone();

    page.reload().await?;
    page.wait_for_words("#resume-notice", "Resum").await?;
    let receipt = page.wait_for_receipt().await?;
    ensure!(
        receipt.key == key,
        "resumed with key {}, the payment was sent with {key}",
        receipt.key
    );
    ensure!(
        receipt.replayed,
        "the resumed payment was not a replay: {receipt:?}"
    );
    let notice = page.text("#resume-notice").await?;
    ensure!(
        notice.contains("Resumed your payment"),
        "resume notice says {notice:?}"
    );

    let attempts = page.charge_attempts().await?;
    ensure_retried_then_replayed(&attempts, &receipt, "cut by reload", Retries::Once)?;
    ensure_charged_once(&page, &scene.server, &receipt).await
}

/// 5. The server process is killed right after the commit; the test
///    restarts it on the same port and database, as an orchestrator would:
///    the page's retries reach the new process and get the replay; one charge.
async fn a_server_killed_after_commit_and_restarted_replays_the_payment_with_one_charge(
    scene: &mut Scene,
) -> Result<()> {
    let page = pay_with_chaos(scene, "exit-after-commit").await?;
    wait_for_kill(&mut scene.server)?;
    let before = scene.server.base_url();
    scene.server.restart()?;
    ensure!(
        scene.server.base_url() == before,
        "restarted on {} instead of {before}",
        scene.server.base_url()
    );

    let (receipt, attempts) = page.wait_for_receipt_and_attempts().await?;
    ensure_retried_then_replayed(&attempts, &receipt, "network error", Retries::UntilBack)?;
    ensure_charged_once(&page, &scene.server, &receipt).await
}

/// 9. The server crashes before the commit: nothing is charged; the page
///    resends the stored request with the same key, which runs once.
async fn a_crash_before_commit_charges_nothing_and_the_resent_request_charges_once(
    scene: &mut Scene,
) -> Result<()> {
    let page = pay_with_chaos(scene, "crash-before-commit").await?;
    let (receipt, attempts) = page.wait_for_receipt_and_attempts().await?;
    ensure_one_key(&attempts, &receipt.key)?;
    ensure!(
        attempts.len() == 2 && attempts[0].status == "network error" && attempts[1].status == "201",
        "expected a crash then a 201: {attempts:?}"
    );
    ensure!(
        !receipt.replayed,
        "nothing was committed, yet the answer was a replay: {receipt:?}"
    );
    let notice = page.text("#resume-notice").await?;
    ensure!(
        notice.contains("crashed before committing"),
        "notice says {notice:?}"
    );
    ensure_charged_once(&page, &scene.server, &receipt).await
}

/// 10. "New order" releases the paid cart's key: the next cart is a new
///     operation with a new key and its own charge.
async fn a_new_order_after_a_receipt_is_a_new_operation_with_a_new_key(
    scene: &mut Scene,
) -> Result<()> {
    let (page, first) = pay_to_receipt(scene).await?;
    let first_cart = page.cart_id().await?;
    page.click("#new-order").await?;
    page.wait_for(
        "an empty open cart",
        "document.querySelector('#cart').dataset.state === 'open' && !document.querySelector('#cart-empty').hidden",
    )
    .await?;
    let second_cart = page.cart_id().await?;
    ensure!(
        second_cart != first_cart,
        "New order kept cart {first_cart}"
    );
    fill_cart(&page).await?;
    page.pay().await?;
    let second = page.wait_for_receipt().await?;
    ensure!(
        second.key != first.key,
        "the new order reused key {}",
        first.key
    );
    ensure!(
        second.charge_id != first.charge_id && !second.replayed,
        "second receipt: {second:?}"
    );
    let held = held_charges(&scene.server, &page).await?;
    ensure!(
        held.len() == 2,
        "expected two charges for two orders: {held:?}"
    );
    ensure_summary(&page, "2 charges in total; 1 for this cart").await
}

/// 11. The server stays down longer than the page's retries last: the page
///     says it could not confirm the payment and offers "Try again"; once the
///     server is back, that resends the same key and shows the receipt.
async fn a_payment_the_page_gave_up_on_is_finished_by_try_again_with_the_same_key(
    scene: &mut Scene,
) -> Result<()> {
    let page = pay_with_chaos(scene, "exit-after-commit").await?;
    wait_for_kill(&mut scene.server)?;
    page.wait_for_cart("pending").await?;
    let label = page.text("#pay").await?;
    ensure!(
        label.starts_with("Try again"),
        "the Pay button reads {label:?}"
    );
    page.wait_for_words("#status", "could not confirm").await?;
    let given_up = page.charge_attempts().await?;
    ensure!(
        given_up.len() == PAGE_MAX_ATTEMPTS && given_up.iter().all(|a| a.status == "network error"),
        "the page gave up after other than {PAGE_MAX_ATTEMPTS} failed attempts: {given_up:?}"
    );

    scene.server.restart()?;
    page.pay().await?;
    let receipt = page.wait_for_receipt().await?;
    ensure!(
        receipt.replayed,
        "the charge committed before the kill was not replayed: {receipt:?}"
    );
    ensure_one_key(&page.charge_attempts().await?, &receipt.key)?;
    ensure_charged_once(&page, &scene.server, &receipt).await
}
