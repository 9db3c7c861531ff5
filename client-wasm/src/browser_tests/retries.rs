//! Retries with the same key: timeouts, dropped answers, giving up,
//! resuming, `Retry-After`, and redirects, which are not answers.

use super::*;

/// An answer slower than `timeoutMs` is abandoned and retried with the same
/// key; the retry gets the stored answer, and there is one charge.
#[wasm_bindgen_test]
async fn a_slow_answer_is_retried_with_the_same_key_and_charges_once() {
    let setup = Setup::new();
    let options = setup.options(Some("delay-after-commit=3000"));
    set(&options, "timeoutMs", 500);
    let client = client_with(options);
    let key = client.key_for("slow".into()).unwrap();
    let outcome = post(&client, 700, "slow").await;
    assert_eq!(outcome.status, 201, "{outcome:?}");
    assert!(outcome.attempts >= 2, "{outcome:?}");
    assert!(outcome.replayed, "{outcome:?}");
    assert_eq!(outcome.key, key);
    assert_eq!(setup.charges().await, 1);
}

/// A connection dropped after the commit is retried with the same key, and
/// the retry is answered with the stored response.
///
/// Who retries depends on the connection: on a fresh one `fetch` rejects and
/// the client sends attempt 2; on a reused keep-alive connection Chromium
/// itself resends the request once before `fetch` sees anything, so the
/// client counts one attempt. Either way the resend carries the same
/// `Idempotency-Key` and is replayed.
#[wasm_bindgen_test]
async fn a_dropped_answer_is_retried_and_replayed() {
    let setup = Setup::new();
    let client = setup.client(Some("drop-after-commit"));
    let outcome = post(&client, 800, "dropped").await;
    assert_eq!(outcome.status, 201, "{outcome:?}");
    assert!(matches!(outcome.attempts, 1 | 2), "{outcome:?}");
    assert!(outcome.replayed, "{outcome:?}");
    assert_eq!(setup.charges().await, 1);
}

/// The story of a reload mid-payment: the server commits, the first page
/// gives up without an answer (here: its only attempt times out); the next
/// page finds the operation pending and resumes it with the same key and
/// body, and gets the stored answer.
#[wasm_bindgen_test]
async fn a_stored_request_is_resumed() {
    let setup = Setup::new();
    let options = setup.options(Some("delay-after-commit=3000"));
    set(&options, "maxAttempts", 1);
    set(&options, "timeoutMs", 300);
    let first_page = client_with(options);
    let key = first_page.key_for("checkout:reload".into()).unwrap();
    let error = rejected(first_page.post(
        "/charges".into(),
        charge(900),
        "checkout:reload".into(),
        JsValue::UNDEFINED,
    ))
    .await;
    assert_eq!(error.kind, "exhausted", "{error:?}");
    assert!(
        error.message.contains("timed out after 300 ms"),
        "{error:?}"
    );
    assert!(error.message.contains("1 attempt"), "{error:?}");
    assert_eq!(
        (
            error.operation.as_deref(),
            error.key.as_deref(),
            error.attempts
        ),
        (Some("checkout:reload"), Some(key.as_str()), 1)
    );
    assert_eq!(first_page.pending_operations(), vec!["checkout:reload"]);

    let next_page = setup.client(None);
    assert_eq!(next_page.pending_operations(), vec!["checkout:reload"]);
    let resumed = resolved(next_page.resume("checkout:reload".into(), JsValue::UNDEFINED)).await;
    assert_eq!(resumed.status, 201, "{resumed:?}");
    assert!(resumed.replayed, "{resumed:?}");
    assert_eq!(resumed.key, key);
    assert_eq!(get(&resumed.body, "amount").as_f64(), Some(900.0));
    assert!(next_page.pending_operations().is_empty());
    assert_eq!(setup.charges().await, 1);
}

/// `resume` of an operation with no stored request rejects as `invalid`.
#[wasm_bindgen_test]
async fn resuming_an_unknown_operation_rejects() {
    let client = Setup::new().client(None);
    let error = rejected(client.resume("never-sent".into(), JsValue::UNDEFINED)).await;
    assert_eq!((error.kind.as_str(), error.attempts), ("invalid", 0));
    assert!(error.message.contains("no stored request"), "{error:?}");
}

