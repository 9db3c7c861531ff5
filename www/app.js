// The demo checkout page. One operation per cart ("checkout:<cart id>"), so
// every retry, double click, reload or second tab reuses one idempotency
// key; the wasm client keeps that key in localStorage.
//
// The client resolves only with the final outcome, so the attempt log is
// written by a thin wrapper around window.fetch (the client calls the
// global fetch): it sees each attempt's key, timing, status and headers.

import init, { IdempotentClient } from "./pkg/client_wasm.js";

/** Each attempt is aborted after this long; small so the demo is quick. */
const TIMEOUT_MS = 3000;
/** Options of every client on this page. */
const CLIENT_OPTIONS = {
  timeoutMs: TIMEOUT_MS,
  // Enough attempts to outlast a server restart (scripts/demo.sh).
  maxAttempts: 8,
  backoffBaseMs: 300,
  backoffMaxMs: 4000,
};
const PRODUCTS = [
  { sku: "sku-tee", name: "Exactly-Once Tee", price: 2500, blurb: "Soft cotton, printed once." },
  { sku: "sku-mug", name: "Idempotent Mug", price: 1200, blurb: "Refill it, same mug." },
  { sku: "sku-poster", name: "Retry Poster", price: 1800, blurb: "Limited run of three." },
];
const CHAOS_LABELS = {
  "drop-after-commit": "the answer is lost after the commit",
  "crash-before-commit": "the server crashes before the commit",
  "exit-after-commit": "the server is killed after the commit",
};
const CART_KEY = "shop:cart";
const RESERVATION_KEY = "shop:reservation";
const LOG_KEY = "shop:attempts";
const MAX_LOG = 60;

const $ = (selector) => document.querySelector(selector);
const money = new Intl.NumberFormat("en-US", { style: "currency", currency: "USD" });
const clock = new Intl.DateTimeFormat("en-GB", { hour: "2-digit", minute: "2-digit", second: "2-digit" });

// ---------------------------------------------------------------- storage

function readJson(storage, key) {
  try {
    const value = JSON.parse(storage.getItem(key));
    return value && typeof value === "object" ? value : null;
  } catch {
    return null;
  }
}

function writeJson(storage, key, value) {
  try {
    storage.setItem(key, JSON.stringify(value));
  } catch {
    // Private mode or full: the page still works for this visit.
  }
}

