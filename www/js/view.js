// Drawing the state (state.js) into the page. Elements are updated in
// place, never rebuilt under the shopper's hands, so the keyboard focus
// stays where it was (on + and −, on a card). Nothing here changes state.

import * as hooks from "./hooks.js";
import {
  CARDS, FINISH_BUDGET_MS, PRODUCTS, cartDescription, cartLocked, cartState, cartTotal, state,
} from "./state.js";

export const $ = (selector) => document.querySelector(selector);
const dollars = new Intl.NumberFormat("en-US", { style: "currency", currency: "USD" });
export const money = (minor) => dollars.format(minor / 100);
const clock = new Intl.DateTimeFormat("en-GB", { hour: "2-digit", minute: "2-digit", second: "2-digit" });

// ---------------------------------------------------------------- messages

/** Says `text` in the status line (announced by screen readers, repeats too). */
export function announce(text) {
  const status = $("#status");
  status.textContent = "";
  // Emptied first, filled a moment later: screen readers announce a
  // repeated message too. (A timer, not requestAnimationFrame, which a
  // background tab never runs.)
  setTimeout(() => (status.textContent = text), 30);
}

/** Shows the violet notice above Pay. */
export function showNotice(text) {
  const notice = $("#resume-notice");
  notice.textContent = text;
  notice.hidden = false;
}

export function hideNotice() {
  $("#resume-notice").hidden = true;
}

// ---------------------------------------------------------------- catalogue

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
        <button type="button" class="secondary" data-add="${p.sku}">Add to cart</button>`;
      li.querySelector("h3").textContent = p.name;
      li.querySelector(".blurb").textContent = p.blurb;
      li.querySelector(".price").textContent = money(p.price);
      // The accessible name starts with the visible text (WCAG 2.5.3).
      li.querySelector("button").setAttribute("aria-label", `Add to cart: ${p.name}`);
      list.append(li);
    }
  }
  for (const p of PRODUCTS) {
    const li = list.querySelector(`.product-${p.sku}`);
    const left = state.stock[p.sku];
    const stock = li.querySelector(".stock");
    stock.textContent = left == null ? "" : left === 0 ? "Sold out" : `${left} in stock`;
    stock.classList.toggle("out", left === 0);
    li.querySelector("button").disabled = cartLocked() || (state.cart.items[p.sku] || 0) >= 10;
  }
}

// ---------------------------------------------------------------- cart

function cartLine(p) {
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
  for (const button of li.querySelectorAll("[data-step]")) {
    const more = Number(button.dataset.step) > 0;
    button.setAttribute("aria-label", `${more ? "One more" : "One less"} ${p.name}`);
  }
  return li;
}

function renderCartLines(locked) {
  const list = $("#cart-lines");
  const lines = PRODUCTS.filter((p) => state.cart.items[p.sku] > 0);
  for (const li of [...list.children]) {
    if (!lines.some((p) => p.sku === li.dataset.sku)) li.remove();
  }
  lines.forEach((p, index) => {
    const li = list.querySelector(`li[data-sku="${p.sku}"]`) || cartLine(p);
    if (list.children[index] !== li) list.insertBefore(li, list.children[index] || null);
    const qty = state.cart.items[p.sku];
    const shown = li.querySelector(".qty");
    shown.textContent = locked ? `× ${qty}` : String(qty);
    shown.setAttribute("aria-label", `${qty} × ${p.name}`);
    li.querySelector(".line-total").textContent = money(p.price * qty);
    for (const button of li.querySelectorAll("[data-step]")) button.hidden = locked; // a cart being paid keeps its contents
  });
  $("#cart-empty").hidden = lines.length > 0;
  return lines.length;
}

function renderPaymentForm(locked) {
  const { provider, receipts } = state.config;
  $("#payment").hidden = !provider && !receipts;
  const cards = $("#card-choice");
  cards.hidden = !provider;
  if (provider && !cards.querySelector("input")) {
    for (const card of CARDS) {
      const label = document.createElement("label");
      label.innerHTML = `<input type="radio" name="card"> <span></span> <code></code>`;
      label.querySelector("input").value = card.id;
      label.querySelector("span").textContent = card.label;
      label.querySelector("code").textContent = card.id;
      cards.append(label);
    }
  }
  for (const input of cards.querySelectorAll("input")) {
    input.checked = input.value === state.cart.card;
    input.disabled = locked;
  }
  $("#email-field").hidden = !receipts;
  const email = $("#receipt-email");
  if (document.activeElement !== email) email.value = state.cart.email;
  email.disabled = locked;
}

function renderPayButton(total) {
  const pay = $("#pay");
  const { paying, checking, stuck } = state;
  pay.disabled = paying || checking === true || total === 0 || !state.client;
  pay.setAttribute("aria-busy", String(paying || checking === true));
  pay.textContent = paying
    ? "Paying…"
    : checking === true
      ? "Checking…"
      : checking === "failed"
        ? "Check again"
        : stuck
          ? `Try again (${money(total)})`
          : total > 0 ? `Pay ${money(total)}` : "Pay";
  return pay;
}

/** Where the e-mailed receipt is: `none`, `queued` or `delivered`. */
export function mailState(receipt) {
  if (!receipt?.charge?.receipt_email && !receipt?.mailed) return "none";
  return receipt.delivered ? "delivered" : "queued";
}

function renderReceipt() {
  const section = $("#receipt");
  const r = state.cart.receipt;
  section.hidden = !r;
  if (!r) return;
  const charge = r.charge || {};
  const mail = mailState(r);
  hooks.receipt(section, r, mail);
  $("#receipt-charge").textContent = charge.id || "";
  $("#receipt-amount").textContent = money(charge.amount || 0);
  $("#receipt-key").textContent = r.key || "(expired on this device)";
  $("#receipt-attempts").textContent = String(r.attempts);
  $("#receipt-provider-row").hidden = !charge.provider_charge;
  $("#receipt-provider").textContent = charge.provider_charge || "";
  $("#receipt-mail-row").hidden = mail === "none";
  // The address is shown from memory on the visit that paid; storage does
  // not keep it (state.js saveCart), so a later visit says less.
  const to = charge.receipt_email || "the address you gave (not kept on this device)";
  $("#receipt-mail").textContent = mail === "delivered" ? `delivered to ${to}` : `queued for ${to}`;
  const link = $("#inbox-link");
  link.hidden = mail === "none" || !state.inbox;
  if (state.inbox) link.href = state.inbox;
  $("#receipt-replayed").hidden = !r.replayed;
  $("#receipt-recovered").hidden = !r.recovered;
}

function renderCart() {
  const { cart } = state;
  const locked = cartLocked();
  hooks.cartState($("#cart"), cartState());
  $("#cart-id").textContent = `#${cart.id}`;
  const lines = renderCartLines(locked);
  $("#cart-locked").hidden = !cart.sealed || !!cart.receipt || lines === 0;
  const total = cartTotal();
  $("#total").textContent = money(total);
  renderPaymentForm(locked);
  const pay = renderPayButton(total);
  renderReceipt();
  const failed = !cart.receipt && !!cart.failure;
  const declined = failed && cart.failure.kind === "declined";
  pay.hidden = !!cart.receipt || failed;
  $("#failure").hidden = !failed;
  $("#failure").textContent = !failed
    ? ""
    : declined
      ? `Your card was declined: nothing was charged. ${cart.failure.message}`
      : `Payment refused: ${cart.failure.message}`;
  $("#pay-again").hidden = !declined;
  renderFinishing();
  $("#new-order").hidden = !cart.receipt && !failed;
}

