//! Issue 36: the client never sends a second key while the first may have
//! run, never sends a key after its life, stores nothing for a call that
//! sent nothing, waits for another tab's call as long as that call may
//! take, gives every rejection a stable `code` (and a `cause`), lets the
//! page narrow retries (`shouldRetry`), takes `operation-needs-attention`
//! as final, sends a `fetch` body byte for byte and gives its answer's
//! bytes back, and tells a page whose CSP refuses WebAssembly why. Each
//! test failed against the client before these changes.
//!
//! Written in JavaScript, as a page uses the client, like `checkouts.rs`
//! (whose `env()` each test gets).

use super::checkouts::{env, passed};
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

/** Calls `f`, which must throw an IdempotencyError; returns it. */
function throws(f, what) {
  try {
    f();
  } catch (e) {
    check(e?.name === "IdempotencyError", `${what}: not an IdempotencyError: ${e?.stack ?? e}`);
    return e;
  }
  throw new Error(`${what}: threw nothing`);
}

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
    stored(operation) {
      return localStorage.getItem(s.prefix + operation);
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

/** Counts the page's fetches (and keeps their init) until `restore()`. */
function spyFetch() {
  const real = window.fetch;
  const calls = [];
  window.fetch = function (input, init) {
    calls.push({ url: String(input?.url ?? input), init });
    return real.apply(this, arguments);
  };
  return { calls, restore: () => (window.fetch = real) };
}

export async function tombstone(env) {
  const s = setup(env);
  const nowhere = { baseUrl: UNREACHABLE, maxAttempts: 1, keyTtlMs: 400 };
  const left = await leavePending(s.make(nowhere), "checkout:t", charge(900));
  await sleep(600);
  // A client built as the recipes build it: no onExpired.
  const next = s.make({ keyTtlMs: 400 });
  eq(next.persistent, true, "persistent (the first storage use, which looks at expiry)");
  eq(next.pendingOperations(), [], "an expired operation is not pending");
  const refused = await rejects(next.post("/charges", charge(900), "checkout:t"), "the next Pay");
  eq([refused.code, refused.kind, refused.attempts, refused.key], ["operation-expired", "invalid", 0, left.key], "the next Pay");
  eq((await s.charges()).length, 0, "charges after the next Pay");
  eq(throws(() => next.keyFor("checkout:t"), "keyFor").code, "operation-expired", "keyFor of the expired operation");
  const again = s.make({ keyTtlMs: 400 });
  eq((await rejects(again.resume("checkout:t"), "resume")).code, "operation-expired", "another client's resume");
  const [listed, ...more] = again.expiredOperations();
  eq(more, [], "other expired operations");
  eq([listed.operation, listed.key, listed.method, listed.path, listed.body?.amount], ["checkout:t", left.key, "POST", "/charges", 900], "expiredOperations()");
  check(typeof listed.sentAt === "number", "sentAt");
  check(s.stored("checkout:t") !== null, "the tombstone is stored");
  // The page looked (GET /charges: nothing), then acknowledges: a new operation.
  again.release("checkout:t");
  eq(again.expiredOperations(), [], "acknowledged");
  const paid = await again.post("/charges", charge(900), "checkout:t");
  eq(paid.status, 201, "paid after the acknowledgement");
  check(paid.key !== left.key, "with a new key");
  eq((await s.charges()).length, 1, "charges");
}

export async function key_lifetime(env) {
  const s = setup(env);
  const told = [];
  const sent = [];
  const client = s.make({
    // A gateway in maintenance: 503 with Retry-After: 1, five attempts, a key of 1.5 s.
    baseUrl: env.portal + "/busy/1",
    keyTtlMs: 1500,
    maxAttempts: 5,
    onAttempt: (e) => sent.push(performance.now() - e.latencyMs),
    onExpired: (e) => told.push(e.operation),
  });
  const started = performance.now();
  const error = await rejects(client.post("/charges", charge(1), "checkout:ttl"), "a call outliving its key");
  const record = s.stored("checkout:ttl");
  const late = sent.filter((at) => at - started > 1500);
  eq(late.length, 0, `attempts sent after the key's life (${sent.map((at) => Math.round(at - started))} ms)`);
  eq([error.code, error.kind], ["key-expired", "exhausted"], "the rejection");
  check(error.attempts >= 1 && error.attempts === sent.length, "attempts " + error.attempts);
  check(/expire/.test(error.message), error.message);
  eq(told, ["checkout:ttl"], "onExpired");
  // The page was told (onExpired), so the client forgot it (CONTRACT
  // section 4); the call itself was refused, never resent with a new key.
  eq(record, null, "told, then forgotten");
}

export async function abort_unsent(env) {
  const s = setup(env);
  const spy = spyFetch();
  try {
    // Aborted during the first 100 ms (the settle of a new key).
    const quick = new AbortController();
    setTimeout(() => quick.abort(), 30);
    const early = await rejects(s.make({}).post("/charges", charge(1), "cancel:early", { signal: quick.signal }), "early abort");
    eq(s.stored("cancel:early"), null, "stored after an abort before anything was sent");
    eq([early.kind, early.code, early.attempts], ["aborted", "aborted", 0], "aborted in the settle");
    // Aborted while a slow headers function is asked for the first attempt's token.
    const slow = s.make({ headers: () => sleep(500).then(() => ({ Authorization: s.bearer })) });
    const later = new AbortController();
    setTimeout(() => later.abort(), 300);
    const waiting = await rejects(slow.post("/charges", charge(2), "cancel:headers", { signal: later.signal }), "abort in headers");
    eq([waiting.kind, waiting.attempts], ["aborted", 0], "aborted before the first request");
    eq(s.stored("cancel:headers"), null, "stored after an abort while asking for headers");
    // An operation with a key already (keyFor) keeps it, with no request.
    const keyed = s.make({});
    const key = keyed.keyFor("cancel:keyed");
    await sleep(150);
    const third = new AbortController();
    const call = keyed.post("/charges", charge(3), "cancel:keyed", {
      signal: third.signal,
      headers: { "X-Slow": "1" },
    });
    third.abort();
    eq((await rejects(call, "abort")).attempts, 0, "aborted at once");
    const record = JSON.parse(s.stored("cancel:keyed"));
    eq([record.key, record.method ?? null], [key, null], "the key stays, without a request");
    eq(keyed.pendingOperations(), [], "pending operations");
    eq(spy.calls.filter((c) => c.url.includes("/charges")).length, 0, "requests sent");
  } finally {
    spy.restore();
  }
  // The page-start loop finds nothing to resume: nothing was sent, nothing is charged.
  eq(s.make({}).pendingOperations(), [], "pending for the next page");
  eq((await s.charges()).length, 0, "charges");
}

export async function lock_budget(env) {
  const s = setup(env);
  // The first call waits out two Retry-After: 1 (a gateway that comes back):
  // about 2.2 s, more than timeoutMs × maxAttempts (500 × 3).
  const options = { baseUrl: env.portal + "/busy-then/2/1", timeoutMs: 500, maxAttempts: 3 };
  const first = s.make(options).post("/charges", charge(1800), "checkout:budget");
  await sleep(200);
  // Another tab (or StrictMode's second mount), the same options.
  const started = performance.now();
  const second = await s.make(options).post("/charges", charge(1800), "checkout:budget");
  const waited = performance.now() - started;
  const done = await first;
  eq([done.status, done.replayed], [201, false], "the first call");
  eq([second.status, second.replayed, second.key], [201, true, done.key], `the second tab (after ${Math.round(waited)} ms)`);
  eq((await s.charges()).length, 1, "charges");
}

export async function lock_frozen(env) {
  const s = setup(env);
  // A frozen tab holds the operation's lock, and its lease has run out.
  let release;
  const held = new Promise((resolve) => (release = resolve));
  await new Promise((granted) =>
    navigator.locks.request(s.prefix + "checkout:frozen", () => (granted(), held)),
  );
  try {
    const started = performance.now();
    const once = { timeoutMs: 400, maxAttempts: 1 };
    const error = await rejects(s.make({}).post("/charges", charge(1), "checkout:frozen", once), "waiting");
    const waited = performance.now() - started;
    check(waited < 1800, `waited ${waited} ms for the lock`);
    eq([error.kind, error.code, error.attempts], ["exhausted", "lock-timeout", 0], "a bounded wait");
    eq(s.stored("checkout:frozen"), null, "nothing stored");
  } finally {
    release();
  }
}

export async function lease_bound(env) {
  const s = setup(env);
  const nowhere = { baseUrl: UNREACHABLE, maxAttempts: 1 };
  // A tab died mid-call: its lease stays in the record. Then the device
  // clock is set back an hour: the lease looks live for an hour.
  await leavePending(s.make(nowhere), "checkout:lease", charge(1900));
  const record = JSON.parse(s.stored("checkout:lease"));
  record.busy = Date.now() + 10000;
  localStorage.setItem(s.prefix + "checkout:lease", JSON.stringify(record));
  const now = Date.now;
  try {
    Date.now = () => now.call(Date) - 3600e3;
    const back = s.make({});
    const refused = await rejects(back.resume("checkout:lease"), "resume with the clock set back");
    eq([refused.code, refused.attempts], ["operation-expired", 0], "resume with the clock set back");
  } finally {
    Date.now = now;
  }
  // A lease ten years long (written by a clock that was ten years ahead).
  await leavePending(s.make({ ...nowhere, keyTtlMs: 200 }), "checkout:forever", charge(1901));
  const forever = JSON.parse(s.stored("checkout:forever"));
  forever.busy = Date.now() + 10 * 365 * 86400e3;
  localStorage.setItem(s.prefix + "checkout:forever", JSON.stringify(forever));
  await sleep(300);
  const client = s.make({ keyTtlMs: 200 });
  eq(client.expiredOperations().map((e) => e.operation).sort(), ["checkout:forever", "checkout:lease"], "expired");
  client.release("checkout:forever"); // not "being sent" for ten years
  eq((await s.charges()).length, 0, "charges");
}

export async function headers_context(env) {
  const s = setup(env);
  const asked = [];
  const client = s.make({
    scope: "u1",
    baseUrl: env.portal + "/busy/0",
    maxAttempts: 2,
    headers: (context) => {
      asked.push(context);
      return { Authorization: s.bearer };
    },
  });
  await rejects(client.post("/charges", charge(1), "checkout:ctx"), "busy");
  eq(asked, [
    { scope: "u1", operation: "checkout:ctx", attempt: 1 },
    { scope: "u1", operation: "checkout:ctx", attempt: 2 },
  ], "what the headers function is told");
}

export async function abort_all(env) {
  const s = setup(env);
  const client = s.make({ headers: { Authorization: s.bearer, "X-Chaos": "delay-after-commit=1500" } });
  const calls = [
    client.post("/charges", charge(2001), "signout:a"),
    client.post("/charges", charge(2002), "signout:b"),
  ];
  await sleep(400);
  // One more, waiting for signout:a's lock.
  calls.push(client.post("/charges", charge(2001), "signout:a"));
  await sleep(50);
  eq(client.abortAll(), 3, "calls aborted");
  // At once, before the calls have settled: sign-out's clear().
  eq(client.clear(), 2, "operations cleared");
  for (const call of calls) {
    const error = await rejects(call, "an aborted call");
    eq([error.kind, error.code], ["aborted", "aborted"], "an aborted call");
  }
  eq([s.stored("signout:a"), s.stored("signout:b")], [null, null], "entries after sign-out");
  eq(client.abortAll(), 0, "nothing left to abort");
}

export async function codes(env) {
  const s = setup(env);
  const nowhere = s.make({ baseUrl: UNREACHABLE, maxAttempts: 1 });
  const failed = await rejects(nowhere.post("/charges", charge(1), "codes:pending"), "nowhere");
  eq(failed.code, "attempts-exhausted", "no answer");
  check(failed.cause instanceof TypeError, "the cause is fetch's TypeError: " + failed.cause);
  const cases = [
    ["invalid-argument", s.make({}).post("/charges", charge(1), "")],
    ["invalid-argument", s.make({}).post("/charges", { n: 10n }, "codes:bigint")],
    ["request-differs", nowhere.post("/charges", charge(2), "codes:pending")],
    ["nothing-to-resume", s.make({}).resume("codes:none")],
    ["key-differs", nowhere.post("/charges", charge(1), "codes:pending", { key: "another" })],
    ["redirected", s.make({ baseUrl: env.portal + "/redirect" }).post("/charges", charge(1), "codes:redirect")],
  ];
  localStorage.setItem(s.prefix + "codes:future", '{"v":9}');
  cases.push(["foreign-record", s.make({}).post("/charges", charge(1), "codes:future")]);
  for (const [code, call] of cases) {
    const error = await rejects(call, code);
    eq(error.code, code, error.message);
  }
  const bigint = await rejects(s.make({}).post("/charges", { n: 10n }, "codes:bigint2"), "bigint");
  check(bigint.cause instanceof TypeError, "JSON.stringify's TypeError as the cause");
  const aborted = new AbortController();
  aborted.abort(new Error("the shopper left"));
  const abort = await rejects(s.make({}).post("/charges", charge(1), "codes:abort", { signal: aborted.signal }), "abort");
  eq([abort.code, abort.cause?.message], ["aborted", "the shopper left"], "the signal's reason as the cause");
  eq(throws(() => s.make({ timeoutMs: -1 }), "a bad option").code, "invalid-argument", "a bad option");
  // A headers function that throws: nothing sent, nothing kept, not retried.
  const boom = new Error("no token: signed out");
  let asked = 0;
  const broken = s.make({ headers: () => { asked++; throw boom; } });
  const headers = await rejects(broken.post("/charges", charge(1), "codes:headers"), "headers");
  eq([headers.code, headers.attempts, asked, headers.cause === boom], ["headers-failed", 0, 1, true], "a failing headers function");
  eq(s.stored("codes:headers"), null, "stored after a failing headers function");
  const busy = s.make({ headers: { Authorization: s.bearer, "X-Chaos": "delay-after-commit=800" } });
  const paying = busy.post("/charges", charge(3), "codes:busy");
  await sleep(300);
  eq(throws(() => busy.release("codes:busy"), "release").code, "operation-busy", "release while sending");
  await paying;
}

export async function should_retry(env) {
  const s = setup(env);
  const seen = [];
  const narrow = s.make({
    baseUrl: env.portal + "/busy/0",
    maxAttempts: 4,
    shouldRetry: (response, attempt) => {
      seen.push([response.status, response.headers.get("Retry-After"), attempt]);
      return attempt < 2;
    },
  });
  const outcome = await narrow.post("/charges", charge(1), "retry:narrow");
  eq([outcome.status, outcome.ok, outcome.attempts], [503, false, 2], "the 503 taken as final at the second attempt");
  eq(seen, [[503, "0", 1], [503, "0", 2]], "shouldRetry's arguments");
  eq(narrow.pendingOperations(), [], "a final answer leaves nothing pending");
  // Never asked about an answer that is not retried anyway.
  let asked = 0;
  const paid = await s.make({ shouldRetry: () => (asked++, true) }).post("/charges", charge(2100), "retry:paid");
  eq([paid.status, asked], [201, 0], "a 201");
}

export async function needs_attention(env) {
  const s = setup(env);
  for (const status of [424, 503]) {
    const client = s.make({ baseUrl: env.portal + `/attention/${status}` });
    const outcome = await client.post("/charges", charge(1), "attention:" + status);
    eq([outcome.status, outcome.ok, outcome.attempts, outcome.code], [status, false, 1, "operation-needs-attention"], "HTTP " + status);
    eq(client.pendingOperations(), [], "pending after " + status);
  }
  const refused = await s.make({}).post("/charges", charge(0), "attention:none");
  eq([refused.status, refused.code], [400, "invalid-request"], "another refusal's code");
  eq((await s.make({}).post("/charges", charge(2200), "attention:paid")).code, null, "a success's code");
}

export async function fetch_exact(env) {
  const s = setup(env);
  const client = s.make({});
  // Integers beyond 2^53, spacing, key order: sent as given.
  const text = '{ "amount":1999, "currency":"usd", "ref": 12345678901234567890123 }';
  const echoed = await client.fetch(env.portal + "/echo/x", { method: "POST", body: text, operation: "fetch:echo" });
  eq(await echoed.text(), text, "the body the server got");
  // Stored as given for a resume while it has no answer (here: never).
  const once = s.make({ maxAttempts: 1 });
  await rejects(once.fetch(UNREACHABLE + "/x", { method: "POST", body: text, operation: "fetch:stored" }), "a fetch to nowhere");
  eq(JSON.parse(s.stored("fetch:stored")).body, text, "the body stored for a resume");
  // Binary answers, byte for byte.
  const binary = await client.fetch(env.portal + "/binary/x", { method: "POST", body: "{}", operation: "fetch:binary" });
  const bytes = [...new Uint8Array(await binary.arrayBuffer())];
  eq([bytes.length, bytes.every((b, i) => b === i)], [256, true], "the answer's bytes");
  // A Request alone, as openapi-fetch calls a fetch: `fetcher(operation)`.
  const body = JSON.stringify(charge(2300));
  const request = () => new Request(env.server + "/charges", { method: "POST", body, headers: { "Content-Type": "application/json" } });
  const paid = await client.fetcher("fetch:request")(request());
  eq(paid.status, 201, "a Request alone");
  const noOperation = await rejects(client.fetch(request()), "no operation");
  check(noOperation.code === "invalid-argument" && /operation/.test(noOperation.message), noOperation.message);
  // init's fields: credentials and keepalive are passed on.
  const spy = spyFetch();
  const name = "probe" + crypto.randomUUID().slice(0, 8);
  document.cookie = `${name}=1; path=/`;
  try {
    const cookie = await client.fetch(env.portal + "/cookie/x", {
      method: "POST", body: "{}", credentials: "include", keepalive: true, operation: "fetch:cookie",
    });
    check(((await cookie.json()).cookie ?? "").includes(name), "credentials: include sends the cookie");
    eq(spy.calls.at(-1).init.keepalive, true, "keepalive");
  } finally {
    spy.restore();
    document.cookie = `${name}=; path=/; max-age=0`;
  }
  // What it cannot honour is refused, naming the field.
  for (const [field, init] of [
    ["mode", { mode: "no-cors" }],
    ["body", { body: new Blob(["{}"]) }],
    ["redirect", { redirect: "follow" }],
  ]) {
    const error = await rejects(client.fetch("/charges", { method: "POST", body: "{}", operation: "fetch:" + field, ...init }), field);
    check(error.code === "invalid-argument" && error.message.includes(field), error.message);
  }
  eq((await s.charges()).length, 1, "charges");
}

export async function release_and_clear(env) {
  const s = setup(env);
  const nowhere = { baseUrl: UNREACHABLE, maxAttempts: 1 };
  const client = s.make({ ...nowhere, keyTtlMs: 300 });
  // A pending operation, and one whose key expired unanswered (a tombstone).
  const pending = await leavePending(s.make(nowhere), "told:pending", charge(1));
  await leavePending(client, "told:expired", charge(2));
  await sleep(400);
  const looking = s.make({ keyTtlMs: 300 });
  eq(looking.pendingOperations(), ["told:pending"], "what the page is told is pending");
  eq(looking.expiredOperations().map((e) => e.operation), ["told:expired"], "what the page is told expired");
  // release is the page's decision: the pending request is forgotten, without a question.
  looking.release("told:pending");
  eq(looking.pendingOperations(), [], "pending after release");
  const again = await looking.post("/charges", charge(1), "told:pending");
  check(again.key !== pending.key, "the next post is a new operation, with a new key");
  // clear forgets the tombstone too, and says how many it forgot.
  eq(looking.clear(), 2, "operations cleared");
  eq(looking.expiredOperations(), [], "expired after clear");
}

export function csp(env, policy) {
  const frame = document.createElement("iframe");
  frame.src = env.portal + `/csp/${policy}/index.html`;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the page under CSP did not report")), 20000);
    addEventListener("message", function listener(e) {
      if (e.source !== frame.contentWindow) return;
      clearTimeout(timer);
      removeEventListener("message", listener);
      frame.remove();
      resolve(e.data);
    });
    document.body.appendChild(frame);
  }).then((seen) => {
    if (policy === "wasm") return eq(seen.ok, true, "init() with 'wasm-unsafe-eval': " + JSON.stringify(seen));
    eq([seen.ok, seen.name, seen.code], [false, "IdempotencyError", "wasm-blocked-by-csp"], "init() without it: " + JSON.stringify(seen));
    check(seen.message.includes("'wasm-unsafe-eval'") && seen.cause, "the message names the source: " + seen.message);
  });
}
"#)]
extern "C" {
    fn tombstone(env: JsValue) -> Promise;
    fn key_lifetime(env: JsValue) -> Promise;
    fn abort_unsent(env: JsValue) -> Promise;
    fn lock_budget(env: JsValue) -> Promise;
    fn lock_frozen(env: JsValue) -> Promise;
    fn lease_bound(env: JsValue) -> Promise;
    fn headers_context(env: JsValue) -> Promise;
    fn abort_all(env: JsValue) -> Promise;
    fn codes(env: JsValue) -> Promise;
    fn should_retry(env: JsValue) -> Promise;
    fn needs_attention(env: JsValue) -> Promise;
    fn fetch_exact(env: JsValue) -> Promise;
    fn release_and_clear(env: JsValue) -> Promise;
    fn csp(env: JsValue, policy: &str) -> Promise;
}

