// Reserving the last posters: each click is its own operation
// ("reserve:<id>", released once answered), and each reservation keeps its
// own line, so several left unanswered by earlier visits resume each into
// its own outcome. While one is unconfirmed (the shop did not answer; the
// client keeps its key and request), the button sends those again instead
// of offering another: a new reservation beside one that is still being
// sent could reserve two posters.

import * as attempts from "./attempts.js";
import { problemText, problemType, refreshStock } from "./shop.js";
import { changed, saveReservations, state } from "./state.js";
import { randomId } from "./storage.js";

const ITEM = { item_id: "sku-poster", quantity: 1 };

/** Sets `op`'s line (made if it has none) to `result` and `text`. */
function show(op, result, text) {
  let line = state.reservations.find((r) => r.op === op);
  if (!line) {
    line = { op, result, text };
    state.reservations.push(line);
  }
  Object.assign(line, { result, text });
  saveReservations();
  changed();
}

/** The button: a new reservation; or, while some are unconfirmed, those again. */
export async function reserve() {
  const { client } = state;
  if (!client || state.reservations.some((r) => r.result === "sending")) return;
  const unconfirmed = state.reservations.filter((r) => r.result === "unconfirmed");
  if (unconfirmed.length > 0) {
    await Promise.all(unconfirmed.map((r) => send(r.op, () => client.resume(r.op))));
    return;
  }
  const op = `reserve:${randomId()}`;
  await send(op, () => client.post("/reservations", ITEM, op));
}

async function send(op, call) {
  resuming(op, "Reserving a poster…");
  try {
    resumed(op, await attempts.logged(op, call));
  } catch (error) {
    notResumed(op, error);
  }
}

/** `op` is being sent (again). */
export function resuming(op, text = "Resuming your reservation: sending it again with the same key…") {
  show(op, "sending", text);
}

/** `op` got its answer: reserved, sold out or refused; its key is released. */
export function resumed(op, outcome) {
  if (outcome.ok) {
    show(op, "reserved", `Reserved! Your poster is held (${outcome.body?.id}).`);
  } else if (outcome.status === 409 && problemType(outcome) === "insufficient-inventory") {
    show(op, "sold-out", "Sold out: another buyer got the last poster. Nothing was reserved.");
  } else {
    show(op, "refused", `Not reserved: ${problemText(outcome)}`);
  }
  try {
    state.client.release(op); // answered: the next click is a new reservation
  } catch (error) {
    console.warn(error);
  }
  refreshStock();
}

/** `op` got no answer: the client keeps its key and request. */
export function notResumed(op, error) {
  console.warn(error);
  if (error?.kind === "invalid") {
    show(op, "refused", `Could not be sent: ${error.message}`);
  } else {
    show(
      op,
      "unconfirmed",
      "Not confirmed yet: the shop did not answer. This reservation is kept with its key and sent " +
        "again when you press Try again or reload the page; it reserves one poster at most.",
    );
  }
  refreshStock();
}

/**
 * Lines a previous visit left without an answer whose request the client
 * no longer keeps (it expired, or storage was cleared): they can neither
 * resume nor be sent again, and must not hold the button.
 */
export function forgetLost(pending) {
  let lost = false;
  for (const line of state.reservations) {
    if ((line.result === "sending" || line.result === "unconfirmed") && !pending.includes(line.op)) {
      Object.assign(line, {
        result: "lost",
        text: "Not confirmed, and no longer kept on this device: the stock shows whether it was reserved.",
      });
      lost = true;
    }
  }
  if (lost) {
    saveReservations();
    changed();
  }
}
