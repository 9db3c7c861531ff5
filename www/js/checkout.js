// The cart and its payment: one operation per cart ("checkout:<cart id>"),
// so every retry, double click, reload or second tab reuses one key. Pay
// seals the cart (its contents are then the key's), sends it, and shows
// the receipt, the decline, or that the outcome is not known yet (Try
// again resends the same request). A declined card is paid again as a new
// operation: a new cart with the same items and a new key.

import * as attempts from "./attempts.js";
import { watchReceipt } from "./receipts.js";
import { findCharge, problemText, problemType, refreshCharges } from "./shop.js";
import {
  CARDS, FINISH_BUDGET_MS, MAX_ATTEMPTS, TIMEOUT_MS, cartDescription, cartLocked, cartTotal, changed, checkoutOp,
  newCart, saveCart, setCart, state,
} from "./state.js";
import { $, announce, hideNotice, money, showNotice } from "./view.js";

const CHAOS_LABELS = {
  "drop-after-commit": "the answer is lost after the commit",
  "crash-before-commit": "the server crashes before the commit",
  "exit-after-commit": "the server is killed after the commit",
  "exit-before-provider": "the server is killed before it calls the provider",
  "exit-after-provider": "the server is killed after the provider charged the card",
};
const KILLED =
  "The server was killed mid-payment. Sending the stored request again with the same key " +
  "until the shop answers: it finishes this payment, once.";
/** What the page says when the chaos it asked for left the first request unanswered. */
const CHAOS_NOTICES = {
  "crash-before-commit":
    "The server crashed before committing: nothing was charged. Resending the stored request with the same key…",
  "exit-before-provider": KILLED,
  "exit-after-provider": KILLED,
};
/**
 * Chaos that strikes again on every request that runs the operation: a
 * crash before the commit (nothing was stored, so a retry runs afresh), and
 * a kill around the provider call (a retry that takes the abandoned
 * operation over runs that phase again). Only the first request carries
 * it. The others act after the commit, where every retry is a replay.
 */
const ONCE = new Set(["crash-before-commit", "exit-before-provider", "exit-after-provider"]);
/** How long to wait before looking again for a charge the shop is still finishing. */
const LOOK_AGAIN_MS = 2000;

// ---------------------------------------------------------------- the cart

export function changeQuantity(sku, delta) {
  if (cartLocked()) return;
  const next = Math.max(0, Math.min(10, (state.cart.items[sku] || 0) + delta));
  if (next === 0) delete state.cart.items[sku];
  else state.cart.items[sku] = next;
  saveCart();
  changed();
  // Its line is gone: the focus goes to the product's own button.
  if (next === 0) document.querySelector(`[data-add="${sku}"]`)?.focus();
}

export function chooseCard(card) {
  if (cartLocked() || !CARDS.some((c) => c.id === card)) return;
  state.cart.card = card;
  saveCart();
  changed();
}

export function setEmail(email) {
  if (cartLocked()) return;
  state.cart.email = email.trim();
  saveCart();
}

function chargeBody(cart = state.cart) {
  const body = { amount: cartTotal(cart), currency: "usd", description: cartDescription(cart) };
  if (state.config.provider) body.payment_method = cart.card;
  if (state.config.receipts && cart.email) body.receipt_email = cart.email;
  return body;
}

/** The chaos picked for the next payment, reset to "nothing" once taken. */
function takeChaos() {
  if (!state.config.chaos) return "";
  const picked = document.querySelector('input[name="chaos"]:checked');
  const none = document.querySelector('input[name="chaos"][value=""]');
  if (none) none.checked = true;
  return picked ? picked.value : "";
}

function chaosLabel(value) {
  if (value.startsWith("delay-after-commit=")) {
    return `the answer is delayed ${value.split("=")[1]} ms, past the ${TIMEOUT_MS} ms timeout`;
  }
  return CHAOS_LABELS[value] || value;
}