/// An operation whose key expired unanswered, in a client without
/// `onExpired` (as the recipes build it), is kept as a tombstone: the
/// next `post` of it is refused
/// (`operation-expired`, nothing sent), `keyFor` and `resume` too, in any
/// client, and `expiredOperations()` lists it, until the page has looked
/// and `release`s it; then it is a new operation with a new key.
#[wasm_bindgen_test]
async fn an_expired_unanswered_operation_is_never_silently_replaced_by_a_new_key() {
    passed(tombstone(env())).await;
}

/// A call whose retries would cross `keyTtlMs` stops before the key's
/// end (`key-expired`): no attempt leaves after it, and `onExpired` is
/// told (then the client forgets it: the page was told).
#[wasm_bindgen_test]
async fn no_key_is_sent_after_its_life() {
    passed(key_lifetime(env())).await;
}

/// A call aborted before its first request left (in the settle, or while
/// the headers function was asked) stores nothing: the page-start resume
/// loop finds nothing to send.
#[wasm_bindgen_test]
async fn an_abort_before_anything_was_sent_stores_nothing() {
    passed(abort_unsent(env())).await;
}

/// A second tab waits as long as the first tab's call may take (its
/// backoff and `Retry-After` waits included, seen through its lease), then
/// gets the first call's answer replayed.
#[wasm_bindgen_test]
async fn a_second_tab_waits_for_the_first_call_s_whole_budget() {
    passed(lock_budget(env())).await;
}

