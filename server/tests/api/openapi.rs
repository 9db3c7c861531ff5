//! `GET /openapi.json` describes the API the server actually serves: every
//! route, the idempotency headers where they belong, every problem type
//! and every `X-Chaos` value the server parses.

use crate::helpers::{new_key, TestApp};
use axum::response::IntoResponse;
use exactly_once::Error;
use serde_json::{json, Value};
use server::chaos::Fault;
use server::domain::{CallerError, IdempotencyKeyError};
use server::error::ApiError;
use std::collections::BTreeSet;

/// Every request docs/CONTRACT.md section 3 names, as `(method, path)`.
const ROUTES: [(&str, &str); 8] = [
    ("post", "/charges"),
    ("get", "/charges"),
    ("post", "/reservations"),
    ("get", "/inventory/{item}"),
    ("get", "/healthz"),
    ("get", "/metrics"),
    ("get", "/config"),
    ("get", "/openapi.json"),
];

async fn document(app: &TestApp) -> Value {
    let response = app.get("/openapi.json").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    response.json().await.expect("the document is JSON")
}

fn operation<'a>(doc: &'a Value, method: &str, path: &str) -> &'a Value {
    let operation = &doc["paths"][path][method];
    assert!(
        operation.is_object(),
        "{method} {path} is not in the document"
    );
    operation
}

/// The names of a response's headers.
fn headers(operation: &Value, status: u16) -> BTreeSet<String> {
    let response = &operation["responses"][status.to_string()];
    assert!(response.is_object(), "no {status} answer");
    response["headers"]
        .as_object()
        .map(|h| h.keys().cloned().collect())
        .unwrap_or_default()
}

fn header_parameters(operation: &Value) -> Vec<&Value> {
    operation["parameters"]
        .as_array()
        .map(|p| p.iter().filter(|p| p["in"] == "header").collect())
        .unwrap_or_default()
}

/// The document is OpenAPI 3.1 and lists exactly the contract's routes,
/// each of which the server really serves.
#[tokio::test]
async fn the_document_is_openapi_3_1_and_lists_every_route_served() {
    let app = TestApp::spawn().await;
    let doc = document(&app).await;
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1."),
        "{}",
        doc["openapi"]
    );
    let listed: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .map(move |method| (method.clone(), path.clone()))
        })
        .collect();
    let contract: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(listed, contract);

    for (method, path) in ROUTES {
        let url = app.url(&path.replace("{item}", "sku-tee"));
        let verb = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let response = app
            .server
            .http()
            .request(verb, url)
            .bearer_auth(&app.token)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body = response.text().await.unwrap();
        assert!(
            status != 405 && !body.contains("nothing is served at this path"),
            "{method} {path} is documented but not served: {status} {body}"
        );
    }
}

/// The keyed POSTs take `Idempotency-Key` (required) and `X-Chaos`, name
/// both ways of identifying the caller, mark replayable answers with
/// `Idempotent-Replayed` and retryable ones with `Retry-After`.
#[tokio::test]
async fn keyed_requests_document_the_key_and_the_replay_headers() {
    let app = TestApp::spawn().await;
    let doc = document(&app).await;
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["bearer"]["type"], "http");
    assert_eq!(schemes["bearer"]["scheme"], "bearer");
    assert_eq!(schemes["session"]["type"], "apiKey");
    assert_eq!(schemes["session"]["in"], "cookie");
    assert_eq!(schemes["session"]["name"], "sid");

    // Answers that may be a stored answer replayed, beside the 201.
    for (path, recorded) in [
        ("/charges", &[201, 402][..]),
        ("/reservations", &[201, 404, 409]),
    ] {
        let post = operation(&doc, "post", path);
        let names: Vec<&Value> = header_parameters(post).iter().map(|p| &p["name"]).collect();
        assert_eq!(
            names,
            [&json!("Idempotency-Key"), &json!("X-Chaos")],
            "{path}"
        );
        let key = header_parameters(post)[0];
        assert_eq!(key["required"], true);
        assert!(key["schema"]["pattern"].is_string());
        assert_eq!(
            post["security"],
            json!([{"bearer": []}, {"session": []}]),
            "{path}"
        );
        for &status in recorded {
            assert!(
                headers(post, status).contains("Idempotent-Replayed"),
                "{path} {status}"
            );
        }
        for status in [409, 503] {
            assert!(
                headers(post, status).contains("Retry-After"),
                "{path} {status}"
            );
        }
        for status in [400, 401, 408, 413, 415, 422, 500] {
            assert!(
                !headers(post, status).contains("Idempotent-Replayed"),
                "{path} {status}: refusals are never recorded"
            );
        }
    }

    for (method, path) in ROUTES.iter().filter(|(m, _)| *m == "get") {
        assert!(
            header_parameters(operation(&doc, method, path)).is_empty(),
            "GET {path} ignores Idempotency-Key"
        );
    }
}