// ---------------------------------------------------------------- paying

export async function pay() {
  const { cart, client } = state;
  // Disabled first, synchronously: a second click finds the button off.
  if (!client || state.paying || state.checking === true || cart.receipt || cartTotal() === 0) return;
  const op = checkoutOp();
  // Sealed, yet its key is gone from this device (it expired): it may have
  // been charged. Look before paying with a new key.
  if (cart.sealed && keyLost()) return lookForCharge();
  const pending = client.pendingOperations().includes(op);
  const email = $("#receipt-email");
  if (!cart.sealed && state.config.receipts && !email.checkValidity()) {
    announce("The receipt e-mail address is not valid.");
    email.focus();
    return;
  }
  state.paying = true;
  state.leaving = null;
  state.stuck = null;
  cart.failure = null;
  if (!cart.sealed) {
    // The key goes with the seal, in one write: another tab then finds a
    // sealed cart's key live even before this call has stored its request.
    cart.key = keyOf(op);
    cart.sealed = true;
  }
  saveCart();
  changed();
  const chaos = pending ? "" : takeChaos();
  announce(chaos ? `Paying… (chaos: ${chaosLabel(chaos)})` : "Paying…");
  try {
    const outcome = await untilFinished(op, () => (pending ? resumePayment(op) : sendPayment(op, chaos)));
    settle(op, outcome, true);
  } catch (error) {
    giveUp(op, error);
  } finally {
    state.paying = false;
    changed();
    refreshCharges();
  }
}

/**
 * The stored request sent again. When another tab's call got the final
 * answer first, the client has already forgotten the request
 * (`nothing-to-resume`): the cart's own body goes with the same key, and
 * the shop replays its answer.
 */
async function resumePayment(op) {
  try {
    return await attempts.logged(op, () => state.client.resume(op));
  } catch (error) {
    if (error?.code !== "nothing-to-resume") throw error;
    return sendPayment(op, "");
  }
}

async function sendPayment(op, chaos) {
  const { client } = state;
  if (!chaos) return attempts.logged(op, () => client.post("/charges", chargeBody(), op));
  const headers = { "X-Chaos": chaos };
  if (!ONCE.has(chaos)) return attempts.logged(op, () => client.post("/charges", chargeBody(), op, { headers }), chaos);
  // One request with the chaos, then the stored request again: same key,
  // same body, without it.
  try {
    return await attempts.logged(op, () => client.post("/charges", chargeBody(), op, { headers, maxAttempts: 1 }), chaos);
  } catch (error) {
    if (error?.kind !== "exhausted") throw error;
    showNotice(CHAOS_NOTICES[chaos]);
    announce("No answer; sending the stored request again with the same key…");
    return attempts.logged(op, () => client.resume(op, { maxAttempts: MAX_ATTEMPTS - 1 }));
  }
}

/**
 * `call`'s outcome, and more patience when the shop says the payment is
 * being finished (409 `idempotency-key-in-use`, seen by `attempted`): then
 * a call that ran out of attempts is followed by another resume of the
 * stored request, same key, until `FINISH_BUDGET_MS` after the first such
 * answer (an abort at that moment ends the last one). So the story ends
 * with the receipt whichever comes first, the completer's pass or the
 * page's retry: the retry either takes the operation over itself or gets
 * the completer's stored answer.
 */
export async function untilFinished(op, call) {
  try {
    for (;;) {
      try {
        return await call();
      } catch (error) {
        const until = state.finishing?.op === op ? state.finishing.until : 0;
        if (error?.kind !== "exhausted" || error.lastStatus !== 409 || Date.now() >= until) throw error;
        const deadline = new AbortController();
        const timer = setTimeout(() => deadline.abort(), until - Date.now());
        call = () =>
          attempts
            .logged(op, () => state.client.resume(op, { maxAttempts: MAX_ATTEMPTS, signal: deadline.signal }))
            .finally(() => clearTimeout(timer));
      }
    }
  } finally {
    if (state.finishing?.op === op) state.finishing = null;
  }
}

