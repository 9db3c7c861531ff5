//! The `signal` call option: an abort stops waiting at once and keeps the
//! key and the request for `resume`.

use super::*;

fn with_signal(signal: &web_sys::AbortSignal) -> JsValue {
    let options: JsValue = Object::new().into();
    set(&options, "signal", signal.clone());
    options
}

/// An abort while the server is still working rejects at once as
/// `aborted`; the operation stays pending, and `resume` gets the answer of
/// the run that happened.
#[wasm_bindgen_test]
async fn an_abort_in_flight_rejects_at_once_and_keeps_the_request() {
    let setup = Setup::new();
    let client = setup.client(Some("delay-after-commit=2000"));
    let controller = web_sys::AbortController::new().unwrap();
    abort_after(&controller, 400.0);
    let started = now();
    let error = rejected(client.post(
        "/charges".into(),
        charge(1100),
        "abort-in-flight".into(),
        with_signal(&controller.signal()),
    ))
    .await;
    assert!(now() - started < 1500.0, "rejected at the abort");
    assert_eq!(
        (error.kind.as_str(), error.attempts),
        ("aborted", 1),
        "{error:?}"
    );
    assert!(error.message.contains("resume"), "{error:?}");
    assert_eq!(client.pending_operations(), vec!["abort-in-flight"]);

    let resumed = resolved(
        setup
            .client(None)
            .resume("abort-in-flight".into(), JsValue::UNDEFINED),
    )
    .await;
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
    let options = setup.options(None);
    set(&options, "baseUrl", String::from(portal()) + "/busy/30");
    let client = client_with(options);
    let controller = web_sys::AbortController::new().unwrap();
    abort_after(&controller, 500.0);
    let started = now();
    let error = rejected(client.post(
        "/charges".into(),
        charge(1200),
        "abort-waiting".into(),
        with_signal(&controller.signal()),
    ))
    .await;
    assert!(now() - started < 2000.0, "not after 30 s");
    assert_eq!(
        (error.kind.as_str(), error.attempts),
        ("aborted", 1),
        "{error:?}"
    );
    assert_eq!(error.last_status, Some(503));
    assert_eq!(client.pending_operations(), vec!["abort-waiting"]);
}

/// An already aborted signal rejects without sending or storing a request.
#[wasm_bindgen_test]
async fn an_aborted_signal_sends_nothing() {
    let setup = Setup::new();
    let client = setup.client(None);
    let controller = web_sys::AbortController::new().unwrap();
    controller.abort();
    let error = rejected(client.post(
        "/charges".into(),
        charge(1300),
        "abort-first".into(),
        with_signal(&controller.signal()),
    ))
    .await;
    assert_eq!(
        (error.kind.as_str(), error.attempts),
        ("aborted", 0),
        "{error:?}"
    );
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
    let first = client.post(
        "/charges".into(),
        charge(1400),
        "locked".into(),
        JsValue::UNDEFINED,
    );
    sleep(200.0).await;
    let controller = web_sys::AbortController::new().unwrap();
    abort_after(&controller, 200.0);
    let started = now();
    let error = rejected(client.post(
        "/charges".into(),
        charge(1400),
        "locked".into(),
        with_signal(&controller.signal()),
    ))
    .await;
    assert!(now() - started < 1000.0, "rejected at the abort");
    assert_eq!(error.kind, "aborted", "{error:?}");
    let first = resolved(first).await;
    assert_eq!((first.status, first.replayed), (201, false));
    assert_eq!(setup.charges().await, 1);
}
