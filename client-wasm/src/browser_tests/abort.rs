//! Aborts: the `signal` call option (an abort stops waiting at once and
//! keeps the key and the request for `resume`; an already aborted signal
//! or an abort before anything was sent stores nothing; the listener is
//! added for a call and removed when it settles) and `abortAll()`.

use super::page::run;
use super::*;

/// Call options with a signal that aborts after `ms` milliseconds (at once
/// for 0).
fn aborting_after(ms: f64) -> JsValue {
    let controller = web_sys::AbortController::new().unwrap();
    if ms == 0.0 {
        controller.abort();
    } else {
        abort_after(&controller, ms);
    }
    object(&[("signal", controller.signal().into())])
}

/// Pays with a signal aborting after `abort_ms`, which must reject as
/// `aborted` after `attempts` attempts; the rejection and how long it took
/// to come.
async fn aborted_payment(
    client: &IdempotentClient,
    operation: &str,
    abort_ms: f64,
    attempts: u32,
) -> (Rejection, f64) {
    let started = now();
    let error = rejected(pay(client, 1100, operation, aborting_after(abort_ms))).await;
    assert_eq!(
        (error.kind.as_str(), error.attempts),
        ("aborted", attempts),
        "{error:?}"
    );
    (error, now() - started)
}

/// An abort while the server is still working rejects at once as
/// `aborted`; the operation stays pending, and `resume` gets the answer of
/// the run that happened.
#[wasm_bindgen_test]
async fn an_abort_in_flight_rejects_at_once_and_keeps_the_request() {
    let setup = Setup::new();
    let client = setup.client(Some("delay-after-commit=2000"));
    let (error, took) = aborted_payment(&client, "abort-in-flight", 400.0, 1).await;
    assert!(took < 1500.0, "rejected at the abort, not after {took} ms");
    assert!(error.message.contains("resume"), "{error:?}");
    assert_eq!(client.pending_operations(), vec!["abort-in-flight"]);

    let later = setup.client(None);
    let resumed = resolved(later.resume("abort-in-flight".into(), JsValue::UNDEFINED)).await;
    assert_eq!(
        (resumed.status, resumed.replayed),
        (201, true),
        "{resumed:?}"
    );
    assert_eq!(Some(resumed.key), error.key);
    assert_eq!(setup.charges().await, 1);
}

/// An abort during the wait before a retry (here a gateway's
/// `Retry-After: 30`) rejects at once, with the last status.
#[wasm_bindgen_test]
async fn an_abort_during_the_wait_rejects_at_once() {
    let setup = Setup::new();
    let client = setup.client_with(None, &[("baseUrl", on_portal("/busy/30"))]);
    let (error, took) = aborted_payment(&client, "abort-waiting", 500.0, 1).await;
    assert!(took < 2000.0, "rejected at the abort, not after {took} ms");
    assert_eq!(error.last_status, Some(503));
    assert_eq!(client.pending_operations(), vec!["abort-waiting"]);
}

/// An already aborted signal rejects without sending or storing a request.
#[wasm_bindgen_test]
async fn an_aborted_signal_sends_nothing() {
    let setup = Setup::new();
    let client = setup.client(None);
    aborted_payment(&client, "abort-first", 0.0, 0).await;
    assert!(client.pending_operations().is_empty());
    assert_eq!(setup.charges().await, 0);
}

/// A call waiting for the operation's lock (another call of the same
/// operation is in flight) stops waiting on abort, and the first call is
/// not disturbed.
#[wasm_bindgen_test]
async fn an_abort_while_waiting_for_the_lock_rejects_at_once() {
    let setup = Setup::new();
    let client = setup.client(Some("delay-after-commit=1500"));
    let first = pay(&client, 1100, "locked", JsValue::UNDEFINED);
    sleep(200.0).await;
    let (_, took) = aborted_payment(&client, "locked", 200.0, 0).await;
    assert!(took < 1000.0, "rejected at the abort, not after {took} ms");
    let first = resolved(first).await;
    assert_eq!((first.status, first.replayed), (201, false));
    assert_eq!(setup.charges().await, 1);
}

/// The tests of this file, in JavaScript as a page writes it: each
/// `export`ed function is one test, run by [`run`] with `page.js`'s
/// helpers in scope.
const TESTS: &str = r#"
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

export async function abort_listeners(env) {
  const s = setup(env);
  const client = s.make({});
  // The abort listener is removed once a call settles.
  const controller = new AbortController();
  const listeners = new Set();
  let added = 0;
  const { signal } = controller;
  const add = signal.addEventListener.bind(signal);
  const remove = signal.removeEventListener.bind(signal);
  signal.addEventListener = (type, listener, options) => {
    if (type === "abort") {
      added++;
      listeners.add(listener);
    }
    add(type, listener, options);
  };
  signal.removeEventListener = (type, listener, options) => {
    if (type === "abort") listeners.delete(listener);
    remove(type, listener, options);
  };
  for (let i = 0; i < 3; i++) await client.post("/charges", charge(1200 + i), "listener-" + i, { signal });
  // One listener per call, each removed when its call settled.
  eq([added, listeners.size], [3, 0], "abort listeners added, and left on a long-lived signal");
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
"#;

/// An already aborted signal rejects with nothing stored, not even a key.
#[wasm_bindgen_test]
async fn an_already_aborted_signal_stores_nothing() {
    run(TESTS, "aborted_signal", "").await;
}

/// A call aborted before its first request left (in the settle, or while
/// the headers function was asked) stores nothing: the page-start resume
/// loop finds nothing to send.
#[wasm_bindgen_test]
async fn an_abort_before_anything_was_sent_stores_nothing() {
    run(TESTS, "abort_unsent", "").await;
}

/// A call removes its abort listener once it settles: a long-lived signal
/// does not collect one per call.
#[wasm_bindgen_test]
async fn the_abort_listener_is_removed_when_the_call_settles() {
    run(TESTS, "abort_listeners", "").await;
}

/// `abortAll()` (sign-out) aborts every call of the client, those waiting
/// for a lock too, and `clear()` works at once after it.
#[wasm_bindgen_test]
async fn abort_all_stops_every_call_and_lets_clear_run_at_once() {
    run(TESTS, "abort_all", "").await;
}