/// A lock held by a tab whose lease has run out (a frozen tab) is waited
/// for only as long as the call's own attempts could take (`lock-timeout`).
#[wasm_bindgen_test]
async fn a_lock_held_without_a_live_lease_is_waited_for_a_bounded_time() {
    passed(lock_frozen(env())).await;
}

/// A `busy` lease is bounded: a clock set back does not revive an old
/// record's lease, nor does a lease written ten years ahead keep a record
/// alive.
#[wasm_bindgen_test]
async fn the_busy_lease_is_bounded() {
    passed(lease_bound(env())).await;
}

/// The `headers` function is told `{ scope, operation, attempt }`.
#[wasm_bindgen_test]
async fn the_headers_function_is_told_the_scope_operation_and_attempt() {
    passed(headers_context(env())).await;
}

/// `abortAll()` (sign-out) aborts every call of the client, those waiting
/// for a lock too, and `clear()` works at once after it.
#[wasm_bindgen_test]
async fn abort_all_stops_every_call_and_lets_clear_run_at_once() {
    passed(abort_all(env())).await;
}

/// Every rejection and throw carries a stable `code`, and its `cause`
/// where there is one; a failing headers function is not retried as a
/// network error and leaves nothing stored.
#[wasm_bindgen_test]
async fn every_rejection_has_a_stable_code_and_its_cause() {
    passed(codes(env())).await;
}

