// The page's reads of the shop, none of which needs a key: what the server
// does (`GET /config`), the stock, and the shopper's charges, counted
// whole by following `has_more`.

import { changed, NO_CONFIG, PRODUCTS, shopperHeaders, state } from "./state.js";

/** How many charges the list shows (the newest). */
const LISTED = 50;

/** The problem type's last segment (`card-declined`, …), or null. */
export function problemType(outcome) {
  const type = outcome.body && typeof outcome.body === "object" ? outcome.body.type : null;
  return typeof type === "string" ? type.split("/").pop() : null;
}

/** What a refusal says to a shopper. */
export function problemText(outcome) {
  const body = outcome.body;
  if (body && typeof body === "object" && (body.detail || body.title)) return body.detail || body.title;
  return `The shop answered HTTP ${outcome.status}.`;
}

export async function getJson(path) {
  // The signed-in shopper's charges: A by its cookie, B by its token.
  const response = await fetch(path, { headers: { Accept: "application/json", ...shopperHeaders() } });
  if (!response.ok) throw new Error(`GET ${path}: HTTP ${response.status}`);
  return response.json();
}

/** `GET /config`; a server without it is a plain one. */
export async function loadConfig() {
  try {
    const config = await getJson("/config");
    state.config = { chaos: !!config.chaos, provider: !!config.provider, receipts: !!config.receipts };
  } catch {
    state.config = NO_CONFIG;
  }
}

export async function refreshStock() {
  await Promise.all(
    PRODUCTS.map(async (p) => {
      try {
        state.stock[p.sku] = (await getJson(`/inventory/${p.sku}`)).available;
      } catch {
        // Keep the last number while the server is away.
      }
    }),
  );
  changed();
}

/** Every page of the shopper's charges, newest first. */
async function* chargePages(first = LISTED) {
  let page = await getJson(`/charges?limit=${first}`);
  yield page.data;
  while (page.has_more && page.data.length > 0) {
    const after = page.data[page.data.length - 1].id;
    page = await getJson(`/charges?limit=1000&starting_after=${encodeURIComponent(after)}`);
    yield page.data;
  }
}

let loads = 0;

/** Reloads the list: the newest charges, and every charge counted. */
export async function refreshCharges() {
  try {
    let newest = null;
    let total = 0;
    const byDescription = new Map();
    for await (const data of chargePages()) {
      newest ??= data;
      total += data.length;
      for (const c of data) byDescription.set(c.description, (byDescription.get(c.description) || 0) + 1);
    }
    loads += 1;
    state.charges = { newest, total, byDescription, loads };
    state.chargesError = null;
  } catch (error) {
    state.chargesError = error.message; // the last list stays while the server is away
  }
  changed();
}

/** The charge whose description is `description`, or null. Throws when the shop cannot be asked. */
export async function findCharge(description) {
  for await (const data of chargePages(1000)) {
    const found = data.find((c) => c.description === description);
    if (found) return found;
  }
  return null;
}