/// After `maxAttempts` the call rejects as `exhausted` with the cause, and
/// keeps the key and the request.
#[wasm_bindgen_test]
async fn giving_up_keeps_the_key_and_the_request() {
    let setup = Setup::new();
    let options = setup.options(None);
    // Nothing listens on port 9 of the loopback: connection refused.
    set(&options, "baseUrl", "http://127.0.0.1:9");
    set(&options, "maxAttempts", 3);
    let client = client_with(options);
    let key = client.key_for("unreachable".into()).unwrap();
    let error = rejected(client.post(
        "/charges".into(),
        charge(100),
        "unreachable".into(),
        JsValue::UNDEFINED,
    ))
    .await;
    assert_eq!((error.kind.as_str(), error.attempts), ("exhausted", 3));
    assert_eq!(error.last_status, None);
    assert!(error.message.contains("3 attempts"), "{error:?}");
    assert!(error.message.contains("network error"), "{error:?}");
    assert_eq!(client.key_for("unreachable".into()).unwrap(), key);
    assert_eq!(client.pending_operations(), vec!["unreachable"]);
}

/// A `503` with `Retry-After: 1` is retried after one second, whatever the
/// backoff settings say.
#[wasm_bindgen_test]
async fn retry_after_is_obeyed() {
    let setup = Setup::new();
    let options = setup.options(None);
    set(&options, "baseUrl", String::from(portal()) + "/busy/1");
    set(&options, "maxAttempts", 2);
    let events = Events::install(&options);
    let error = rejected(client_with(options).post(
        "/charges".into(),
        charge(100),
        "busy".into(),
        JsValue::UNDEFINED,
    ))
    .await;
    assert_eq!(
        (error.kind.as_str(), error.attempts),
        ("exhausted", 2),
        "{error:?}"
    );
    assert_eq!(error.last_status, Some(503));
    let (first, second) = (events.get(0), events.get(1));
    assert_eq!(number(&first, "status"), Some(503.0));
    assert_eq!(number(&first, "retryInMs"), Some(1000.0));
    let waited = number(&second, "at").unwrap()
        - number(&second, "latencyMs").unwrap()
        - number(&first, "at").unwrap();
    assert!(waited >= 990.0, "waited {waited} ms");
    assert_eq!(number(&second, "retryInMs"), None);
}

/// A `Retry-After` longer than `maxRetryAfterMs` is waited that long.
#[wasm_bindgen_test]
async fn a_long_retry_after_is_capped_by_max_retry_after_ms() {
    let setup = Setup::new();
    let options = setup.options(None);
    set(&options, "baseUrl", String::from(portal()) + "/busy/3600");
    set(&options, "maxAttempts", 2);
    set(&options, "maxRetryAfterMs", 250);
    let events = Events::install(&options);
    let started = now();
    let error = rejected(client_with(options).post(
        "/charges".into(),
        charge(100),
        "capped".into(),
        JsValue::UNDEFINED,
    ))
    .await;
    assert_eq!(error.kind, "exhausted", "{error:?}");
    assert_eq!(number(&events.get(0), "retryInMs"), Some(250.0));
    assert!(now() - started < 3000.0);
}

/// A captive portal answers a payment with a `302` to its login page. That
/// is not the server's answer: not `ok`, not final. The call is retried and
/// gives up as `exhausted` with no status, keeping the request to resume
/// once the network is back.
#[wasm_bindgen_test]
async fn a_redirect_is_not_an_answer() {
    let setup = Setup::new();
    let options = setup.options(None);
    set(&options, "baseUrl", String::from(portal()) + "/redirect");
    set(&options, "maxAttempts", 2);
    let events = Events::install(&options);
    let error = rejected(client_with(options).post(
        "/charges".into(),
        charge(100),
        "portal".into(),
        JsValue::UNDEFINED,
    ))
    .await;
    assert_eq!(
        (error.kind.as_str(), error.attempts),
        ("exhausted", 2),
        "{error:?}"
    );
    assert_eq!(error.last_status, None, "{error:?}");
    assert!(error.message.contains("redirected"), "{error:?}");
    assert_eq!(
        get(&events.get(0), "error").as_string().as_deref(),
        Some("redirect")
    );
    assert_eq!(number(&events.get(0), "status"), None);

    // A GET changes nothing and may follow: it gets the login page.
    let options = setup.options(None);
    set(&options, "baseUrl", String::from(portal()) + "/redirect");
    let page = resolved(client_with(options).send(
        "GET".into(),
        "/charges".into(),
        JsValue::NULL,
        "look".into(),
        JsValue::UNDEFINED,
    ))
    .await;
    assert_eq!(page.status, 200);
}
