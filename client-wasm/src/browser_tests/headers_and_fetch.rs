//! The options a page's own `fetch` code uses: `headers` (a `Headers`, a
//! function called before every attempt and told the scope, operation and
//! attempt), `credentials`, the per-call `key`, and the class's `fetch`
//! (a standard `Response`, bodies sent and returned byte for byte).
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
export async function headers_instances(env) {
  const s = setup(env);
  // A Headers instance, as the client's headers and as a call's.
  const withHeaders = s.make({ headers: new Headers({ Authorization: s.bearer }) });
  eq((await withHeaders.post("/charges", charge(1300), "headers-instance")).status, 201, "a Headers instance");
  const perCall = s.make({ headers: undefined });
  const call = await perCall.post("/charges", charge(1301), "headers-call", { headers: new Headers({ Authorization: s.bearer }) });
  eq(call.status, 201, "a call's Headers instance");
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
"#;

/// A `Headers` instance is taken as headers, for the client and for a call.
#[wasm_bindgen_test]
async fn a_headers_instance_is_taken_as_headers() {
    run(TESTS, "headers_instances", "").await;
}

/// A `headers` function is called before every attempt, and the token it
/// gives at that moment is the one sent.
#[wasm_bindgen_test]
async fn a_headers_function_is_called_before_every_attempt() {
    run(TESTS, "headers_function", "").await;
}

/// The `headers` function is told `{ scope, operation, attempt }`.
#[wasm_bindgen_test]
async fn the_headers_function_is_told_the_scope_operation_and_attempt() {
    run(TESTS, "headers_context", "").await;
}

/// `credentials: "include"` sends the page's cookies to another origin;
/// the default and `"omit"` do not.
#[wasm_bindgen_test]
async fn credentials_are_passed_to_fetch() {
    run(TESTS, "credentials", "").await;
}

/// The per-call `key` is sent and stored as the operation's key, so the
/// operation continues on another device; another key for it is refused.
#[wasm_bindgen_test]
async fn the_embedder_s_key_is_used_and_a_different_one_refused() {
    run(TESTS, "per_call_key", "").await;
}

/// `fetch(input, init)` sends as `send` does and resolves with a standard
/// `Response`, headers included; it rejects as `send` does.
#[wasm_bindgen_test]
async fn fetch_resolves_with_a_standard_response() {
    run(TESTS, "fetch_function", "").await;
}

/// `fetch` sends the body exactly as given (integers beyond 2^53 intact),
/// returns the answer's bytes intact, takes a `Request` alone
/// (`fetcher(operation)`), passes `credentials` and `keepalive` on, and
/// refuses what it cannot honour, naming it.
#[wasm_bindgen_test]
async fn fetch_sends_and_returns_bytes_exactly_and_honours_init() {
    run(TESTS, "fetch_exact", "").await;
}