/** While the shop says the payment is being finished (409): what the page waits for, and until when. */
function renderFinishing() {
  const { finishing } = state;
  const shown = !!finishing && state.paying && !state.cart.receipt;
  const line = $("#finishing");
  line.hidden = !shown;
  if (!shown) return;
  line.textContent =
    "The shop is still finishing this payment: a stopped server's hold on it (its lease) runs out, then the " +
    "restarted server finishes it, by its completer or by this page's next request. The page keeps asking " +
    `with the same key until ${clock.format(new Date(finishing.until))} ` +
    `(${FINISH_BUDGET_MS / 1000} s, the server's default lease plus one completer pass); nothing is charged twice.`;
}

// ---------------------------------------------------------------- charges

function renderCharges() {
  const charges = state.charges;
  const list = $("#charges");
  if (!charges) {
    if (state.chargesError) $("#charges-summary").textContent = `Your charges could not be loaded (${state.chargesError}).`;
    return;
  }
  hooks.chargesLoaded(list, charges.loads);
  const mine = cartDescription();
  list.replaceChildren(
    ...charges.newest.map((c) => {
      const li = document.createElement("li");
      hooks.charge(li, c);
      const thisCart = c.description === mine;
      li.classList.toggle("this-cart", thisCart);
      li.innerHTML = `<span class="mono charge-id"></span><span class="desc"></span><span class="amount"></span><time></time>`;
      li.querySelector(".charge-id").textContent = c.id;
      const status = c.status && c.status !== "succeeded" ? ` · ${c.status}` : "";
      li.querySelector(".desc").textContent = (c.description || "") + (thisCart ? " (this cart)" : "") + status;
      li.querySelector(".amount").textContent = money(c.amount);
      const time = li.querySelector("time");
      const created = new Date(c.created * 1000);
      time.dateTime = created.toISOString();
      time.textContent = clock.format(created);
      return li;
    }),
  );
  const { total } = charges;
  const forCart = charges.byDescription.get(mine) || 0;
  $("#charges-summary").textContent =
    total === 0
      ? "No charges yet."
      : `${total} ${total === 1 ? "charge" : "charges"} in total; ${forCart} for this cart.` +
        (charges.newest.length < total ? ` The newest ${charges.newest.length} are listed.` : "");
}

// ---------------------------------------------------------------- reservations

function renderReservations() {
  const left = state.stock["sku-poster"];
  $("#poster-stock").textContent = left == null ? "…" : String(left);
  const sending = state.reservations.some((r) => r.result === "sending");
  const unconfirmed = state.reservations.some((r) => r.result === "unconfirmed");
  const button = $("#reserve");
  button.disabled = sending || !state.client;
  button.setAttribute("aria-busy", String(sending));
  button.textContent = sending
    ? "Reserving…"
    : unconfirmed ? "Try again" : state.reservations.length ? "Reserve another poster" : "Reserve a poster";
  const list = $("#reservations");
  list.replaceChildren(
    ...state.reservations.map((r) => {
      const li = document.createElement("li");
      li.className = `reservation result-${r.result}`;
      hooks.reservation(li, r);
      li.textContent = r.text;
      return li;
    }),
  );
}

// ---------------------------------------------------------------- the page

function renderServer() {
  const { chaos, provider } = state.config;
  $("#chaos").hidden = !chaos;
  for (const option of document.querySelectorAll("#chaos [data-needs='provider']")) option.hidden = !provider;
  const mode = $("#mode");
  mode.hidden = !state.client;
  mode.textContent = chaos ? "Chaos mode on" : "Chaos mode off";
  mode.classList.toggle("pill-warn", chaos);
  $("#provider-mode").hidden = !provider;
  const inbox = $("#inbox-pill");
  inbox.hidden = !state.inbox;
  if (state.inbox) inbox.href = state.inbox;
}

export function render() {
  renderServer();
  renderProducts();
  renderCart();
  renderCharges();
  renderReservations();
}
