// The page's state, in one place: what it sells, the cart (one operation,
// "checkout:<cart id>", so one idempotency key for its whole life), the
// reservations, what the server said about itself, the charges and the
// attempt log; which parts are kept in storage; and one `changed()` that
// redraws the page after any of it changes.

import { randomId, readJson, removeItem, writeJson } from "./storage.js";

/** Each attempt is aborted after this long; small so the demo is quick. */
export const TIMEOUT_MS = 3000;
/** Requests per payment: enough to outlast a server restart (scripts/demo.sh). */
export const MAX_ATTEMPTS = 8;
/**
 * How long a payment keeps being asked for after the shop first answers
 * `409 idempotency-key-in-use` (someone holds the operation: the request
 * of a server that was stopped mid-payment until its lease runs out, then
 * the new process's completer or this page's own retry finishing it): the
 * server's `--operation-lease` plus one pass of its completer
 * (`--complete-interval`) plus the provider call that pass makes
 * (`--psp-timeout`), at the server's defaults, 30 s + 10 s + 10 s
 * (scripts/demo.sh runs 5 s and 2 s, well inside). `GET /config` does not
 * say the server's values, so the page covers the defaults.
 */
export const FINISH_BUDGET_MS = 30000 + 10000 + 10000;
/** Options of the page's client (onAttempt is added by app.js). */
export const CLIENT_OPTIONS = {
  timeoutMs: TIMEOUT_MS,
  maxAttempts: MAX_ATTEMPTS,
  backoffBaseMs: 300,
  backoffMaxMs: 4000,
};
export const PRODUCTS = [
  { sku: "sku-tee", name: "Exactly-Once Tee", price: 2500, blurb: "Soft cotton, printed once." },
  { sku: "sku-mug", name: "Idempotent Mug", price: 1200, blurb: "Refill it, same mug." },
  { sku: "sku-poster", name: "Retry Poster", price: 1800, blurb: "Limited run of three." },
];
/** The provider's test cards (docs/PSP.md): the first one is charged. */
export const CARDS = [
  { id: "pm_card_visa", label: "Visa ending 4242" },
  { id: "pm_card_chargeDeclined", label: "Test card that is declined" },
];
export const DEFAULT_EMAIL = "ada@example.com";

/**
 * The demo's two shoppers on one browser. Shopper A is the browser's `sid`
 * cookie, Shopper B a bearer token the page makes when B signs in on a tab.
 * Each has its own client `scope`, so neither ever lists, resumes or sends
 * the other's payments (docs/CLIENT.md, "Accounts and sign-out"), and its
 * own cart.
 *
 * B's sign-in lives in the tab's sessionStorage, token included, never in
 * localStorage: a reload keeps it (a payment B left in flight must be
 * resumed with B's own token, since keys belong to their caller: under
 * another token the server would run it again), while closing the tab or
 * signing out ends it, and no other tab can read it. Each sign-in is a new
 * B (the demo has no password to find an account again), with a scope of
 * its own (`shopper-b:<session>`), so a B of another tab never resumes
 * this B's payments with its own token.
 */
export const SHOPPERS = {
  a: { name: "Shopper A" },
  b: { name: "Shopper B" },
};
const SHOPPER_KEY = "shop:shopper";
const SESSION_B_KEY = "shop:shopper-b";

/** Shopper B's sign-in on this tab, `{ token, id }`, or null. */
const sessionB = () => {
  const kept = readJson("sessionStorage", SESSION_B_KEY);
  return typeof kept?.token === "string" && typeof kept?.id === "string" ? kept : null;
};

/** The shopper who is signed in on this tab: `b` while B's sign-in lasts, else `a`. */
export const currentShopper = () =>
  readJson("sessionStorage", SHOPPER_KEY)?.id === "b" && sessionB() ? "b" : "a";

/** Signs `id` in on this tab; B gets a new token (a new session) when it has none. */
export function rememberShopper(id) {
  if (id === "b" && !sessionB()) {
    writeJson("sessionStorage", SESSION_B_KEY, { token: "shopper-b-" + randomId() + randomId(), id: randomId() });
  }
  writeJson("sessionStorage", SHOPPER_KEY, { id });
}