/// `shouldRetry(response, attempt)` narrows what is retried: `false` makes
/// the answer final; it is never asked about a final answer.
#[wasm_bindgen_test]
async fn should_retry_narrows_what_is_retried() {
    passed(should_retry(env())).await;
}

/// `operation-needs-attention` is final (424, and even with a status that
/// is retried otherwise), with the outcome's `code`.
#[wasm_bindgen_test]
async fn operation_needs_attention_is_final_with_its_code() {
    passed(needs_attention(env())).await;
}

/// `fetch` sends the body exactly as given (integers beyond 2^53 intact),
/// returns the answer's bytes intact, takes a `Request` alone
/// (`fetcher(operation)`), passes `credentials` and `keepalive` on, and
/// refuses what it cannot honour, naming it.
#[wasm_bindgen_test]
async fn fetch_sends_and_returns_bytes_exactly_and_honours_init() {
    passed(fetch_exact(env())).await;
}

/// What `release` and `clear` do to an operation that may have run (the
/// page's decision, documented rather than refused): they forget a pending
/// request and a tombstone like any record, after `pendingOperations()` and
/// `expiredOperations()` have told the page about them; the next call is a
/// new operation.
#[wasm_bindgen_test]
async fn release_and_clear_forget_pending_and_expired_operations_as_told() {
    passed(release_and_clear(env())).await;
}

/// A page whose CSP lacks `'wasm-unsafe-eval'` gets `init()` rejected with
/// a code and a message naming it; with it, `init()` works.
#[wasm_bindgen_test]
async fn init_under_a_csp_without_wasm_unsafe_eval_says_what_is_missing() {
    passed(csp(env(), "wasm")).await;
    passed(csp(env(), "strict")).await;
}