function randomId() {
  const bytes = crypto.getRandomValues(new Uint8Array(6));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function newCart() {
  return { id: randomId(), items: {}, sealed: false, receipt: null, failure: null };
}

function loadCart() {
  const cart = readJson(localStorage, CART_KEY);
  if (!cart || typeof cart.id !== "string" || !cart.items || typeof cart.items !== "object") {
    return newCart();
  }
  return {
    id: cart.id,
    items: cart.items,
    sealed: !!cart.sealed,
    receipt: cart.receipt || null,
    failure: cart.failure || null,
  };
}

// ---------------------------------------------------------------- state

let client = null;
let cart = loadCart();
let paying = false;
let stuck = null; // the error of a payment the client gave up on
let reserving = false;
let reservation = readJson(localStorage, RESERVATION_KEY); // {op, result}
let stock = {};
let charges = null; // null until loaded
let chargeLoads = 0; // how many times the list was loaded (tests wait on it)
let chaosOn = false;
let log = readJson(sessionStorage, LOG_KEY)?.entries || [];

const checkoutOp = () => `checkout:${cart.id}`;
const saveCart = () => writeJson(localStorage, CART_KEY, cart);
const cartTotal = () =>
  PRODUCTS.reduce((sum, p) => sum + p.price * (cart.items[p.sku] || 0), 0);

function cartState() {
  if (cart.receipt) return "paid";
  if (paying) return "paying";
  if (stuck) return "pending";
  if (cart.failure) return "failed";
  return "open";
}

// ---------------------------------------------------------------- attempt log

const realFetch = window.fetch.bind(window);

function headerOf(init, name) {
  const headers = init && init.headers;
  if (!headers) return null;
  if (headers instanceof Headers) return headers.get(name);
  const found = Object.entries(headers).find(([k]) => k.toLowerCase() === name.toLowerCase());
  return found ? found[1] : null;
}

window.fetch = async function loggedFetch(input, init) {
  const key = headerOf(init, "Idempotency-Key");
  if (!key) return realFetch(input, init);
  const url = new URL(typeof input === "string" ? input : input.url, location.href);
  const entry = {
    key,
    method: (init && init.method) || "GET",
    path: url.pathname,
    chaos: headerOf(init, "X-Chaos"),
    start: Date.now(),
    end: null,
    status: "pending",
    replayed: false,
  };
  log.push(entry);
  if (log.length > MAX_LOG) log.splice(0, log.length - MAX_LOG);
  saveLog();
  renderLog();
  if (paying && entry.path === "/charges") {
    const n = attemptNumber(log.length - 1);
    if (n > 1) announce(`Attempt ${n}: retrying with the same key…`);
  }
  try {
    const response = await realFetch(input, init);
    entry.status = response.status;
    entry.replayed = response.headers.get("Idempotent-Replayed") === "true";
    return response;
  } catch (error) {
    entry.status = leaving
      ? "cut by reload"
      : init && init.signal && init.signal.aborted
        ? "timeout"
        : "network error";
    throw error;
  } finally {
    entry.end = Date.now();
    saveLog();
    renderLog();
  }
};

// A reload or a closed tab cuts the attempts still in flight.
let leaving = false;
window.addEventListener("beforeunload", () => (leaving = true));
window.addEventListener("pagehide", () => {
  leaving = true;
  for (const entry of log) {
    if (entry.status === "pending") {
      entry.status = "cut by reload";
      entry.end = Date.now();
    }
  }
  saveLog();
});

function saveLog() {
  writeJson(sessionStorage, LOG_KEY, { entries: log });
}

function attemptNumber(index) {
  const key = log[index].key;
  let n = 0;
  for (let i = 0; i <= index; i++) if (log[i].key === key) n++;
  return n;
}

function renderLog() {
  const body = $("#attempts tbody");
  body.replaceChildren(
    ...log.map((entry, index) => {
      const next = log.slice(index + 1).find((e) => e.key === entry.key);
      const wait = next && entry.end != null ? Math.max(0, next.start - entry.end) : null;
      const row = document.createElement("tr");
      row.dataset.key = entry.key;
      row.dataset.path = entry.path;
      row.dataset.status = String(entry.status);
      row.dataset.replayed = String(entry.replayed);
      const statusClass =
        typeof entry.status === "number"
          ? entry.status < 300 ? "ok" : entry.status < 500 ? "warn" : "bad"
          : entry.status === "pending" ? "pending" : "bad";
      const number = attemptNumber(index);
      // Chromium resends a request once by itself when a reused keep-alive
      // connection drops without an answer: the page then sees a replay on
      // its first attempt.
      const resentByBrowser = number === 1 && entry.replayed && entry.chaos === "drop-after-commit";
      const notes = [
        // Non-breaking hyphens: the value wraps as a whole, not at each "-".
        entry.chaos ? `X-Chaos: ${entry.chaos.replaceAll("-", "\u2011")}` : null,
        resentByBrowser ? "connection dropped; the browser resent it once itself" : null,
      ].filter(Boolean);
      row.append(
        cell(String(number)),
        cell(`${entry.method} ${entry.path}`, notes.join(" · ") || null),
        cell(entry.key.slice(0, 8), null, "mono", entry.key),
        cell(entry.status === "pending" ? "in flight…" : String(entry.status), null, `tag tag-${statusClass}`),
        cell(entry.replayed ? "replayed" : "no", null, entry.replayed ? "tag tag-replayed" : "muted"),
        cell(entry.end != null ? `${entry.end - entry.start} ms` : "…", null, "num"),
        cell(wait != null ? `${wait} ms` : "", null, "num"),
      );
      return row;
    }),
  );
  $("#attempts-empty").hidden = log.length > 0;
}

function cell(text, note, className, title) {
  const td = document.createElement("td");
  if (className && className.startsWith("tag")) {
    const span = document.createElement("span");
    span.className = className;
    span.textContent = text;
    td.append(span);
  } else {
    td.textContent = text;
    if (className) td.className = className;
  }
  if (title) td.title = title;
  if (note) {
    const small = document.createElement("small");
    small.className = "chaos-note";
    small.textContent = note;
    td.append(small);
  }
  return td;
}

// ---------------------------------------------------------------- messages

function announce(text) {
  const status = $("#status");
  status.textContent = "";
  // Emptied first, filled a moment later: screen readers announce a
  // repeated message too. (A timer, not requestAnimationFrame, which a
  // background tab never runs.)
  setTimeout(() => (status.textContent = text), 30);
}

function showNotice(text) {
  const notice = $("#resume-notice");
  notice.textContent = text;
  notice.hidden = false;
}

function problemText(outcome) {
  const body = outcome.body;
  if (body && typeof body === "object" && (body.detail || body.title)) return body.detail || body.title;
  return `The shop answered HTTP ${outcome.status}.`;
}

// ---------------------------------------------------------------- server data

async function getJson(path) {
  const response = await realFetch(path, { headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

async function refreshStock() {
  await Promise.all(
    PRODUCTS.map(async (p) => {
      try {
        stock[p.sku] = (await getJson(`/inventory/${p.sku}`)).available;
      } catch {
        // Keep the last known value; the server may be restarting.
      }
    }),
  );
  renderProducts();
  renderReservation();
}

async function refreshCharges() {
  try {
    charges = (await getJson("/charges?limit=50")).data;
  } catch {
    return; // keep the last list while the server is away
  }
  chargeLoads += 1;
  renderCharges();
}

// ---------------------------------------------------------------- cart

function changeQuantity(sku, delta) {
  if (cart.sealed || cart.receipt) return;
  const next = Math.max(0, Math.min(10, (cart.items[sku] || 0) + delta));
  if (next === 0) delete cart.items[sku];
  else cart.items[sku] = next;
  saveCart();
  render();
}

function chargeBody() {
  return { amount: cartTotal(), currency: "usd", description: `cart ${cart.id}` };
}

/** The chaos picked for the next payment, reset to "nothing" once taken. */
function takeChaos() {
  if (!chaosOn) return "";
  const picked = document.querySelector('input[name="chaos"]:checked');
  const value = picked ? picked.value : "";
  const none = document.querySelector('input[name="chaos"][value=""]');
  if (none) none.checked = true;
  return value;
}

function chaosLabel(value) {
  if (value.startsWith("delay-after-commit=")) {
    return `the answer is delayed ${value.split("=")[1]} ms, past the ${TIMEOUT_MS} ms timeout`;
  }
  return CHAOS_LABELS[value] || value;
}

async function pay() {
  // Disabled first, synchronously: a second click finds the button off.
  if (paying || cart.receipt || cartTotal() === 0) return;
  paying = true;
  stuck = null;
  cart.failure = null;
  cart.sealed = true;
  saveCart();
  render();
  const op = checkoutOp();
  const chaos = takeChaos();
  announce(chaos ? `Paying… (chaos: ${chaosLabel(chaos)})` : "Paying…");
  try {
    settle(await sendPayment(op, chaos), op);
  } catch (error) {
    giveUp(error);
  } finally {
    paying = false;
    render();
    refreshCharges();
  }
}

async function sendPayment(op, chaos) {
  if (!chaos) return client.post("/charges", chargeBody(), op);
  if (chaos === "crash-before-commit") {
    // Every retry resends X-Chaos, and a crash before commit happens again
    // on each run: one attempt with chaos, then the stored request again
    // (same key, same body) without it.
    const once = new IdempotentClient({ ...CLIENT_OPTIONS, maxAttempts: 1, headers: { "X-Chaos": chaos } });
    try {
      return await once.post("/charges", chargeBody(), op);
    } catch {
      showNotice("The server crashed before committing: nothing was charged. Resending the stored request with the same key…");
      announce("Crashed before commit; resending with the same key…");
      return client.resume(op);
    }
  }
  // After a commit the retries are replays, so chaos does not act again.
  const chaotic = new IdempotentClient({ ...CLIENT_OPTIONS, headers: { "X-Chaos": chaos } });
  return chaotic.post("/charges", chargeBody(), op);
}

function settle(outcome, op) {
  // Another tab may have started a new order meanwhile: this answer belongs
  // to the cart it was sent for, whose receipt that tab already shows.
  if (op !== checkoutOp()) return;
  if (outcome.ok) {
    // Requests sent with this key: this call's, or more when this tab's log
    // saw earlier ones (a reload, a call the client gave up on).
    const logged = log.filter((e) => e.key === outcome.key && e.path === "/charges").length;
    cart.receipt = {
      charge: outcome.body,
      replayed: outcome.replayed,
      attempts: Math.max(outcome.attempts, logged),
      key: outcome.key,
    };
    stuck = null;
    saveCart();
    const charge = outcome.body || {};
    announce(
      `Paid: charge ${charge.id} for ${money.format((charge.amount || 0) / 100)}` +
        (outcome.replayed ? " (replayed: the stored answer, still one charge)." : "."),
    );
  } else {
    cart.failure = { status: outcome.status, message: problemText(outcome) };
    saveCart();
    announce(`Payment refused: ${cart.failure.message}`);
  }
  render();
}

function giveUp(error) {
  stuck = error;
  announce(
    "We could not confirm your payment yet. It is saved with its key: " +
      "Try again resends the same request, so you cannot be charged twice.",
  );
  console.warn(error);
}

async function resumeCheckout() {
  paying = true;
  render();
  showNotice("Resuming your payment: sending the stored request again with the same key…");
  announce("Resuming your payment…");
  try {
    const op = checkoutOp();
    const outcome = await client.resume(op);
    settle(outcome, op);
    if (outcome.ok) {
      showNotice(
        outcome.replayed
          ? "Resumed your payment: it had already gone through, so the shop sent its stored answer. Here is your receipt."
          : "Resumed your payment: it went through. Here is your receipt.",
      );
    }
  } catch (error) {
    giveUp(error);
  } finally {
    paying = false;
    render();
    refreshCharges();
  }
}

function newOrder() {
  try {
    client.release(checkoutOp());
  } catch (error) {
    console.warn(error);
  }
  cart = newCart();
  stuck = null;
  saveCart();
  $("#resume-notice").hidden = true;
  render();
  announce("New order started: a new cart with a new key.");
  const first = document.querySelector("[data-add]");
  if (first) first.focus();
}

// ---------------------------------------------------------------- reservation

async function reserve() {
  if (reserving) return;
  reserving = true;
  const op = `reserve:${randomId()}`;
  reservation = { op, result: null };
  writeJson(localStorage, RESERVATION_KEY, reservation);
  renderReservation();
  setReserveResult("pending", "Reserving a poster…");
  await sendReservation(op, () => client.post("/reservations", { item_id: "sku-poster", quantity: 1 }, op));
}

async function sendReservation(op, send) {
  reserving = true;
  renderReservation();
  try {
    const outcome = await send();
    let result;
    if (outcome.ok) {
      result = { kind: "reserved", text: `Reserved! Your poster is held (${outcome.body.id}).` };
    } else if (outcome.status === 409 && String(outcome.body?.type).endsWith("/insufficient-inventory")) {
      result = { kind: "sold-out", text: "Sold out: another buyer got the last poster. Nothing was reserved." };
    } else {
      result = { kind: "error", text: problemText(outcome) };
    }
    reservation = { op, result };
    client.release(op); // answered: the next click is a new reservation
  } catch (error) {
    console.warn(error);
    reservation = { op, result: { kind: "error", text: "Could not reach the shop; the reservation is saved and resumes on reload." } };
  } finally {
    reserving = false;
    writeJson(localStorage, RESERVATION_KEY, reservation);
    renderReservation();
    refreshStock();
  }
}

function setReserveResult(kind, text) {
  const out = $("#reserve-result");
  out.dataset.result = kind;
  out.textContent = text;
}

// ---------------------------------------------------------------- rendering

const ICONS = {
  "sku-tee": '<path d="M22 14l10-6h8c0 4 4 7 8 7s8-3 8-7h8l10 6-6 12-8-3v33H36V23l-8 3z"/>',
  "sku-mug": '<path d="M22 18h34v34a8 8 0 0 1-8 8H30a8 8 0 0 1-8-8zM56 26h6a8 8 0 0 1 0 16h-6v-6h6a2 2 0 0 0 0-4h-6z"/>',
  "sku-poster": '<path d="M20 10h40v52H20zM26 16v28h28V16zm4 22l8-10 6 7 4-4 6 7z"/>',
};

function renderProducts() {
  const list = $("#products");
  if (!list.children.length) {
    for (const p of PRODUCTS) {
      const li = document.createElement("li");
      li.className = `product product-${p.sku}`;
      li.innerHTML = `
        <svg class="art" viewBox="0 0 80 72" aria-hidden="true">${ICONS[p.sku]}</svg>
        <h3></h3>
        <p class="blurb"></p>
        <p class="meta"><span class="price"></span><span class="stock"></span></p>
        <button type="button" class="secondary" data-add="${p.sku}"></button>`;
      li.querySelector("h3").textContent = p.name;
      li.querySelector(".blurb").textContent = p.blurb;
      li.querySelector(".price").textContent = money.format(p.price / 100);
      const button = li.querySelector("button");
      button.textContent = "Add to cart";
      button.setAttribute("aria-label", `Add ${p.name} to the cart`);
      button.addEventListener("click", () => changeQuantity(p.sku, 1));
      list.append(li);
    }
  }
  const locked = cart.sealed || !!cart.receipt;
  for (const p of PRODUCTS) {
    const li = list.querySelector(`.product-${p.sku}`);
    const left = stock[p.sku];
    const stockText = li.querySelector(".stock");
    stockText.textContent = left == null ? "" : left === 0 ? "Sold out" : `${left} in stock`;
    stockText.classList.toggle("out", left === 0);
    const button = li.querySelector("button");
    button.disabled = locked || (cart.items[p.sku] || 0) >= 10;
  }
}

function renderCart() {
  const section = $("#cart");
  const state = cartState();
  section.dataset.state = state;
  $("#cart-id").textContent = `#${cart.id}`;
  const locked = cart.sealed || !!cart.receipt;
  const lines = PRODUCTS.filter((p) => cart.items[p.sku] > 0);
  $("#cart-empty").hidden = lines.length > 0;
  $("#cart-locked").hidden = !locked || !!cart.receipt || lines.length === 0;
  $("#cart-lines").replaceChildren(
    ...lines.map((p) => {
      const qty = cart.items[p.sku];
      const li = document.createElement("li");
      li.dataset.sku = p.sku;
      li.innerHTML = `
        <span class="line-name"></span>
        <span class="stepper">
          <button type="button" class="icon-button" data-step="-1">−</button>
          <span class="qty"></span>
          <button type="button" class="icon-button" data-step="1">+</button>
        </span>
        <span class="line-total"></span>`;
      li.querySelector(".line-name").textContent = p.name;
      li.querySelector(".qty").textContent = String(qty);
      li.querySelector(".qty").setAttribute("aria-label", `${qty} × ${p.name}`);
      li.querySelector(".line-total").textContent = money.format((p.price * qty) / 100);
      for (const button of li.querySelectorAll("[data-step]")) {
        const step = Number(button.dataset.step);
        button.setAttribute("aria-label", `${step > 0 ? "One more" : "One less"} ${p.name}`);
        button.hidden = locked; // a cart being paid keeps its contents
        button.addEventListener("click", () => changeQuantity(p.sku, step));
      }
      if (locked) li.querySelector(".qty").textContent = `× ${qty}`;
      return li;
    }),
  );
  const total = cartTotal();
  $("#total").textContent = money.format(total / 100);

  const pay = $("#pay");
  pay.disabled = paying || total === 0 || !client;
  pay.setAttribute("aria-busy", String(paying));
  pay.textContent = paying
    ? "Paying…"
    : stuck
      ? `Try again (${money.format(total / 100)})`
      : total > 0
        ? `Pay ${money.format(total / 100)}`
        : "Pay";

  const receipt = $("#receipt");
  receipt.hidden = !cart.receipt;
  if (cart.receipt) {
    const r = cart.receipt;
    const charge = r.charge || {};
    receipt.dataset.chargeId = charge.id || "";
    receipt.dataset.key = r.key;
    receipt.dataset.replayed = String(!!r.replayed);
    $("#receipt-charge").textContent = charge.id || "";
    $("#receipt-amount").textContent = money.format((charge.amount || 0) / 100);
    $("#receipt-key").textContent = r.key;
    $("#receipt-attempts").textContent = String(r.attempts);
    $("#receipt-replayed").hidden = !r.replayed;
  }
  const failed = !cart.receipt && !!cart.failure;
  pay.hidden = !!cart.receipt || failed;
  $("#failure").hidden = !failed;
  $("#failure").textContent = failed ? `Payment refused: ${cart.failure.message}` : "";
  $("#new-order").hidden = !cart.receipt && !failed;
}

function renderCharges() {
  const list = $("#charges");
  if (!charges) return;
  const mine = charges.filter((c) => c.description === `cart ${cart.id}`);
  list.dataset.loads = String(chargeLoads);
  list.replaceChildren(
    ...charges.map((c) => {
      const li = document.createElement("li");
      li.dataset.chargeId = c.id;
      li.dataset.description = c.description || "";
      const thisCart = c.description === `cart ${cart.id}`;
      if (thisCart) li.classList.add("this-cart");
      li.innerHTML = `<span class="mono charge-id"></span><span class="desc"></span><span class="amount"></span><time></time>`;
      li.querySelector(".charge-id").textContent = c.id;
      li.querySelector(".desc").textContent = (c.description || "") + (thisCart ? " (this cart)" : "");
      li.querySelector(".amount").textContent = money.format(c.amount / 100);
      const time = li.querySelector("time");
      const created = new Date(c.created * 1000);
      time.dateTime = created.toISOString();
      time.textContent = clock.format(created);
      return li;
    }),
  );
  const total = charges.length;
  $("#charges-summary").textContent =
    total === 0
      ? "No charges yet."
      : `${total} ${total === 1 ? "charge" : "charges"} in total; ${mine.length} for this cart.`;
}

function renderReservation() {
  const left = stock["sku-poster"];
  $("#poster-stock").textContent = left == null ? "…" : String(left);
  const button = $("#reserve");
  button.disabled = reserving || !client;
  button.setAttribute("aria-busy", String(reserving));
  button.textContent = reserving ? "Reserving…" : reservation?.result ? "Reserve another poster" : "Reserve a poster";
  if (!reserving && reservation?.result) setReserveResult(reservation.result.kind, reservation.result.text);
}

function render() {
  renderProducts();
  renderCart();
  renderCharges();
  renderReservation();
}

// ---------------------------------------------------------------- start

async function start() {
  renderLog();
  render();
  try {
    await init();
    client = new IdempotentClient(CLIENT_OPTIONS);
  } catch (error) {
    const banner = $("#boot-error");
    banner.textContent = `The payment client failed to load: ${error}. Build it with scripts/build-wasm.sh.`;
    banner.hidden = false;
    throw error;
  }

  $("#pay").addEventListener("click", pay);
  $("#new-order").addEventListener("click", newOrder);
  $("#reserve").addEventListener("click", reserve);
  $("#refresh-charges").addEventListener("click", refreshCharges);
  $("#clear-log").addEventListener("click", () => {
    log = log.filter((e) => e.status === "pending");
    saveLog();
    renderLog();
  });
  // Another tab changed the cart (a payment, a receipt, a new order).
  window.addEventListener("storage", (event) => {
    if (event.key === CART_KEY) {
      const next = loadCart();
      if (next.id !== cart.id) stuck = null;
      cart = next;
      render();
      refreshCharges();
    } else if (event.key === RESERVATION_KEY && !reserving) {
      reservation = readJson(localStorage, RESERVATION_KEY);
      renderReservation();
    }
  });

  try {
    chaosOn = !!(await getJson("/config")).chaos;
  } catch {
    chaosOn = false;
  }
  $("#chaos").hidden = !chaosOn;
  const mode = $("#mode");
  mode.hidden = false;
  mode.textContent = chaosOn ? "Chaos mode on" : "Chaos mode off";
  mode.classList.toggle("pill-warn", chaosOn);

  render();
  await Promise.all([refreshStock(), refreshCharges()]);

  // What a previous visit left in flight: resume it, same key, same body.
  const pending = client.pendingOperations();
  if (pending.includes(checkoutOp()) && !cart.receipt) {
    cart.sealed = true;
    saveCart();
    resumeCheckout();
  }
  for (const op of pending) {
    if (op.startsWith("reserve:")) {
      setReserveResult("pending", "Resuming your reservation…");
      sendReservation(op, () => client.resume(op));
    }
  }
  render();
  document.documentElement.dataset.ready = "true";
}

start();