/** What the shop is told about who asks: nothing for A (its cookie goes by itself), B's token. */
export function shopperHeaders(id = currentShopper()) {
  const token = id === "b" ? sessionB()?.token : null;
  return token ? { Authorization: `Bearer ${token}` } : {};
}

/** The client `scope` of shopper `id`: `""` for A, B's session's own. */
const scopeOf = (id) => (id === "b" ? `shopper-b:${sessionB()?.id ?? ""}` : "");

/** The client's options for shopper `id` (onAttempt is added by app.js). */
export const clientOptions = (id = currentShopper()) => ({
  ...CLIENT_OPTIONS,
  scope: scopeOf(id),
  // Asked before every attempt, as a page with a refreshed token would. A
  // call of B's that outlived B's sign-in stops here, unsent: without a
  // token the browser would send it with A's cookie.
  headers: () => {
    if (id === "b" && !sessionB()) throw new Error("Shopper B signed out on this tab");
    return shopperHeaders(id);
  },
});

/**
 * Where shopper `id`'s cart and reservations are kept: A's in localStorage
 * (shared by the browser's tabs, which follow each other's carts), B's in
 * the tab's sessionStorage, which ends with B's sign-in.
 */
const areaOf = (id) => (id === "b" ? "sessionStorage" : "localStorage");
const cartKey = () => (currentShopper() === "b" ? "shop:cart:b" : "shop:cart");
const reservationsKey = () => (currentShopper() === "b" ? "shop:reservations:b" : "shop:reservations");
const LOG_KEY = "shop:attempts";
const MAX_RESERVATIONS = 8;
const MAX_LOG = 60;

/** What a server offers when `GET /config` did not say: nothing extra. */
export const NO_CONFIG = Object.freeze({ chaos: false, provider: false, receipts: false });

export const state = {
  /** The wasm client of the signed-in shopper, once loaded. */
  client: null,
  /** Who is signed in: `a` or `b` (SHOPPERS). */
  shopper: currentShopper(),
  /** `GET /config`: what this server does. */
  config: NO_CONFIG,
  /** MailDev's web inbox (`?inbox=`), where receipts can be seen; or null. */
  inbox: null,
  cart: loadCart(),
  /** A payment of this cart is being sent by this tab. */
  paying: false,
  /** `"switch"` or `"sign-out"` once pressed with requests unconfirmed: the next press goes on. */
  leaving: null,
  /** `{ op, until }` once the shop said the cart's payment is being finished (409): the page asks until then. */
  finishing: null,
  /** The error of a payment the client gave up on (its request is kept). */
  stuck: null,
  /** Looking for a sealed cart's charge; `"failed"` when the shop was away. */
  checking: false,
  /** Reservations, oldest first: `{ op, result, text }`. */
  reservations: keptReservations(),
  stock: {},
  /** `{ newest, total, byDescription, loads }` once loaded: see shop.js. */
  charges: null,
  /** Why the last load of the charges failed, or null. */
  chargesError: null,
  /** Attempts sent with a key: see attempts.js. Kept for the tab's life. */
  log: readJson("sessionStorage", LOG_KEY)?.entries?.filter((e) => e && typeof e.key === "string") || [],
};

// ---------------------------------------------------------------- changes

const listeners = [];

/** Calls `listener` after every change (app.js redraws the page). */
export function onChange(listener) {
  listeners.push(listener);
}

/** Tells the page its state changed. */
export function changed() {
  for (const listener of listeners) listener();
}

// ---------------------------------------------------------------- cart

/** A new, empty, unsealed cart; `from` carries items and choices over. */
export function newCart(from = {}) {
  return {
    id: randomId(),
    items: { ...(from.items || {}) },
    sealed: false,
    key: null,
    card: CARDS[0].id,
    email: typeof from.email === "string" ? from.email : DEFAULT_EMAIL,
    receipt: null,
    failure: null,
  };
}

