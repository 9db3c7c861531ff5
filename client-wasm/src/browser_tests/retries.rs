//! Retries with the same key: timeouts, dropped answers, giving up,
//! resuming, `Retry-After`, and redirects, which are not answers.

use super::*;

/// An answer slower than `timeoutMs` (here the call's) is abandoned and
/// retried with the same key; the retry gets the stored answer, and there
/// is one charge.
#[wasm_bindgen_test]
async fn a_slow_answer_is_retried_with_the_same_key_and_charges_once() {
    let setup = Setup::new();
    let client = setup.client(Some("delay-after-commit=3000"));
    let key = client.key_for("slow".into()).unwrap();
    let call = pay(&client, 700, "slow", object(&[("timeoutMs", 500.into())]));
    let outcome = resolved(call).await;
    assert_eq!(outcome.status, 201, "{outcome:?}");
    // The first attempt times out; the second is answered at once with the
    // stored response.
    assert_eq!(outcome.attempts, 2, "{outcome:?}");
    assert!(outcome.replayed, "{outcome:?}");
    assert_eq!(outcome.key, key);
    assert_eq!(setup.charges().await, 1);
}

/// A connection dropped after the commit is retried with the same key, and
/// the retry is answered with the stored response.
///
/// Who retries depends on the connection: on a fresh one `fetch` rejects and
/// the client sends attempt 2; on a reused keep-alive connection the
/// browser (Chromium and Firefox alike) itself resends the request once before `fetch` sees anything, so the
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
    let once = [("maxAttempts", JsValue::from(1)), ("timeoutMs", 300.into())];
    let first_page = setup.client_with(Some("delay-after-commit=3000"), &once);
    let key = first_page.key_for("checkout:reload".into()).unwrap();
    let error = rejected(pay(&first_page, 900, "checkout:reload", JsValue::UNDEFINED)).await;
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
    let three = [("baseUrl", UNREACHABLE.into()), ("maxAttempts", 3.into())];
    let client = setup.client_with(None, &three);
    let key = client.key_for("unreachable".into()).unwrap();
    let error = rejected(pay(&client, 100, "unreachable", JsValue::UNDEFINED)).await;
    assert_eq!((error.kind.as_str(), error.attempts), ("exhausted", 3));
    assert_eq!(error.last_status, None);
    assert!(error.message.contains("3 attempts"), "{error:?}");
    assert!(error.message.contains("network error"), "{error:?}");
    assert_eq!(client.key_for("unreachable".into()).unwrap(), key);
    assert_eq!(client.pending_operations(), vec!["unreachable"]);
}

/// Pays through the portal at `route` with two attempts and `extra`
/// options: the rejection, and the attempt events.
async fn through_portal(route: &str, extra: &[(&str, JsValue)]) -> (Rejection, Events) {
    let setup = Setup::new();
    let mut members = vec![("baseUrl", on_portal(route)), ("maxAttempts", 2.into())];
    members.extend_from_slice(extra);
    let options = setup.options_with(None, &members);
    let events = Events::install(&options);
    let error = rejected(pay(&client_of(options), 100, route, JsValue::UNDEFINED)).await;
    assert_eq!(
        (error.kind.as_str(), error.attempts),
        ("exhausted", 2),
        "{error:?}"
    );
    (error, events)
}

/// A `503` with `Retry-After: 1` is retried after one second, whatever the
/// backoff settings say.
#[wasm_bindgen_test]
async fn retry_after_is_obeyed() {
    let (error, events) = through_portal("/busy/1", &[]).await;
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

/// A `Retry-After` HTTP-date is waited until that date, in its
/// IMF-fixdate form and in the asctime form, which names no zone and is
/// GMT all the same. A date misread (or read as local time) would be
/// waited `maxRetryAfterMs` or not at all.
#[wasm_bindgen_test]
async fn a_retry_after_date_is_waited_until() {
    for form in ["imf", "asctime"] {
        let route = String::from("/busy-until/3/") + form;
        let cap = [("maxRetryAfterMs", 5000.into())];
        let (_, events) = through_portal(&route, &cap).await;
        let retry_in = number(&events.get(0), "retryInMs").unwrap();
        assert!(
            (1000.0..=3000.0).contains(&retry_in),
            "{form}: {retry_in} ms"
        );
    }
}

/// A `Retry-After` longer than `maxRetryAfterMs` is waited that long.
#[wasm_bindgen_test]
async fn a_long_retry_after_is_capped_by_max_retry_after_ms() {
    let started = now();
    let (_, events) = through_portal("/busy/3600", &[("maxRetryAfterMs", 250.into())]).await;
    assert_eq!(number(&events.get(0), "retryInMs"), Some(250.0));
    assert!(now() - started < 3000.0);
}

/// A captive portal answers a payment with a `302` to its login page. That
/// is not the server's answer: not `ok`, and not retried either (the
/// portal answers the same until the shopper logs in): the call rejects
/// as `exhausted` after that one attempt, with no status, keeping the
/// request to resume once the network is back.
#[wasm_bindgen_test]
async fn a_redirect_is_not_an_answer() {
    let setup = Setup::new();
    let members = [
        ("baseUrl", on_portal("/redirect")),
        ("maxAttempts", 3.into()),
    ];
    let options = setup.options_with(None, &members);
    let events = Events::install(&options);
    let client = client_of(options);
    let error = rejected(pay(&client, 100, "/redirect", JsValue::UNDEFINED)).await;
    assert_eq!(
        (error.kind.as_str(), error.attempts),
        ("exhausted", 1),
        "{error:?}"
    );
    assert_eq!(error.last_status, None, "{error:?}");
    assert!(error.message.contains("redirected"), "{error:?}");
    assert_eq!(events.len(), 1);
    let first = events.get(0);
    assert_eq!(
        get(&first, "error").as_string().as_deref(),
        Some("redirect")
    );
    assert_eq!(number(&first, "status"), None);
    assert_eq!(client.pending_operations(), vec!["/redirect"]);

    // A GET changes nothing and may follow: it gets the login page.
    let looking = Setup::new().client_with(None, &[("baseUrl", on_portal("/redirect"))]);
    let u = JsValue::UNDEFINED;
    let page = looking.send("GET".into(), "/charges".into(), u.clone(), "look".into(), u);
    assert_eq!(resolved(page).await.status, 200);
}
