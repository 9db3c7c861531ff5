//! The client on real checkouts (issue 24): shared browsers (scopes,
//! `clear`), expiry and the device clock, deploys (record upgrades),
//! proxies (5xx, redirects), and the fetch ecosystem (`fetch`,
//! `credentials`, `headers` as a function, the per-call `key`). Each test
//! failed against the client before these changes.
//!
//! The tests are written in JavaScript, as a page would use the client:
//! each gets the class (from an instance made in Rust), the server, the
//! portal (`client-wasm/browser-support/portal.mjs`) and its own storage
//! prefix and bearer token, and throws on the first thing that is wrong.

use super::*;

#[wasm_bindgen(inline_js = r#"
const UNREACHABLE = "http://127.0.0.1:9";

function check(condition, what) {
  if (!condition) throw new Error(what);
}
function eq(actual, expected, what) {
  const a = JSON.stringify(actual), e = JSON.stringify(expected);
  if (a !== e) throw new Error(`${what}: got ${a}, expected ${e}`);
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const charge = (amount, description = "browser test") => ({ amount, currency: "usd", description });

/** Awaits a promise that must reject with an IdempotencyError; returns it. */
async function rejects(promise, what) {
  let outcome;
  try {
    outcome = await promise;
  } catch (e) {
    check(e?.name === "IdempotencyError", `${what}: not an IdempotencyError: ${e?.stack ?? e}`);
    return e;
  }
  throw new Error(`${what}: resolved with ${JSON.stringify(outcome)}`);
}

/** What every test uses: its prefix, its customer, its clients. */
function setup(env) {
  const s = {
    prefix: env.prefix,
    bearer: "Bearer " + env.token,
    options(extra = {}) {
      return {
        baseUrl: env.server,
        storagePrefix: env.prefix,
        backoffBaseMs: 10,
        backoffMaxMs: 100,
        headers: { Authorization: s.bearer },
        ...extra,
      };
    },
    make(extra) {
      return new env.Client(s.options(extra));
    },
    /** Every localStorage entry's name and text. */
    entries() {
      const all = [];
      for (let i = 0; i < localStorage.length; i++) {
        const name = localStorage.key(i);
        all.push([name, localStorage.getItem(name)]);
      }
      return all;
    },
    async charges() {
      const response = await fetch(env.server + "/charges", { headers: { Authorization: s.bearer } });
      check(response.status === 200, "GET /charges: " + response.status);
      return (await response.json()).data;
    },
  };
  return s;
}

/** A pending operation: one attempt that never reaches a server. */
async function leavePending(client, operation, body = charge(100)) {
  const error = await rejects(client.post("/charges", body, operation), "a call to nowhere");
  eq(error.kind, "exhausted", "the call to nowhere");
  return error;
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

export async function proxy_errors(env) {
  const s = setup(env);
  // The proxy lets the server charge, then answers 520.
  const client = s.make({ baseUrl: env.portal + "/proxy-520" });
  const outcome = await client.post("/charges", charge(800), "checkout:proxy");
  eq([outcome.status, outcome.replayed, outcome.attempts], [201, true, 2], "a 520 after the charge");
  eq((await s.charges()).length, 1, "charges");
  for (const status of [501, 505]) {
    const final = await s.make({ baseUrl: env.portal + `/status/${status}` }).post("/charges", charge(1), "final-" + status);
    eq([final.status, final.attempts], [status, 1], status + " is final");
  }
  const twice = await rejects(
    s.make({ baseUrl: env.portal + "/status/522", maxAttempts: 2 }).post("/charges", charge(1), "522"),
    "522",
  );
  eq([twice.kind, twice.attempts, twice.lastStatus], ["exhausted", 2, 522], "522 is retried");
}

export async function expiry(env) {
  const s = setup(env);
  const nowhere = { baseUrl: UNREACHABLE, maxAttempts: 1, keyTtlMs: 400 };
  const left = await leavePending(s.make(nowhere), "checkout:late", charge(900));
  const sent = Date.now();
  await sleep(600);
  const told = [];
  const next = s.make({ keyTtlMs: 400, onExpired: (event) => told.push(event) });
  eq(next.pendingOperations(), [], "an expired operation is not pending");
  eq(told.length, 1, "onExpired calls");
  const [event] = told;
  eq([event.operation, event.key, event.method, event.path], ["checkout:late", left.key, "POST", "/charges"], "the event");
  eq(event.body?.amount, 900, "the event's body");
  check(typeof event.sentAt === "number" && event.sentAt <= sent && sent - event.sentAt < 5000, "sentAt " + event.sentAt);
  eq(localStorage.getItem(s.prefix + "checkout:late"), null, "told, then forgotten (CONTRACT section 4)");
  eq((await rejects(next.resume("checkout:late"), "resume after expiry")).kind, "invalid", "resume after expiry");
  eq(told.length, 1, "onExpired is called once");

  // A call that finds its own operation expired is refused, not sent with a new key.
  await leavePending(s.make(nowhere), "checkout:late2", charge(901));
  await sleep(600);
  const told2 = [];
  const paying = s.make({ keyTtlMs: 400, onExpired: (event) => told2.push(event) });
  const refused = await rejects(paying.post("/charges", charge(901), "checkout:late2"), "the next Pay");
  eq([refused.kind, refused.attempts], ["invalid", 0], "the next Pay");
  eq(told2.map((e) => e.operation), ["checkout:late2"], "onExpired for the next Pay");
  eq((await s.charges()).length, 0, "charges");
}

export async function clock(env) {
  const s = setup(env);
  const nowhere = { baseUrl: UNREACHABLE, maxAttempts: 1 };
  await leavePending(s.make(nowhere), "checkout:back", charge(1000));
  await leavePending(s.make({ scope: "ahead", ...nowhere }), "checkout:ahead", charge(1001));
  const now = Date.now;
  const told = [];
  try {
    // The device clock set back an hour: how old the key is, nobody knows.
    Date.now = () => now.call(Date) - 3600e3;
    const back = s.make({ onExpired: (event) => told.push(event.operation) });
    eq(back.keyFor("probe").length, 36, "a new operation still works");
    eq(told, ["checkout:back"], "onExpired for the operation made 'in the future'");
    eq((await rejects(back.resume("checkout:back"), "resume")).kind, "invalid", "resume after the clock went back");
  } finally {
    Date.now = now;
  }
  try {
    // Set forward two days: the key outlived keyTtlMs as far as the device knows.
    Date.now = () => now.call(Date) + 2 * 86400e3;
    const ahead = s.make({ scope: "ahead", onExpired: (event) => told.push(event.operation) });
    eq(ahead.pendingOperations(), [], "pending after the clock went forward");
    check(told.includes("checkout:ahead"), "onExpired after the clock went forward: " + told);
  } finally {
    Date.now = now;
  }
  eq((await s.charges()).length, 0, "charges");
}

export async function upgrades(env, fixture) {
  const s = setup(env);
  const legacy = JSON.parse(fixture);
  localStorage.setItem(s.prefix + "checkout:legacy", fixture.trim());
  const client = s.make({});
  eq(client.pendingOperations(), ["checkout:legacy"], "the first release's pending record");
  const outcome = await client.resume("checkout:legacy");
  eq([outcome.status, outcome.key, outcome.body?.amount], [201, legacy.key, 1234], "resumed");
  const stored = JSON.parse(localStorage.getItem(s.prefix + "checkout:legacy"));
  eq([stored.v, stored.key, stored.answered], [2, legacy.key, true], "written back in the current format");
  eq((await client.post("/charges", JSON.parse(legacy.body), "checkout:legacy")).replayed, true, "sent again: replayed");

  // A record of a later version: left alone, only its operation refused.
  // (Version 3 is this release's tombstone: the next format is 4.)
  const future = '{"v":4,"keys":["a"],"owner":{}}';
  localStorage.setItem(s.prefix + "checkout:future", future);
  let thrown;
  try {
    client.keyFor("checkout:future");
  } catch (e) {
    thrown = e;
  }
  eq(thrown?.kind, "invalid", "keyFor of a later version's operation");
  check(/version 4/.test(thrown.message), "the message names the version: " + thrown.message);
  const call = await rejects(client.post("/charges", charge(1), "checkout:future"), "post");
  check(call.kind === "invalid" && /version 4/.test(call.message), call.message);
  eq(localStorage.getItem(s.prefix + "checkout:future"), future, "the later record is untouched");
  eq((await client.post("/charges", charge(2), "checkout:other")).status, 201, "other operations go on");
  eq(client.pendingOperations(), [], "pending");
}

export async function path_typo(env) {
  const s = setup(env);
  const client = s.make({});
  // A relative path typo: invalid, nothing stored or sent.
  const typo = await rejects(client.post("charges", charge(1), "typo"), "typo");
  eq([typo.kind, typo.attempts], ["invalid", 0], "a path without /");
  eq(localStorage.getItem(s.prefix + "typo"), null, "nothing stored for the typo");
}

export async function redirect_final(env) {
  const s = setup(env);
  // A redirect is final, with a clear message, after one attempt.
  const portal = s.make({ baseUrl: env.portal + "/redirect", maxAttempts: 5 });
  const redirected = await rejects(portal.post("/charges", charge(1), "portal"), "redirect");
  eq([redirected.kind, redirected.attempts, redirected.lastStatus], ["exhausted", 1, null], "a redirect");
  check(/redirected/.test(redirected.message) && /not retried/.test(redirected.message), redirected.message);
}

export async function key_order(env) {
  const s = setup(env);
  const client = s.make({});
  // The same JSON in another key order is the same request, as on the server.
  const nowhere = s.make({ baseUrl: UNREACHABLE, maxAttempts: 1 });
  await leavePending(nowhere, "canon", { amount: 1100, currency: "usd" });
  const same = await client.post("/charges", { currency: "usd", amount: 1100 }, "canon");
  eq(same.status, 201, "the pending request, keys reordered");
}

export async function aborted_signal(env) {
  const s = setup(env);
  const client = s.make({});
  // An already aborted signal stores nothing.
  const aborted = new AbortController();
  aborted.abort();
  const early = await rejects(client.post("/charges", charge(1), "pre-aborted", { signal: aborted.signal }), "aborted");
  eq([early.kind, early.attempts], ["aborted", 0], "an aborted signal");
  eq(localStorage.getItem(s.prefix + "pre-aborted"), null, "nothing stored for an aborted signal");
}

export async function abort_listeners(env) {
  const s = setup(env);
  const client = s.make({});
  // The abort listener is removed once a call settles.
  const controller = new AbortController();
  const listeners = new Set();
  const { signal } = controller;
  const add = signal.addEventListener.bind(signal);
  const remove = signal.removeEventListener.bind(signal);
  signal.addEventListener = (type, listener, options) => {
    if (type === "abort") listeners.add(listener);
    add(type, listener, options);
  };
  signal.removeEventListener = (type, listener, options) => {
    if (type === "abort") listeners.delete(listener);
    remove(type, listener, options);
  };
  for (let i = 0; i < 3; i++) await client.post("/charges", charge(1200 + i), "listener-" + i, { signal });
  eq(listeners.size, 0, "abort listeners left on a long-lived signal");
}

export async function headers_instances(env) {
  const s = setup(env);
  // A Headers instance, as the client's headers and as a call's.
  const withHeaders = s.make({ headers: new Headers({ Authorization: s.bearer }) });
  eq((await withHeaders.post("/charges", charge(1300), "headers-instance")).status, 201, "a Headers instance");
  const perCall = s.make({ headers: undefined });
  const call = await perCall.post("/charges", charge(1301), "headers-call", { headers: new Headers({ Authorization: s.bearer }) });
  eq(call.status, 201, "a call's Headers instance");
}

export async function per_call_key(env) {
  const s = setup(env);
  const client = s.make({});
  const key = "order-" + crypto.randomUUID();
  const outcome = await client.post("/charges", charge(1500), "checkout:order", { key });
  eq([outcome.status, outcome.key], [201, key], "sent with the embedder's key");
  eq(client.keyFor("checkout:order"), key, "stored as the operation's key");
  // Another device: other storage, same customer, same key.
  const device = s.make({ storagePrefix: s.prefix + "device2:" });
  const there = await device.post("/charges", charge(1500), "checkout:order", { key });
  eq([there.status, there.replayed], [201, true], "continued on another device");
  const other = await rejects(client.post("/charges", charge(1500), "checkout:order", { key: "another-key" }), "other key");
  eq([other.kind, other.attempts], ["invalid", 0], "another key for the operation");
  const bad = await rejects(client.post("/charges", charge(1), "bad-key", { key: "has space" }), "bad key");
  eq(bad.kind, "invalid", "a key with a space");
  eq((await s.charges()).length, 1, "charges");
}

export async function credentials(env) {
  const s = setup(env);
  const name = "probe" + crypto.randomUUID().slice(0, 8);
  document.cookie = `${name}=1; path=/`;
  try {
    const cookie = async (extra) =>
      (await s.make({ baseUrl: env.portal + "/cookie", ...extra }).post("/x", {}, "cookie-" + Math.random())).body.cookie ?? "";
    check((await cookie({ credentials: "include" })).includes(name), "credentials: include sends the cookie");
    check(!(await cookie({})).includes(name), "the default (same-origin) does not, to another origin");
    check(!(await cookie({ credentials: "omit" })).includes(name), "omit does not");
    let thrown;
    try {
      s.make({ credentials: "always" });
    } catch (e) {
      thrown = e;
    }
    eq(thrown?.kind, "invalid", "credentials: always");
  } finally {
    document.cookie = `${name}=; path=/; max-age=0`;
  }
}

export async function headers_function(env) {
  const s = setup(env);
  let calls = 0;
  const refreshing = s.make({
    baseUrl: env.portal + "/busy/0",
    maxAttempts: 3,
    headers: async () => {
      calls++;
      return { Authorization: s.bearer };
    },
  });
  await rejects(refreshing.post("/charges", charge(1), "refresh"), "busy");
  eq(calls, 3, "the headers function is called before every attempt");
  // The token of the moment is the one sent.
  let token = "Bearer " + "stale-token-".repeat(2);
  const client = s.make({ headers: () => ({ Authorization: token }) });
  token = s.bearer;
  const outcome = await client.post("/charges", charge(1600), "fresh");
  eq(outcome.status, 201, "sent with the refreshed token");
  eq((await s.charges()).length, 1, "charged to the refreshed token's customer");
}

export async function fetch_function(env) {
  const s = setup(env);
  const client = s.make({});
  const body = JSON.stringify(charge(1700));
  const response = await client.fetch("/charges", { method: "POST", body, operation: "checkout:fetch" });
  check(response instanceof Response, "a Response");
  eq([response.status, response.ok, response.headers.get("Idempotent-Replayed")], [201, true, null], "the first answer");
  eq((await response.json()).amount, 1700, "its body");
  const request = new Request(env.server + "/charges", { method: "POST", body });
  const again = await client.fetch(request, { operation: "checkout:fetch" });
  eq([again.status, again.headers.get("Idempotent-Replayed")], [201, "true"], "a Request input, replayed");
  const refused = await client.fetch("/reservations", {
    method: "POST",
    body: JSON.stringify({ item_id: "sku-none", quantity: 1 }),
    operation: "reserve:none",
  });
  check(!refused.ok && refused.status >= 400 && refused.status < 500, "a refusal is a Response: " + refused.status);
  eq((await rejects(client.fetch("/charges", { method: "POST", body }), "no operation")).kind, "invalid", "no operation");
  eq((await rejects(client.fetch("/charges", { method: "POST", body: "{", operation: "bad" }), "bad JSON")).kind, "invalid", "bad JSON");
  eq((await s.charges()).length, 1, "charges");
}
"#)]
extern "C" {
    fn scopes(env: JsValue) -> Promise;
    fn clear(env: JsValue) -> Promise;
    fn one_entry(env: JsValue) -> Promise;
    fn persistent(env: JsValue) -> Promise;
    fn proxy_errors(env: JsValue) -> Promise;
    fn expiry(env: JsValue) -> Promise;
    fn clock(env: JsValue) -> Promise;
    fn upgrades(env: JsValue, fixture: &str) -> Promise;
    fn path_typo(env: JsValue) -> Promise;
    fn redirect_final(env: JsValue) -> Promise;
    fn key_order(env: JsValue) -> Promise;
    fn aborted_signal(env: JsValue) -> Promise;
    fn abort_listeners(env: JsValue) -> Promise;
    fn headers_instances(env: JsValue) -> Promise;
    fn per_call_key(env: JsValue) -> Promise;
    fn credentials(env: JsValue) -> Promise;
    fn headers_function(env: JsValue) -> Promise;
    fn fetch_function(env: JsValue) -> Promise;
}

#[wasm_bindgen(module = "/js/browser.js")]
extern "C" {
    /// What the package's entry does to the class at load: gives it
    /// `fetch` (tested here on the class of this build).
    #[wasm_bindgen(js_name = withFetch)]
    fn with_fetch(class: &JsValue);
}

/// What a test's JavaScript gets: the class (with `fetch`, as the package
/// exports it), the server, the portal, and its own prefix and token.
pub(super) fn env() -> JsValue {
    let setup = Setup::new();
    let instance: JsValue = setup.client(None).into();
    let class = get(&instance, "constructor");
    with_fetch(&class);
    object(&[
        ("Client", class),
        ("server", server().into()),
        ("portal", portal().into()),
        ("prefix", setup.prefix.as_str().into()),
        ("token", setup.token.as_str().into()),
    ])
}

/// Awaits a test's promise; panics with its error's message and stack.
pub(super) async fn passed(test: Promise) {
    if let Err(e) = JsFuture::from(test).await {
        let stack = get(&e, "stack").as_string().unwrap_or_default();
        panic!("{}\n{stack}", message(e));
    }
}

/// Records are owned: a scope never lists, resumes, reuses or sends
/// another scope's records (`"u12"` is not `"u1"`), a prefix never reads a
/// longer prefix's, and a bad scope is refused.
#[wasm_bindgen_test]
async fn records_of_another_scope_or_prefix_are_never_listed_resumed_or_sent() {
    passed(scopes(env())).await;
}

/// `clear()` at sign-out forgets the scope's operations and leaves no
/// byte of their requests in storage; other scopes keep theirs; it throws
/// `invalid` while one of them is being sent.
#[wasm_bindgen_test]
async fn clear_leaves_nothing_of_the_scope_and_spares_the_others() {
    passed(clear(env())).await;
}

/// The key and its request reach storage in one entry, in one write, before
/// anything is sent: no reload finds one without the other.
#[wasm_bindgen_test]
async fn the_key_and_its_request_are_written_as_one_entry_before_sending() {
    passed(one_entry(env())).await;
}

/// `persistent` turns false when the client has to keep keys in memory,
/// and a full storage holds no half record.
#[wasm_bindgen_test]
async fn persistent_says_when_a_reload_would_lose_the_operation() {
    passed(persistent(env())).await;
}

/// A proxy's 520 after the server charged is retried with the same key and
/// ends in the charge's replay (one charge); 522 is retried; 501 and 505
/// are final.
#[wasm_bindgen_test]
async fn a_proxy_5xx_after_the_charge_is_retried_and_charges_once() {
    passed(proxy_errors(env())).await;
}

/// An operation whose key outlived `keyTtlMs` unanswered is reported once
/// through `onExpired`, kept as a tombstone, and never resent; the next
/// call for it is refused rather than sent with a new key.
#[wasm_bindgen_test]
async fn an_expired_unanswered_operation_is_reported_and_never_resent() {
    passed(expiry(env())).await;
}

/// A device clock set back before a key was made, or forward past its
/// expiry, ends the key's life (reported through `onExpired`): the client
/// never resends a key the server may have forgotten.
#[wasm_bindgen_test]
async fn a_clock_that_jumps_never_makes_the_client_resend_an_old_key() {
    passed(clock(env())).await;
}

/// The committed record of the first release (`fixtures/record-v1.json`)
/// is listed, resumed with its key and written back in the current format;
/// a record of a later version is left untouched and refuses only its own
/// operation, naming the version.
#[wasm_bindgen_test]
async fn a_first_release_record_is_resumed_and_a_later_one_refused_alone() {
    passed(upgrades(env(), include_str!("fixtures/record-v1.json"))).await;
}

/// A relative path typo (`"charges"`) is `invalid` before anything is
/// stored or sent.
#[wasm_bindgen_test]
async fn a_path_neither_absolute_nor_from_the_root_is_invalid_before_sending() {
    passed(path_typo(env())).await;
}

/// A redirect is final after one attempt, with a message saying why.
#[wasm_bindgen_test]
async fn a_redirect_is_final_with_a_clear_error() {
    passed(redirect_final(env())).await;
}

/// A pending request's body is compared as canonical JSON, as the server
/// compares it: the same JSON in another key order is the same request.
#[wasm_bindgen_test]
async fn the_same_json_in_another_key_order_is_the_same_request() {
    passed(key_order(env())).await;
}

/// An already aborted signal rejects with nothing stored, not even a key.
#[wasm_bindgen_test]
async fn an_already_aborted_signal_stores_nothing() {
    passed(aborted_signal(env())).await;
}

/// A call removes its abort listener once it settles: a long-lived signal
/// does not collect one per call.
#[wasm_bindgen_test]
async fn the_abort_listener_is_removed_when_the_call_settles() {
    passed(abort_listeners(env())).await;
}

/// A `Headers` instance is taken as headers, for the client and for a call.
#[wasm_bindgen_test]
async fn a_headers_instance_is_taken_as_headers() {
    passed(headers_instances(env())).await;
}

/// The per-call `key` is sent and stored as the operation's key, so the
/// operation continues on another device; another key for it is refused.
#[wasm_bindgen_test]
async fn the_embedder_s_key_is_used_and_a_different_one_refused() {
    passed(per_call_key(env())).await;
}

/// `credentials: "include"` sends the page's cookies to another origin;
/// the default and `"omit"` do not.
#[wasm_bindgen_test]
async fn credentials_are_passed_to_fetch() {
    passed(credentials(env())).await;
}

/// A `headers` function is called before every attempt, and the token it
/// gives at that moment is the one sent.
#[wasm_bindgen_test]
async fn a_headers_function_is_called_before_every_attempt() {
    passed(headers_function(env())).await;
}

/// `fetch(input, init)` sends as `send` does and resolves with a standard
/// `Response`, headers included; it rejects as `send` does.
#[wasm_bindgen_test]
async fn fetch_resolves_with_a_standard_response() {
    passed(fetch_function(env())).await;
}
