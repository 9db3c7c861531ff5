// The operator panel, in chaos mode only (the server answers
// `GET /operations` only with --chaos): every shopper's unfinished
// operations as `server operations list` shows them, every second, so a
// person replaying the failures watches the completer pick them up and
// sees one that needs attention.

import * as hooks from "./hooks.js";
import { $ } from "./view.js";

const EVERY_MS = 1000;
let loads = 0;

/** Shows the panel and keeps it fresh while the page is visible. */
export function start() {
  $("#operator").hidden = false;
  refresh();
  setInterval(refresh, EVERY_MS);
}

async function refresh() {
  if (document.hidden) return;
  let list;
  try {
    const response = await fetch("/operations", { headers: { Accept: "application/json" } });
    if (!response.ok) return;
    list = await response.json();
  } catch {
    return; // the server is away (a chaos kill): the last list stays
  }
  if (!Array.isArray(list)) return;
  loads += 1;
  draw(list);
}

function draw(list) {
  const table = $("#operations");
  table.querySelector("tbody").replaceChildren(...list.map(row));
  table.hidden = list.length === 0;
  $("#operations-empty").hidden = list.length > 0;
  hooks.operationsLoaded(table, list.length, loads);
}

function row(op) {
  const tr = document.createElement("tr");
  const cells = [
    [op.op, ""],
    [op.state, ""],
    [op.recovery_point || "", ""],
    [String(op.attempts ?? 0), "num"],
    [`${Math.round(op.age_seconds ?? 0)} s`, "num"],
    [op.attention || op.last_error || "", ""],
  ];
  for (const [text, className] of cells) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    tr.append(td);
  }
  tr.classList.toggle("attention", op.state === "needs-attention");
  hooks.operation(tr, op);
  return tr;
}
