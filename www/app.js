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
  SHOPPERS, changed, checkoutOp, clientOptions, isCartKey, isReservationsKey, loadCart, loadReservations,
  onChange, rememberShopper, setCart, state,
} from "./js/state.js";
import { $, render } from "./js/view.js";

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
  $("#switch-shopper").addEventListener("click", switchShopper);
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
  $("#shopper-name").textContent = SHOPPERS[state.shopper].name;
  $("#switch-shopper").textContent = `Switch to ${SHOPPERS[other].name}`;
  $("#switch-shopper").disabled = state.paying;
}

/**
 * Signs the other demo shopper in on this browser: a client of that
 * shopper's scope, that shopper's cart and reservations, and what that
 * shopper left in flight resumed. The first shopper's payments stay theirs:
 * the new client never lists, resumes or sends them.
 */
async function switchShopper() {
  if (state.paying) return;
  state.shopper = state.shopper === "a" ? "b" : "a";
  rememberShopper(state.shopper);
  state.client = clientFor(state.shopper);
  setCart(loadCart());
  loadReservations();
  changed();
  await refreshCharges();
  resumePending();
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
    client.resume(operation).then(
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
