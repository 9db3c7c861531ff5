//! Shared browsers: each shopper's records under a scope of their own (and a
//! prefix never reading a longer one's), `clear()` at sign-out, the key and
//! its request written as one entry before anything is sent, and
//! `persistent`.
//!
//! Written in JavaScript, as a page uses the client (the helpers the
//! files share are in `page.js`). Each test failed against the client
//! before the change it tests.

use super::page::run;
use super::*;

/// The tests of this file, in JavaScript as a page writes it: each
/// `export`ed function is one test, run by [`run`] with `page.js`'s
/// helpers in scope.
const TESTS: &str = r#"
/** Records every localStorage write, and how many had happened at the first fetch. */
function spy() {
  const writes = [];
  let atFirstFetch = null;
  const setItem = Storage.prototype.setItem;
  const fetch = window.fetch;
  Storage.prototype.setItem = function (name, value) {
    writes.push([name, value]);
    return setItem.call(this, name, value);
  };
  window.fetch = function (...args) {
    if (atFirstFetch === null) atFirstFetch = writes.length;
    return fetch.apply(this, args);
  };
  return {
    writes,
    atFirstFetch: () => atFirstFetch,
    restore() {
      Storage.prototype.setItem = setItem;
      window.fetch = fetch;
    },
  };
}

/** Fills localStorage; returns the function that empties it again. */
function fill() {
  const names = [];
  for (let size = 1 << 20; size >= 1; size >>= 1) {
    const chunk = "x".repeat(size);
    for (;;) {
      const name = "filler-" + names.length;
      try {
        localStorage.setItem(name, chunk);
      } catch {
        break;
      }
      names.push(name);
    }
  }
  return () => names.forEach((name) => localStorage.removeItem(name));
}

export async function scopes(env) {
  const s = setup(env);
  const nowhere = { baseUrl: UNREACHABLE, maxAttempts: 1 };
  const u1 = s.make({ scope: "u1", ...nowhere });
  const left = await leavePending(u1, "checkout");
  eq(u1.pendingOperations(), ["checkout"], "u1's own pending operation");

  // Another account on the same browser, with a scope that u1's is a prefix of.
  const u12 = s.make({ scope: "u12" });
  eq(u12.pendingOperations(), [], "u12 lists nothing of u1's");
  eq((await rejects(u12.resume("checkout"), "u12 resuming u1's")).kind, "invalid", "u12 resuming u1's");
  check(u12.keyFor("checkout") !== left.key, "u12 never reuses u1's key");
  const own = await u12.post("/charges", charge(200), "checkout");
  eq([own.status, own.replayed], [201, false], "u12's own checkout");
  check(own.key !== left.key, "u12 sends its own key");
  eq(u1.pendingOperations(), ["checkout"], "u1's operation is untouched");

  // Prefixes match exactly too: "P" never reads "P" + "admin:"'s records.
  const admin = s.make({ storagePrefix: s.prefix + "admin:", ...nowhere });
  await leavePending(admin, "refund");
  const plain = s.make({});
  eq(plain.pendingOperations(), [], "the shorter prefix lists nothing of the longer one's");

  for (const scope of ["x".repeat(129), "a b", 7]) {
    let thrown;
    try {
      s.make({ scope });
    } catch (e) {
      thrown = e;
    }
    eq(thrown?.kind, "invalid", "scope " + JSON.stringify(scope));
  }
  eq((await s.charges()).length, 1, "charges");
}

