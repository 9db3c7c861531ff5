// Where a paid cart's e-mailed receipt is. The shop writes it to its
// outbox in the payment's own commit, so a receipt is at least "queued";
// its relay then sends it by SMTP with `Message-ID:
// <receipt.CHARGE_ID@exactly-once>`. With `?inbox=` (the demo's MailDev,
// whose API answers any origin) the page also looks for that message in
// the inbox and says "delivered" once it is there.

import { changed, saveCart, state } from "./state.js";

/** How long the page keeps looking, and how often. */
const LOOK_FOR_MS = 120000;
const EVERY_MS = 1000;

/** The charge whose receipt is being looked for. */
let watching = null;

/** `?inbox=URL` when it is an http(s) URL (never a `javascript:` link), else null. */
export function inboxFromQuery() {
  const raw = new URLSearchParams(location.search).get("inbox");
  if (!raw) return null;
  try {
    const url = new URL(raw);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
}

/** Looks for the receipt of the cart's charge in the inbox until it is there. */
export function watchReceipt() {
  const receipt = state.cart.receipt;
  const charge = receipt?.charge;
  if (!state.inbox || !(charge?.receipt_email || receipt?.mailed) || receipt.delivered || watching === charge.id) return;
  watching = charge.id;
  const wanted = `<receipt.${charge.id}@exactly-once>`;
  const api = new URL("api/email", state.inbox);
  const until = Date.now() + LOOK_FOR_MS;
  const look = async () => {
    if (state.cart.receipt?.charge?.id !== charge.id) {
      watching = null; // another cart now
      return;
    }
    try {
      const messages = await (await fetch(api)).json();
      if (Array.isArray(messages) && messages.some((m) => m?.headers?.["message-id"] === wanted)) {
        state.cart.receipt.delivered = true;
        watching = null;
        saveCart();
        changed();
        return;
      }
    } catch {
      // The inbox is away: look again.
    }
    if (Date.now() < until) setTimeout(look, EVERY_MS);
    else watching = null;
  };
  look();
}