/** The operation's key (made now if it has none); null if the client refuses. */
function keyOf(op) {
  try {
    return state.client.keyFor(op);
  } catch {
    return null; // a record of another client version: the call will say so
  }
}

/**
 * Whether the sealed cart's key is gone from this device: it expired with
 * its payment unanswered (the client keeps such an operation as a
 * tombstone, refused until the page has looked: `expiredOperations()`),
 * the client holds another one for the cart, or none was recorded. Not
 * whether its request is pending: a tab that has just sealed the cart
 * stores its request only after the client's settle and lock, and another
 * tab must not take that moment for an expired key.
 */
export function keyLost() {
  const { cart, client } = state;
  if (!cart.key) return true;
  if (client?.expiredOperations().some((expired) => expired.operation === checkoutOp())) return true;
  const now = keyOf(checkoutOp());
  return now !== null && now !== cart.key;
}

/** Shows the outcome of `op`'s payment; `focus` moves the keyboard to it. */
function settle(op, outcome, focus) {
  // Another tab may have started a new order meanwhile: this answer belongs
  // to the cart it was sent for, whose receipt that tab already shows.
  if (op !== checkoutOp()) return;
  const { cart } = state;
  state.stuck = null;
  if (outcome.ok) {
    cart.key = outcome.key;
    cart.receipt = {
      charge: outcome.body,
      replayed: outcome.replayed,
      // Requests sent with this key: this call's, or more when this tab's
      // log saw earlier ones (a reload, a call the client gave up on).
      attempts: Math.max(outcome.attempts, attempts.sentWith(outcome.key)),
      key: outcome.key,
    };
    saveCart();
    changed();
    const charge = outcome.body || {};
    announce(
      `Paid: charge ${charge.id} for ${money(charge.amount || 0)}` +
        (outcome.replayed ? " (replayed: the stored answer, still one charge)." : "."),
    );
    if (focus) $("#receipt").focus();
    watchReceipt();
    return;
  }
  const declined = outcome.status === 402 && problemType(outcome) === "card-declined";
  cart.failure = { kind: declined ? "declined" : "refused", status: outcome.status, message: refusal(outcome) };
  saveCart();
  changed();
  announce(
    declined
      ? "Your card was declined: nothing was charged. Pay with another card starts a new payment."
      : `Payment refused: ${cart.failure.message}`,
  );
  if (focus) $(declined ? "#pay-again" : "#new-order").focus();
}

function refusal(outcome) {
  if (outcome.status === 401) {
    return (
      "the shop could not tell who is paying: this browser sent no session cookie. " +
      "Allow cookies for this site, then reload."
    );
  }
  return problemText(outcome);
}

function giveUp(op, error) {
  console.warn(error);
  if (op !== checkoutOp()) return;
  state.stuck = error;
  announce(
    error?.kind === "invalid"
      ? `The payment could not be sent: ${error.message}`
      : "We could not confirm your payment yet. It is saved with its key: " +
          "Try again resends the same request, so you cannot be charged twice.",
  );
  changed();
}

/**
 * The client's `onAttempt`, after the log's: says when a payment is
 * retried, and, from the first 409 `idempotency-key-in-use` on, that the
 * shop is finishing it and how long the page keeps asking.
 */
export function attempted(event) {
  if (event.operation !== checkoutOp() || !state.paying) return;
  if (event.status === 409 && state.finishing?.op !== event.operation) {
    state.finishing = { op: event.operation, until: Date.now() + FINISH_BUDGET_MS };
    announce("The shop is still finishing this payment: asking again with the same key…");
    changed();
    return;
  }
  if (event.retryInMs == null) return;
  announce(`Attempt ${attempts.sentWith(event.key)}: retrying with the same key…`);
}

// ---------------------------------------------------------------- resuming

