// The demo checkout page, as ES modules with no build step:
//
//   js/state.js         the page's state in one place, what is kept in storage
//   js/storage.js       localStorage / sessionStorage, guarded (storage may be off)
//   js/shop.js          reads that need no key: config, stock, charges (all pages)
//   js/checkout.js      the cart and its payment: one operation, one key per cart
//   js/reservations.js  reserving posters, one operation and one line each
//   js/attempts.js      the attempt log, from the client's onAttempt events
//   js/receipts.js      where the e-mailed receipt is (MailDev, with ?inbox=)
//   js/view.js          drawing the state; elements updated in place
//   js/operators.js     the operator panel (chaos mode): unfinished operations
//   js/hooks.js         the data-* attributes the end-to-end stories read
//
// This file starts the page: loads the client, wires the controls, and
// resumes what a previous visit left in flight.

import init, { IdempotentClient } from "./pkg/client_wasm.js";
import * as attempts from "./js/attempts.js";
import * as checkout from "./js/checkout.js";
import * as hooks from "./js/hooks.js";
import * as operators from "./js/operators.js";
import { inboxFromQuery, watchReceipt } from "./js/receipts.js";
import * as reservations from "./js/reservations.js";
import { loadConfig, refreshCharges, refreshStock } from "./js/shop.js";
import {
  SHOPPERS, changed, checkoutOp, clientOptions, forgetShopper, isCartKey, isReservationsKey, loadCart,
  loadReservations, onChange, rememberShopper, saveCart, setCart, state,
} from "./js/state.js";
import { $, announce, hideNotice, render, showNotice } from "./js/view.js";

/** Each kind of operation's handlers, by the prefix of its name. */
const KINDS = { "checkout:": checkout, "reserve:": reservations };
const kindOf = (operation) =>
  Object.entries(KINDS).find(([prefix]) => operation.startsWith(prefix))?.[1];

function showResuming(operation) {
  attempts.sending(operation);
  kindOf(operation)?.resuming(operation);
}

function showOutcome(operation, outcome) {
  attempts.settled(operation);
  kindOf(operation)?.resumed(operation, outcome);
}

function showRetryLater(operation, error) {
  attempts.settled(operation);
  if (kindOf(operation)) kindOf(operation).notResumed(operation, error);
  else console.warn(error);
}

function wire() {
  $("#pay").addEventListener("click", checkout.pay);
  $("#new-order").addEventListener("click", checkout.newOrder);
  $("#pay-again").addEventListener("click", checkout.payWithAnotherCard);
  $("#reserve").addEventListener("click", reservations.reserve);
  $("#refresh-charges").addEventListener("click", refreshCharges);
  $("#clear-log").addEventListener("click", attempts.clear);
  $("#switch-shopper").addEventListener("click", () => leave("switch"));
  $("#sign-out").addEventListener("click", () => leave("sign-out"));
  // Back from the back-forward cache: the page did not load again, so
  // resume here what is pending (docs/CLIENT.md, "The key lifecycle").
  window.addEventListener("pageshow", (event) => {
    if (event.persisted && state.client) resumePending();
  });
  $("#products").addEventListener("click", (event) => {
    const add = event.target.closest("[data-add]");
    if (add) checkout.changeQuantity(add.dataset.add, 1);
  });
  $("#cart-lines").addEventListener("click", (event) => {
    const step = event.target.closest("[data-step]");
    if (step) checkout.changeQuantity(step.closest("li").dataset.sku, Number(step.dataset.step));
  });
  $("#card-choice").addEventListener("change", (event) => checkout.chooseCard(event.target.value));
  $("#receipt-email").addEventListener("input", (event) => checkout.setEmail(event.target.value));
  // Another tab changed the cart (a payment, a receipt, a new order) or
  // the reservations.
  window.addEventListener("storage", (event) => {
    if (isCartKey(event.key)) {
      setCart(loadCart());
      changed();
      refreshCharges();
      watchReceipt();
    } else if (isReservationsKey(event.key) && !state.reservations.some((r) => r.result === "sending")) {
      loadReservations();
      changed();
    }
  });
}

/** A client for the signed-in shopper: its own scope and credentials. */
function clientFor(shopper) {
  return new IdempotentClient({
    ...clientOptions(shopper),
    onAttempt: (event) => {
      attempts.attempted(event);
      checkout.attempted(event);
    },
  });
}