/// Every error the server can render, one of each variant: the shop's
/// own and the engine's.
fn every_api_error() -> Vec<ApiError> {
    let engine = vec![
        Error::MissingIdempotencyKey,
        Error::InvalidIdempotencyKey(IdempotencyKeyError::Empty),
        Error::InvalidRequest("bad".into()),
        Error::UnsupportedMediaType,
        Error::RequestTimeout,
        Error::PayloadTooLarge(1),
        Error::IdempotencyKeyMismatch,
        Error::IdempotencyKeyInUse,
        Error::TooManyUnfinished(1),
        server::steps::provider_unavailable("no answer"),
        Error::Unavailable("down".into()),
        Error::OutcomeUnknown("cut".into()),
        Error::Unfinished("started".into()),
        Error::StepFailedForGood("refused".into()),
        Error::OperationNeedsAttention,
        Error::IncompatibleSchema("a later migration".into()),
        Error::internal("bug"),
    ];
    for error in &engine {
        // A new variant fails to compile here: add it to the list above.
        match error {
            Error::MissingIdempotencyKey
            | Error::InvalidIdempotencyKey(_)
            | Error::InvalidRequest(_)
            | Error::UnsupportedMediaType
            | Error::RequestTimeout
            | Error::PayloadTooLarge(_)
            | Error::IdempotencyKeyMismatch
            | Error::IdempotencyKeyInUse
            | Error::TooManyUnfinished(_)
            | Error::StepUnavailable(_)
            | Error::Unavailable(_)
            | Error::OutcomeUnknown(_)
            | Error::Unfinished(_)
            | Error::StepFailedForGood(_)
            | Error::OperationNeedsAttention
            | Error::IncompatibleSchema(_)
            | Error::Internal(_) => {}
        }
    }
    let mut errors = vec![
        ApiError::Unauthorized(CallerError::Missing),
        ApiError::InvalidRequest("bad".into()),
        ApiError::MethodNotAllowed,
        ApiError::NotFound("none".into()),
        ApiError::RateLimited {
            per_second: 1,
            retry_after: std::time::Duration::from_secs(1),
        },
    ];
    for error in &errors {
        match error {
            ApiError::Unauthorized(_)
            | ApiError::InvalidRequest(_)
            | ApiError::MethodNotAllowed
            | ApiError::NotFound(_)
            | ApiError::RateLimited { .. }
            | ApiError::Engine(_) => {}
        }
    }
    errors.extend(engine.into_iter().map(ApiError::Engine));
    errors
}

/// Business refusals are not `ApiError`s: the operations record them as
/// answers (docs/CONTRACT.md sections 3 and 6).
const RECORDED_PROBLEMS: [&str; 2] = [
    "/problems/insufficient-inventory",
    "/problems/card-declined",
];

/// The document's problem `type` enum is exactly the types `ApiError`
/// renders plus the recorded business refusals, and a real refusal's type
/// is in it.
#[tokio::test]
async fn the_problem_types_are_every_error_and_every_recorded_refusal() {
    let app = TestApp::spawn().await;
    let doc = document(&app).await;
    let listed: BTreeSet<String> = doc["components"]["schemas"]["ProblemType"]["enum"]
        .as_array()
        .expect("ProblemType is an enum")
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect();

    let mut rendered = BTreeSet::new();
    for error in every_api_error() {
        let body = axum::body::to_bytes(error.into_response().into_body(), 4096)
            .await
            .unwrap();
        let problem: Value = serde_json::from_slice(&body).unwrap();
        rendered.insert(problem["type"].as_str().unwrap().to_owned());
    }
    rendered.extend(RECORDED_PROBLEMS.map(String::from));
    assert_eq!(listed, rendered);

    let refused = app
        .post(
            "/reservations",
            &new_key(),
            &json!({"item_id": "sku-poster", "quantity": 1000}),
        )
        .await;
    assert_eq!(refused.status(), 409);
    let problem: Value = refused.json().await.unwrap();
    assert!(
        listed.contains(problem["type"].as_str().unwrap()),
        "{problem}"
    );
}