/** A payment a previous visit left in flight is being sent again. */
export function resuming(op) {
  if (op !== checkoutOp()) return; // an earlier cart's: its charge shows in the list
  state.cart.sealed = true;
  state.paying = true;
  saveCart();
  changed();
  showNotice("Resuming your payment: sending the stored request again with the same key…");
  announce("Resuming your payment…");
}

export function resumed(op, outcome) {
  if (op === checkoutOp()) state.paying = false;
  settle(op, outcome, false);
  if (op === checkoutOp() && outcome.ok) {
    showNotice(
      outcome.replayed
        ? "Resumed your payment: it had already gone through, so the shop sent its stored answer. Here is your receipt."
        : "Resumed your payment: it went through. Here is your receipt.",
    );
  }
  changed();
  refreshCharges();
}

export function notResumed(op, error) {
  if (op === checkoutOp()) state.paying = false;
  giveUp(op, error);
  refreshCharges();
}

/**
 * A sealed cart with no receipt whose key is gone from this device: looks
 * for its charge in `GET /charges` (by the cart's description), and shows
 * it, or, when there is none, lets Pay send it with the new key.
 */
export async function lookForCharge() {
  const { id } = state.cart;
  state.checking = true;
  changed();
  showNotice(
    "This cart's payment started earlier, but its key is no longer on this device. " +
      "Looking for the cart's charge before anything is sent again…",
  );
  let found;
  try {
    found = await findCharge(cartDescription());
  } catch {
    if (state.cart.id !== id) return;
    state.checking = "failed";
    changed();
    announce("Could not reach the shop to look for this cart's charge. Nothing was sent: Check again once it is back.");
    return;
  }
  if (state.cart.id !== id) return; // another tab moved on meanwhile
  const { cart } = state;
  if (found?.status === "pending") {
    showNotice("This cart's payment is still being finished by the shop; looking again in a moment…");
    setTimeout(lookForCharge, LOOK_AGAIN_MS);
    return;
  }
  state.checking = false;
  // Looked: the client may forget the expired payment (its tombstone), so
  // that Pay can start the cart's payment anew if nothing was charged.
  try {
    state.client?.release(checkoutOp());
  } catch (error) {
    console.warn(error);
  }
  if (!found) {
    cart.sealed = false;
    cart.key = null;
    showNotice("No charge was found for this cart: nothing was charged. Pay sends it again, with a new key.");
  } else if (found.status === "succeeded") {
    const sent = cart.key ? attempts.sentWith(cart.key) : 0;
    cart.receipt = { charge: found, replayed: false, recovered: true, attempts: sent, key: cart.key };
    showNotice("Found this cart's charge: it had already been paid. Here is its receipt; nothing was sent again.");
    watchReceipt();
  } else {
    cart.failure = { kind: "declined", status: 402, message: "(Found in your charges.)" };
    hideNotice();
  }
  saveCart();
  changed();
  refreshCharges();
}

// ---------------------------------------------------------------- next carts

function startCart(cart) {
  try {
    state.client?.release(checkoutOp());
  } catch (error) {
    console.warn(error);
  }
  setCart(cart);
  hideNotice();
  saveCart();
  changed();
}

/** A new, empty cart with a new key (the last receipt's address is not carried over: it is forgotten). */
export function newOrder() {
  startCart(newCart());
  announce("New order started: a new cart with a new key.");
  document.querySelector("[data-add]")?.focus();
}

/** After a decline: the same items as a new payment (a new cart, a new key), another card picked. */
export function payWithAnotherCard() {
  const declined = state.cart.card;
  const next = newCart({ items: state.cart.items, email: state.cart.email });
  next.card = CARDS.find((c) => c.id !== declined)?.id ?? CARDS[0].id;
  startCart(next);
  announce("A new payment for the same items, with a new key: pick a card and press Pay.");
  document.querySelector('#card-choice input:checked')?.focus();
}