/** The cart this browser kept, or a new one. */
export function loadCart() {
  const kept = readJson(areaOf(currentShopper()), cartKey());
  if (!kept || typeof kept.id !== "string" || !kept.items || typeof kept.items !== "object") {
    return newCart();
  }
  return {
    ...newCart(),
    id: kept.id,
    items: kept.items,
    sealed: !!kept.sealed,
    key: typeof kept.key === "string" ? kept.key : null,
    card: CARDS.some((c) => c.id === kept.card) ? kept.card : CARDS[0].id,
    email: typeof kept.email === "string" ? kept.email : DEFAULT_EMAIL,
    receipt: kept.receipt || null,
    failure: kept.failure || null,
  };
}

/**
 * Shows `cart` from now on. Another cart than the one shown starts with
 * nothing stuck and nothing being looked up: those were the old cart's.
 */
export function setCart(cart) {
  if (cart.id !== state.cart.id) {
    state.stuck = null;
    state.checking = false;
  }
  state.cart = cart;
}

/**
 * Stores the cart, without what it no longer needs: the receipt e-mail
 * address is kept only while the cart's payment is sealed and unanswered
 * (a cart whose key was lost on this device is paid again with it), and a
 * receipt is stored without the address it went to. The page shows the
 * address for this visit from memory; storage forgets it once the payment
 * has its answer.
 */
export function saveCart() {
  const { cart } = state;
  const kept = { ...cart };
  if (!cart.sealed || cart.receipt || cart.failure) delete kept.email;
  if (cart.receipt?.charge) {
    const { receipt_email: address, ...charge } = cart.receipt.charge;
    kept.receipt = { ...cart.receipt, charge, mailed: !!(address || cart.receipt.mailed) };
  }
  writeJson(areaOf(currentShopper()), cartKey(), kept);
}

/**
 * Forgets on this browser the cart and reservations of the shopper signed
 * in on this tab, and B's sign-in (token included) when that is B. The
 * client's records are the client's: `client.clear()` (app.js).
 */
export function forgetShopper() {
  const id = currentShopper();
  removeItem(areaOf(id), cartKey());
  removeItem(areaOf(id), reservationsKey());
  if (id === "b") removeItem("sessionStorage", SESSION_B_KEY);
  removeItem("sessionStorage", SHOPPER_KEY);
}
/** Whether a storage event was about the cart. */
export const isCartKey = (key) => key === cartKey();

/** The cart's operation: one key for its whole life. */
export const checkoutOp = (cart = state.cart) => `checkout:${cart.id}`;
/** The description its charge carries, by which the page finds it. */
export const cartDescription = (cart = state.cart) => `cart ${cart.id}`;

export const cartTotal = (cart = state.cart) =>
  PRODUCTS.reduce((sum, p) => sum + p.price * (cart.items[p.sku] || 0), 0);

/** A cart being paid keeps its contents and choices. */
export const cartLocked = (cart = state.cart) => cart.sealed || !!cart.receipt;

/** `open`, `paying`, `checking`, `pending`, `paid` or `failed`. */
export function cartState() {
  if (state.cart.receipt) return "paid";
  if (state.paying) return "paying";
  if (state.checking) return "checking";
  if (state.stuck) return "pending";
  if (state.cart.failure) return "failed";
  return "open";
}

// ---------------------------------------------------------------- reservations

function validReservation(r) {
  return r && typeof r.op === "string" && typeof r.result === "string" && typeof r.text === "string";
}

export function saveReservations() {
  state.reservations = state.reservations.slice(-MAX_RESERVATIONS);
  writeJson(areaOf(currentShopper()), reservationsKey(), { list: state.reservations });
}

/** Reloads the reservations another tab stored. */
export function loadReservations() {
  state.reservations = keptReservations();
}

/** The reservations stored in localStorage (the valid ones). */
function keptReservations() {
  return readJson(areaOf(currentShopper()), reservationsKey())?.list?.filter(validReservation) || [];
}

export const isReservationsKey = (key) => key === reservationsKey();

// ---------------------------------------------------------------- attempt log

export function saveLog() {
  if (state.log.length > MAX_LOG) state.log.splice(0, state.log.length - MAX_LOG);
  writeJson("sessionStorage", LOG_KEY, { entries: state.log });
}
