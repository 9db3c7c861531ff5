//! The `signal` call option: an abort stops waiting at once and keeps the
//! key and the request for `resume`.

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
