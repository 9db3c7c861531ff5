// The page's own storage, guarded like the client's: a shopper may switch
// site storage off. Chromium then throws a SecurityError on the mere
// access of `window.localStorage`; Firefox answers null; a full or private
// store throws on writes. Reads then give null and writes are dropped: the
// page keeps its state in memory for this visit.

/** `window.localStorage` or `window.sessionStorage`, or null. */
function area(name) {
  try {
    return window[name] || null;
  } catch {
    return null;
  }
}

/** The object stored under `key` in `name`, or null. */
export function readJson(name, key) {
  try {
    const value = JSON.parse(area(name)?.getItem(key) ?? "null");
    return value && typeof value === "object" ? value : null;
  } catch {
    return null;
  }
}

/** Stores `value` under `key` in `name`, if the browser lets the page. */
export function writeJson(name, key, value) {
  try {
    area(name)?.setItem(key, JSON.stringify(value));
  } catch {
    // Disabled or full: the page still works for this visit.
  }
}

/** Removes `key` from `name`, if the browser lets the page. */
export function removeItem(name, key) {
  try {
    area(name)?.removeItem(key);
  } catch {
    // Disabled: nothing was kept there.
  }
}

/** A short random id (12 hex digits). */
export function randomId() {
  const bytes = crypto.getRandomValues(new Uint8Array(6));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