function showShopper() {
  const other = state.shopper === "a" ? "b" : "a";
  const busy = state.paying || state.reservations.some((r) => r.result === "sending");
  $("#shopper-name").textContent = SHOPPERS[state.shopper].name;
  $("#switch-shopper").textContent =
    state.leaving === "switch" ? `Switch to ${SHOPPERS[other].name} anyway` : `Switch to ${SHOPPERS[other].name}`;
  $("#switch-shopper").disabled = busy;
  $("#sign-out").textContent = state.leaving === "sign-out" ? "Sign out anyway" : "Sign out";
  $("#sign-out").disabled = busy;
}

/**
 * Signs the shopper of this tab out (docs/CLIENT.md, "Accounts and
 * sign-out"): the client forgets every key and stored request of the
 * shopper's scope (`clear()`), so no request body (amounts, the receipt
 * address) stays behind for the next person at this browser; then signs
 * `next` in. Signing out, or leaving Shopper B, also forgets that
 * shopper's cart and reservations, and B's token; switching from A keeps
 * A's cart (without its address) for A's return: a sealed one whose key is
 * gone is looked up in A's charges, never paid again blindly. When the
 * shopper has requests the shop has not confirmed, the first press only
 * says so: once cleared, only the charges list can tell what became of
 * them.
 */
function leave(how) {
  const { client } = state;
  if (!client || state.paying || state.reservations.some((r) => r.result === "sending")) return;
  const unconfirmed = client.pendingOperations().length;
  if (unconfirmed > 0 && state.leaving !== how) {
    state.leaving = how;
    showNotice(
      `${SHOPPERS[state.shopper].name} has ${unconfirmed === 1 ? "a request" : `${unconfirmed} requests`} ` +
        "the shop has not confirmed yet. Leaving forgets their keys on this browser: the shop still finishes " +
        "what it received, and the charges list shows it, but this page will not send them again. " +
        `Press "${how === "switch" ? "Switch" : "Sign out"} … anyway" to leave now.`,
    );
    changed();
    return;
  }
  state.leaving = null;
  client.abortAll();
  let forgot = 0;
  try {
    forgot = client.clear();
  } catch (error) {
    console.warn(error); // a call still sending: abortAll() above ends them
    return;
  }
  const from = state.shopper;
  const next = how === "switch" ? (from === "a" ? "b" : "a") : "a";
  if (how === "sign-out" || from === "b") forgetShopper();
  else forgetAddress();
  rememberShopper(next);
  state.shopper = next;
  state.client = clientFor(next);
  setCart(loadCart());
  loadReservations();
  hideNotice();
  changed();
  announce(
    `${SHOPPERS[from].name} signed out on this browser (${forgot} stored ${forgot === 1 ? "request" : "requests"} ` +
      `forgotten); shopping as ${SHOPPERS[next].name}.`,
  );
  refreshCharges().then(resumePending);
}

/** A's cart stays for A's return, without the receipt address of a payment it can no longer resume. */
function forgetAddress() {
  state.cart.email = "";
  saveCart();
}

/**
 * Resume on load (docs/CLIENT.md, "The key lifecycle"): what a previous
 * visit of this shopper left in flight is sent again, same key, same body;
 * each outcome goes to its own operation. A sealed cart with no receipt
 * whose key ran out on this device is looked up in the charges before
 * anything is sent again.
 */
function resumePending() {
  const { client } = state;
  const pending = client.pendingOperations();
  reservations.forgetLost(pending);
  for (const operation of pending) {
    showResuming(operation);
    const resume = () => client.resume(operation);
    (operation === checkoutOp() ? checkout.untilFinished(operation, resume) : resume()).then(
      (outcome) => showOutcome(operation, outcome),
      (error) => showRetryLater(operation, error),
    );
  }
  const { cart } = state;
  if (cart.sealed && !cart.receipt && !cart.failure && !pending.includes(checkoutOp()) && checkout.keyLost()) {
    checkout.lookForCharge();
  }
  watchReceipt();
  changed();
}

async function start() {
  onChange(render);
  attempts.render();
  render();
  try {
    await init();
    state.client = clientFor(state.shopper);
  } catch (error) {
    const banner = $("#boot-error");
    banner.textContent = `The payment client failed to load: ${error}. Build it with scripts/build-wasm.sh.`;
    banner.hidden = false;
    throw error;
  }
  wire();
  state.inbox = inboxFromQuery();
  await loadConfig();
  if (state.config.chaos) operators.start();
  changed();
  await Promise.all([refreshStock(), refreshCharges()]);

  resumePending();
  hooks.ready();
}

onChange(showShopper);
start();
