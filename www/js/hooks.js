// What the end-to-end stories (tests/src/page.rs) read besides what a
// shopper sees, all of it here: `data-*` attributes with the raw values
// behind the rendered text. Nothing reads them back; the page works the
// same without this module's effects.

/** The page has started: its client is loaded and what was in flight resumed. */
export function ready() {
  document.documentElement.dataset.ready = "true";
}

/** The cart's state (see state.js `cartState`). */
export function cartState(section, value) {
  section.dataset.state = value;
}

/** The charges list and how many times it was loaded (stories wait for a reload). */
export function chargesLoaded(list, loads) {
  list.dataset.loads = String(loads);
}

/** One entry of the charges list. */
export function charge(li, c) {
  li.dataset.chargeId = c.id;
  li.dataset.description = c.description || "";
  li.dataset.status = c.status || "";
}

/** The receipt: its charge, key, whether replayed, provider charge and where the e-mail is. */
export function receipt(section, r, mail) {
  const charge = r.charge || {};
  section.dataset.chargeId = charge.id || "";
  section.dataset.key = r.key || "";
  section.dataset.replayed = String(!!r.replayed);
  section.dataset.providerCharge = charge.provider_charge || "";
  section.dataset.mail = mail;
}

/** One row of the attempt log: key, path, status and the page's clock times. */
export function attempt(row, entry) {
  row.dataset.key = entry.key;
  row.dataset.path = entry.path;
  row.dataset.status = String(entry.status);
  row.dataset.replayed = String(entry.replayed);
  row.dataset.start = String(entry.start);
  row.dataset.end = entry.end == null ? "" : String(entry.end);
}

/** One reservation's line: its operation and result (`sending`, `reserved`, …). */
export function reservation(li, r) {
  li.dataset.op = r.op;
  li.dataset.result = r.result;
}

/** The operator panel: how many operations it lists, and how many times it loaded. */
export function operationsLoaded(table, count, loads) {
  table.dataset.count = String(count);
  table.dataset.loads = String(loads);
}

/** One row of the operator panel: its op, state, recovery point, attempts and last error. */
export function operation(tr, op) {
  tr.dataset.op = op.op;
  tr.dataset.state = op.state;
  tr.dataset.point = op.recovery_point || "";
  tr.dataset.attempts = String(op.attempts ?? 0);
  tr.dataset.lastError = op.last_error || "";
}
