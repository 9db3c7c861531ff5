// The attempt log: every request the client sends with a key, written from
// the client's `onAttempt` events (status, latency, the wait before the
// next one). A call's first attempt gets its row when the page starts the
// call, so a request in flight shows; each event fills its row and, when a
// retry follows, opens the next one. The log lives in the tab's
// sessionStorage (state.js), so it survives a reload.

import * as hooks from "./hooks.js";
import { saveLog, state } from "./state.js";

const ERRORS = { timeout: "timeout", network: "network error", redirect: "redirect", aborted: "aborted" };

/** The row of each operation's attempt in flight. */
const open = new Map();
/** The page is being left: what is in flight now is cut by the reload. */
let leaving = false;

/** The path an operation's requests go to. */
const pathOf = (op) => (op.startsWith("reserve:") ? "/reservations" : "/charges");

/** A call of `op` is about to send: its first row, in flight. */
export function sending(op, chaos = null) {
  if (leaving) return; // the page is going: nothing it starts now is sent
  let key = "";
  try {
    key = state.client.keyFor(op); // the event corrects it if another tab's key wins
  } catch {
    // A record of another client version: the call is refused, settled() drops the row.
  }
  const entry = { key, method: "POST", path: pathOf(op), chaos, start: Date.now(), end: null, status: "pending", replayed: false, wait: null };
  state.log.push(entry);
  open.set(op, entry);
  saveLog();
  render();
}

/** The client's `onAttempt`: fills the attempt's row; opens the next one if a retry follows. */
export function attempted(event) {
  const now = Date.now();
  const entry = open.get(event.operation);
  if (!entry) return; // not a call of this page (or of a page being left)
  open.delete(event.operation);
  Object.assign(entry, {
    key: event.key,
    start: now - event.latencyMs,
    end: now,
    status: leaving ? "cut by reload" : event.status ?? ERRORS[event.error] ?? "network error",
    replayed: event.replayed,
    wait: event.retryInMs,
  });
  if (event.retryInMs != null && !leaving) {
    const next = { ...entry, chaos: null, start: now + event.retryInMs, end: null, status: "pending", replayed: false, wait: null };
    state.log.push(next);
    open.set(event.operation, next);
  }
  saveLog();
  render();
}

/** A call of `op` settled: a row that never got its attempt (nothing was sent) goes. */
export function settled(op) {
  const entry = open.get(op);
  if (!entry) return;
  open.delete(op);
  state.log.splice(state.log.indexOf(entry), 1);
  saveLog();
  render();
}

/** Sends `op` with `send()`, its attempts logged; `chaos` marks the first row. */
export async function logged(op, send, chaos = null) {
  sending(op, chaos);
  try {
    return await send();
  } finally {
    settled(op);
  }
}

/** How many requests the log saw with `key`. */
export const sentWith = (key) => state.log.filter((e) => e.key === key).length;

/** The number of `state.log[index]` among its key's attempts. */
function attemptNumber(index) {
  const key = state.log[index].key;
  return state.log.slice(0, index + 1).filter((e) => e.key === key).length;
}

// A reload or a closed tab cuts the attempts still in flight. (From
// beforeunload on: a request the unload aborts reports after pagehide.)
window.addEventListener("beforeunload", () => (leaving = true));
window.addEventListener("pageshow", () => (leaving = false));
window.addEventListener("pagehide", () => {
  leaving = true;
  for (const entry of open.values()) {
    entry.status = "cut by reload";
    entry.end = Date.now();
  }
  open.clear();
  saveLog();
});

export function clear() {
  state.log = state.log.filter((e) => e.status === "pending");
  saveLog();
  render();
}

export function render() {
  const body = document.querySelector("#attempts tbody");
  body.replaceChildren(
    ...state.log.map((entry, index) => {
      const row = document.createElement("tr");
      hooks.attempt(row, entry);
      const statusClass =
        typeof entry.status === "number"
          ? entry.status < 300 ? "ok" : entry.status < 500 ? "warn" : "bad"
          : entry.status === "pending" ? "pending" : "bad";
      const number = attemptNumber(index);
      // The browser resends a request once by itself when a reused keep-alive
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
        cell(entry.end != null ? `${Math.max(0, entry.end - entry.start)} ms` : "…", null, "num"),
        cell(entry.wait != null ? `${entry.wait} ms` : "", null, "num"),
      );
      return row;
    }),
  );
  document.querySelector("#attempts-empty").hidden = state.log.length > 0;
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
