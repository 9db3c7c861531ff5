//! Waiting for another tab's call of the same operation: as long as that
//! call may take (seen through its `busy` lease), for a bounded time when
//! the lease has run out (a frozen tab), and the lease itself bounded.
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
"#;

/// A second tab waits as long as the first tab's call may take (its
/// backoff and `Retry-After` waits included, seen through its lease), then
/// gets the first call's answer replayed.
#[wasm_bindgen_test]
async fn a_second_tab_waits_for_the_first_call_s_whole_budget() {
    run(TESTS, "lock_budget", "").await;
}

/// A lock held by a tab whose lease has run out (a frozen tab) is waited
/// for only as long as the call's own attempts could take (`lock-timeout`).
#[wasm_bindgen_test]
async fn a_lock_held_without_a_live_lease_is_waited_for_a_bounded_time() {
    run(TESTS, "lock_frozen", "").await;
}

/// A `busy` lease is bounded: a clock set back does not revive an old
/// record's lease, nor does a lease written ten years ahead keep a record
/// alive.
#[wasm_bindgen_test]
async fn the_busy_lease_is_bounded() {
    run(TESTS, "lease_bound", "").await;
}