export async function clear(env) {
  const s = setup(env);
  const nowhere = { baseUrl: UNREACHABLE, maxAttempts: 1 };
  const alice = s.make({ scope: "alice", ...nowhere });
  await leavePending(alice, "checkout:a", charge(300, "alice@example.com's cart"));
  alice.keyFor("checkout:later");
  const bob = s.make({ scope: "bob", ...nowhere });
  await leavePending(bob, "checkout:b", charge(400, "bob's cart"));

  eq(alice.clear(), 2, "operations alice's clear forgot");
  const left = s.entries().filter(([, text]) => text?.includes("alice@example.com"));
  eq(left, [], "entries still holding alice's request");
  eq(s.make({ scope: "alice" }).pendingOperations(), [], "alice's pending operations after clear");
  eq(bob.pendingOperations(), ["checkout:b"], "bob's, untouched");
  eq(alice.clear(), 0, "a second clear");

  // Not while one of the scope's operations is being sent.
  const carol = s.make({ scope: "carol", headers: { Authorization: s.bearer, "X-Chaos": "delay-after-commit=1500" } });
  const paying = carol.post("/charges", charge(500), "checkout:c");
  await sleep(400);
  let thrown;
  try {
    carol.clear();
  } catch (e) {
    thrown = e;
  }
  eq(thrown?.kind, "invalid", "clear during a send");
  eq((await paying).status, 201, "the payment in flight");
  eq(carol.clear(), 1, "clear once it settled");
}

export async function one_entry(env) {
  const s = setup(env);
  const client = s.make({});
  const watch = spy();
  let outcome;
  try {
    outcome = await client.post("/charges", charge(600), "checkout:one");
  } finally {
    watch.restore();
  }
  eq(outcome.status, 201, "the payment");
  const mine = watch.writes.filter(([name]) => name === s.prefix + "checkout:one");
  check(mine.length > 0, "the operation was stored");
  const first = watch.writes.indexOf(mine[0]);
  check(first < watch.atFirstFetch(), "stored before anything was sent");
  for (const [, text] of mine.slice(0, -1)) {
    const record = JSON.parse(text);
    eq([record.key, record.method, record.path], [outcome.key, "POST", "/charges"], "every write before the answer holds the key with its request: " + text);
    eq(JSON.parse(record.body).amount, 600, "the body beside the key");
  }
  // The last write, after the answer: the key and the status, no request.
  const last = JSON.parse(mine[mine.length - 1][1]);
  eq([last.key, last.answered, last.status, last.method ?? null, last.body ?? null], [outcome.key, true, 201, null, null], "after the answer");
}

export async function persistent(env) {
  const s = setup(env);
  const client = s.make({});
  eq(client.persistent, true, "persistent with localStorage");
  const empty = fill();
  try {
    const outcome = await client.post("/charges", charge(700), "checkout:full");
    eq(outcome.status, 201, "the payment with a full storage");
    eq(client.persistent, false, "persistent once storage refused a write");
  } finally {
    empty();
  }
  eq(s.entries().filter(([name]) => name.startsWith(s.prefix)), [], "no half record in localStorage");
}
"#;

/// Records are owned: a scope never lists, resumes, reuses or sends
/// another scope's records (`"u12"` is not `"u1"`), a prefix never reads a
/// longer prefix's, and a bad scope is refused.
#[wasm_bindgen_test]
async fn records_of_another_scope_or_prefix_are_never_listed_resumed_or_sent() {
    run(TESTS, "scopes", "").await;
}

/// `clear()` at sign-out forgets the scope's operations and leaves no
/// byte of their requests in storage; other scopes keep theirs; it throws
/// `invalid` while one of them is being sent.
#[wasm_bindgen_test]
async fn clear_leaves_nothing_of_the_scope_and_spares_the_others() {
    run(TESTS, "clear", "").await;
}

/// The key and its request reach storage in one entry, in one write, before
/// anything is sent: no reload finds one without the other.
#[wasm_bindgen_test]
async fn the_key_and_its_request_are_written_as_one_entry_before_sending() {
    run(TESTS, "one_entry", "").await;
}

/// `persistent` turns false when the client has to keep keys in memory,
/// and a full storage holds no half record.
#[wasm_bindgen_test]
async fn persistent_says_when_a_reload_would_lose_the_operation() {
    run(TESTS, "persistent", "").await;
}
