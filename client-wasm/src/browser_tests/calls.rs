//! Calls and what they resolve or reject with: outcomes, bad arguments,
//! per-call options, `onAttempt`.

use super::*;

/// A post resolves with `{status, ok, body, replayed, key, attempts}`.
#[wasm_bindgen_test]
async fn a_post_returns_the_outcome() {
    let setup = Setup::new();
    let client = setup.client(None);
    let key = client.key_for("checkout:1".into()).unwrap();
    let outcome = post(&client, 1999, "checkout:1").await;
    assert_eq!(outcome.status, 201, "{outcome:?}");
    assert!(outcome.ok);
    assert!(!outcome.replayed);
    assert_eq!(outcome.key, key);
    assert_eq!(outcome.attempts, 1);
    assert_eq!(get(&outcome.body, "amount").as_f64(), Some(1999.0));
    assert_eq!(
        get(&outcome.body, "currency").as_string().as_deref(),
        Some("usd")
    );
    assert!(get(&outcome.body, "id")
        .as_string()
        .unwrap()
        .starts_with("ch_"));
    assert!(client.pending_operations().is_empty());
    assert_eq!(setup.charges().await, 1);
}

/// A refused request is an answer, not a reason to retry: the outcome
/// carries the parsed problem+json.
#[wasm_bindgen_test]
async fn a_client_error_is_an_answer_with_its_problem() {
    let setup = Setup::new();
    let outcome = post(&setup.client(None), 0, "bad-amount").await;
    assert_eq!(outcome.status, 400, "{outcome:?}");
    assert!(!outcome.ok);
    assert_eq!(outcome.attempts, 1);
    let problem_type = get(&outcome.body, "type").as_string().unwrap();
    assert!(problem_type.ends_with("invalid-request"), "{problem_type}");
    assert_eq!(setup.charges().await, 0);
}

