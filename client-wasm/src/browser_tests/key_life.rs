//! A key's life: an operation whose key expired unanswered is reported
//! (`onExpired`), kept as a tombstone and never resent or replaced by a new
//! key until the page releases it; no key is sent after its life; a device
//! clock that jumps ends it; `release` and `clear` of what may have run;
//! records of the first release resumed, and of a later one left alone.
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
"#;

/// An operation whose key outlived `keyTtlMs` unanswered is reported once
/// through `onExpired`, kept as a tombstone, and never resent; the next
/// call for it is refused rather than sent with a new key.
#[wasm_bindgen_test]
async fn an_expired_unanswered_operation_is_reported_and_never_resent() {
    run(TESTS, "expiry", "").await;
}

/// An operation whose key expired unanswered, in a client without
/// `onExpired` (as the recipes build it), is kept as a tombstone: the
/// next `post` of it is refused
/// (`operation-expired`, nothing sent), `keyFor` and `resume` too, in any
/// client, and `expiredOperations()` lists it, until the page has looked
/// and `release`s it; then it is a new operation with a new key.
#[wasm_bindgen_test]
async fn an_expired_unanswered_operation_is_never_silently_replaced_by_a_new_key() {
    run(TESTS, "tombstone", "").await;
}

/// A call whose retries would cross `keyTtlMs` stops before the key's
/// end (`key-expired`): no attempt leaves after it, and `onExpired` is
/// told (then the client forgets it: the page was told).
#[wasm_bindgen_test]
async fn no_key_is_sent_after_its_life() {
    run(TESTS, "key_lifetime", "").await;
}

/// A device clock set back before a key was made, or forward past its
/// expiry, ends the key's life (reported through `onExpired`): the client
/// never resends a key the server may have forgotten.
#[wasm_bindgen_test]
async fn a_clock_that_jumps_never_makes_the_client_resend_an_old_key() {
    run(TESTS, "clock", "").await;
}

/// What `release` and `clear` do to an operation that may have run (the
/// page's decision, documented rather than refused): they forget a pending
/// request and a tombstone like any record, after `pendingOperations()` and
/// `expiredOperations()` have told the page about them; the next call is a
/// new operation.
#[wasm_bindgen_test]
async fn release_and_clear_forget_pending_and_expired_operations_as_told() {
    run(TESTS, "release_and_clear", "").await;
}

/// The committed record of the first release (`fixtures/record-v1.json`)
/// is listed, resumed with its key and written back in the current format;
/// a record of a later version is left untouched and refuses only its own
/// operation, naming the version.
#[wasm_bindgen_test]
async fn a_first_release_record_is_resumed_and_a_later_one_refused_alone() {
    run(TESTS, "upgrades", include_str!("fixtures/record-v1.json")).await;
}