/// The documented `X-Chaos` values are the ones the server parses, and a
/// chaos server takes each one that needs no provider to act.
#[tokio::test]
async fn the_chaos_values_are_the_ones_the_server_parses() {
    let app = TestApp::spawn().await;
    let doc = document(&app).await;
    let chaos = &doc["components"]["schemas"]["ChaosFault"]["oneOf"];
    let mut listed: BTreeSet<String> = chaos[0]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let delay = chaos[1]["pattern"].as_str().unwrap();
    assert_eq!(delay, "^delay-after-commit=[0-9]{1,6}$");
    listed.insert("delay-after-commit=MS".to_owned());
    assert_eq!(listed, BTreeSet::from(Fault::NAMES.map(String::from)));

    for value in Fault::NAMES {
        assert!(
            Fault::parse(&value.replace("=MS", "=10")).is_ok(),
            "{value}"
        );
    }
    // Without --psp-url no provider is called: these do nothing.
    for value in [
        "exit-before-provider",
        "exit-after-provider",
        "delay-after-commit=10",
    ] {
        let response = app
            .post_raw(
                &app.token,
                "/charges",
                &new_key(),
                r#"{"amount": 100, "currency": "usd"}"#,
                &[("X-Chaos", value)],
            )
            .await;
        assert_eq!(response.status(), 201, "{value}");
    }
}

// Findings of scripts/schemathesis.sh (docs/OPENAPI.md), and of
// schemathesis run with its defaults against `GET /openapi.json`, one test
// each.

/// A key is one operation, so the document offers no fixed example of one:
/// a generator that reuses a documented example for every request it makes
/// turns valid requests into 422s (schemathesis's defaults did, twice).
#[tokio::test]
async fn the_document_offers_no_fixed_idempotency_key() {
    let app = TestApp::spawn().await;
    let doc = document(&app).await;
    for path in ["/charges", "/reservations"] {
        let key = header_parameters(operation(&doc, "post", path))[0];
        assert_eq!(key["name"], "Idempotency-Key");
        for field in ["example", "examples"] {
            assert!(key.get(field).is_none(), "{path}: {key}");
            assert!(key["schema"].get(field).is_none(), "{path}: {key}");
        }
    }
}

/// Without `--chaos` the server ignores `X-Chaos` whatever its value
/// (CONTRACT section 5), and its document says so rather than a pattern it
/// would not enforce; with `--chaos` the document has the values it parses.
#[tokio::test]
async fn without_chaos_the_document_says_x_chaos_is_ignored_and_it_is() {
    let plain = TestApp::spawn_with(&[]).await;
    let doc = document(&plain).await;
    let schema = &doc["components"]["schemas"]["ChaosFault"];
    assert_eq!(schema["type"], "string", "{schema}");
    assert!(
        schema.get("oneOf").is_none() && schema.get("pattern").is_none(),
        "{schema}"
    );
    assert!(
        schema["description"].as_str().unwrap().contains("Ignored"),
        "{schema}"
    );
    let outside = plain
        .post_raw(
            &plain.token,
            "/charges",
            &new_key(),
            r#"{"amount": 100, "currency": "usd"}"#,
            &[("X-Chaos", "no such fault")],
        )
        .await;
    assert_eq!(outside.status(), 201, "ignored, as documented");

    let chaos = document(&TestApp::spawn().await).await;
    assert!(chaos["components"]["schemas"]["ChaosFault"]["oneOf"].is_array());
}

/// A POST of `body` as it is written, with a fresh key.
async fn send(app: &TestApp, path: &str, body: &'static str) -> reqwest::Response {
    app.post_raw(&app.token, path, &new_key(), body, &[]).await
}

/// JSON has one kind of number: `1999.0` and `1.999e3` are the integer
/// 1999, as JSON Schema's `integer` says, and are taken as such.
#[tokio::test]
async fn integral_numbers_written_with_a_fraction_or_exponent_are_integers() {
    let app = TestApp::spawn().await;
    let charge = send(&app, "/charges", r#"{"amount": 1999.0, "currency": "usd"}"#).await;
    assert_eq!(charge.status(), 201);
    let charge: Value = charge.json().await.unwrap();
    assert_eq!(charge["amount"], 1999);

    let reservation = send(
        &app,
        "/reservations",
        r#"{"item_id": "sku-tee", "quantity": 2e0}"#,
    )
    .await;
    assert_eq!(reservation.status(), 201);
    let reservation: Value = reservation.json().await.unwrap();
    assert_eq!(reservation["quantity"], 2);
    assert_eq!(app.available("sku-tee").await, 98);

    // A fraction is still not an amount.
    let fraction = send(&app, "/charges", r#"{"amount": 19.99, "currency": "usd"}"#).await;
    crate::helpers::assert_problem(fraction, 400, "invalid-request").await;
}