/// A business `409` (not enough stock) is a final answer: no retry, and the
/// operation is no longer pending.
#[wasm_bindgen_test]
async fn a_business_conflict_is_final() {
    let setup = Setup::new();
    let client = setup.client(None);
    let body = JSON::parse(r#"{"item_id":"sku-poster","quantity":1000}"#).unwrap();
    let outcome = resolved(client.post(
        "/reservations".into(),
        body,
        "too-many".into(),
        JsValue::UNDEFINED,
    ))
    .await;
    assert_eq!(outcome.status, 409, "{outcome:?}");
    assert_eq!(outcome.attempts, 1, "{outcome:?}");
    let problem_type = get(&outcome.body, "type").as_string().unwrap();
    assert!(
        problem_type.ends_with("insufficient-inventory"),
        "{problem_type}"
    );
    assert!(client.pending_operations().is_empty());
}

/// Sending the same operation again replays the first answer.
#[wasm_bindgen_test]
async fn a_replay_says_replayed_true() {
    let setup = Setup::new();
    let first = post(&setup.client(None), 500, "checkout:2").await;
    let second = post(&setup.client(None), 500, "checkout:2").await;
    assert_eq!((first.status, first.replayed), (201, false));
    assert_eq!((second.status, second.replayed), (201, true));
    assert_eq!(first.key, second.key);
    assert_eq!(get(&first.body, "id"), get(&second.body, "id"));
    assert_eq!(setup.charges().await, 1);
}

/// A bad argument is a rejected promise of kind `invalid`, never a throw
/// from the glue, and nothing is sent or stored: a missing or mistyped
/// operation, method or path, a body JSON cannot hold, a body on GET or
/// HEAD, bad per-call options.
#[wasm_bindgen_test]
async fn bad_arguments_reject_invalid_and_send_nothing() {
    let setup = Setup::new();
    let client = setup.client(None);
    let u = || JsValue::UNDEFINED;
    let send = |method: JsValue, path: JsValue, body: JsValue, op: JsValue| {
        client.send(method, path, body, op, u())
    };
    let post = |body: JsValue, op: JsValue| send("POST".into(), "/charges".into(), body, op);
    let function: JsValue = Function::new_no_args("").into();
    let cases: [(&str, Promise); 12] = [
        ("operation", post(charge(1), u())),
        ("operation", post(charge(1), 42.into())),
        ("operation", post(charge(1), "".into())),
        ("operation", client.resume(u(), u())),
        (
            "path",
            send("POST".into(), u(), charge(1), "op-path".into()),
        ),
        (
            "method",
            send("PO ST".into(), "/charges".into(), charge(1), "op-m".into()),
        ),
        (
            "method",
            send(u(), "/charges".into(), charge(1), "op-m2".into()),
        ),
        ("JSON", post(function, "op-f".into())),
        (
            "GET",
            send("get".into(), "/charges".into(), charge(1), "op-get".into()),
        ),
        (
            "HEAD",
            send(
                "HEAD".into(),
                "/charges".into(),
                charge(1),
                "op-head".into(),
            ),
        ),
        (
            "signal",
            pay(&client, 1, "op-s", object(&[("signal", "x".into())])),
        ),
        (
            "maxAttempts",
            pay(&client, 1, "op-n", object(&[("maxAttempts", 0.into())])),
        ),
    ];
    for (word, promise) in cases {
        let error = rejected(promise).await;
        assert_eq!(error.kind, "invalid", "{word}: {error:?}");
        assert_eq!(error.attempts, 0, "{word}: {error:?}");
        assert!(error.message.contains(word), "{word}: {error:?}");
    }
    assert!(client.pending_operations().is_empty());
    assert_eq!(setup.charges().await, 0);
}

/// Invalid constructor options throw an `IdempotencyError` of kind
/// `invalid` naming the option.
#[wasm_bindgen_test]
fn invalid_options_throw() {
    for (name, value) in [
        ("maxAttempts", JsValue::from(0)),
        ("maxAttempts", JsValue::from(1.5)),
        ("timeoutMs", JsValue::from(-1)),
        ("keyTtlMs", JsValue::from("soon")),
        ("baseUrl", JsValue::from(3)),
        ("maxRetryAfterMs", JsValue::from(f64::NAN)),
        ("onAttempt", JsValue::from("log")),
        ("headers", object(&[("Bad Header", "x".into())])),
    ] {
        let error = IdempotentClient::new(object(&[(name, value)])).map(|_| ());
        let error = rejection(error.unwrap_err());
        assert_eq!(error.kind, "invalid");
        assert!(error.message.contains(name), "{name}: {error:?}");
    }
    assert!(IdempotentClient::new("options".into()).is_err());
    // No options at all is fine.
    assert!(IdempotentClient::new(JsValue::UNDEFINED).is_ok());
}

/// Per-call options: `headers` merge over the constructor's (here an
/// `X-Chaos` for this call only), `timeoutMs` and `maxAttempts` apply to
/// this call; the client's own `Idempotency-Key` and `Content-Type` cannot
/// be overridden (a `text/plain` body would be refused at once with 415).
#[wasm_bindgen_test]
async fn per_call_options_apply_to_that_call() {
    let setup = Setup::new();
    let client = setup.client(None);
    let key = client.key_for("per-call".into()).unwrap();
    let headers = object(&[
        ("X-Chaos", "delay-after-commit=1500".into()),
        ("Idempotency-Key", "not-the-client-key-0001".into()),
        ("Content-Type", "text/plain".into()),
    ]);
    let options = object(&[
        ("headers", headers),
        ("timeoutMs", 300.into()),
        ("maxAttempts", 1.into()),
    ]);
    let started = now();
    let error = rejected(pay(&client, 400, "per-call", options)).await;
    assert!(now() - started < 1400.0, "one attempt of 300 ms");
    assert_eq!(
        (error.kind.as_str(), error.attempts),
        ("exhausted", 1),
        "{error:?}"
    );
    assert_eq!(error.last_status, None, "{error:?}");
    assert!(
        error.message.contains("timed out after 300 ms"),
        "{error:?}"
    );
    assert_eq!(error.key.as_deref(), Some(key.as_str()));

    // The commit happened under the client's key: the next call, with the
    // constructor's settings, gets it replayed.
    let again = resolved(client.resume("per-call".into(), JsValue::UNDEFINED)).await;
    assert_eq!((again.status, again.replayed), (201, true), "{again:?}");
    assert_eq!(again.key, key);
    assert_eq!(setup.charges().await, 1);
}

/// `onAttempt` hears every attempt: a timeout (no status, a retry
/// planned), then the replayed answer (no retry). What it throws changes
/// nothing.
#[wasm_bindgen_test]
async fn on_attempt_reports_every_attempt() {
    let setup = Setup::new();
    let options = setup.options_with(
        Some("delay-after-commit=1500"),
        &[("timeoutMs", 400.into())],
    );
    let events = Events::install(&options);
    let outcome = post(&client_of(options), 650, "observed").await;
    assert_eq!(outcome.status, 201, "{outcome:?}");
    assert_eq!(events.len(), outcome.attempts);

    let first = events.get(0);
    let text = |name: &str| get(&first, name).as_string();
    assert_eq!(text("operation").as_deref(), Some("observed"));
    assert_eq!(text("key"), Some(outcome.key.clone()));
    assert_eq!(text("error").as_deref(), Some("timeout"));
    assert_eq!(number(&first, "attempt"), Some(1.0));
    assert_eq!(number(&first, "status"), None);
    assert!(number(&first, "latencyMs").unwrap() >= 390.0);
    assert!(number(&first, "retryInMs").unwrap() <= 100.0);
    assert_eq!(get(&first, "replayed").as_bool(), Some(false));

    let last = events.get(events.len() - 1);
    assert_eq!(number(&last, "status"), Some(201.0));
    assert!(get(&last, "error").is_null());
    assert_eq!(get(&last, "replayed").as_bool(), Some(true));
    assert_eq!(number(&last, "retryInMs"), None);

    // A listener that throws is reported on the console and ignored.
    let throwing = Function::new_with_args("e", "throw new Error('listener bug')");
    let client = setup.client_with(None, &[("onAttempt", throwing.into())]);
    assert_eq!(post(&client, 651, "observed-2").await.status, 201);
}
