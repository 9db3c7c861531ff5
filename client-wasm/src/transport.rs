//! One HTTP attempt: `fetch` with the idempotency key, a JSON body and an
//! `AbortController` that ends the attempt after its timeout or when the
//! caller aborts; the answer's body read and parsed within the same
//! deadline.
//!
//! A request that may change something (any method but GET and HEAD) does
//! not follow redirects (`redirect: "manual"`): a captive portal's `302` to
//! its login page, followed, would come back as a `200` that the client
//! would take for the server's answer. A redirect is reported as
//! [`Failure::Redirect`] instead.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{JsString, Object};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{AbortController, Headers, Response};

use crate::abort::Abort;
use crate::js;

/// What one attempt sends.
pub(crate) struct Request<'a> {
    pub(crate) url: &'a str,
    pub(crate) method: &'a str,
    /// JSON text, sent with `Content-Type: application/json`.
    pub(crate) body: Option<&'a str>,
    pub(crate) key: &'a str,
    /// The constructor's headers, then the call's (later ones win).
    pub(crate) headers: &'a [(String, String)],
    pub(crate) timeout_ms: f64,
}

/// An HTTP answer, whatever its status.
pub(crate) struct Answer {
    pub(crate) status: u16,
    /// The answer carried `Idempotent-Replayed: true`.
    pub(crate) replayed: bool,
    /// The raw `Retry-After` header.
    pub(crate) retry_after: Option<String>,
    /// Parsed JSON, the text when it is not JSON, `null` when empty.
    pub(crate) body: JsValue,
}

impl Answer {
    /// The `type` of a problem+json body.
    pub(crate) fn problem_type(&self) -> Option<String> {
        js::get(&self.body, "type").as_string()
    }
}

/// Why an attempt produced no answer.
pub(crate) enum Failure {
    /// Aborted after its timeout.
    Timeout,
    /// `fetch` or reading the body failed; the browser's description.
    Network(String),
    /// Redirected, where the request must not follow.
    Redirect,
    /// The caller's signal fired.
    Aborted,
}

/// Sends one attempt and reads its answer, all within `timeout_ms`.
pub(crate) async fn attempt(request: &Request<'_>, abort: &Abort) -> Result<Answer, Failure> {
    let controller = AbortController::new().map_err(network)?;
    let timed_out = Rc::new(Cell::new(false));
    let on_timeout = {
        let timed_out = timed_out.clone();
        let controller = controller.clone();
        Closure::<dyn FnMut()>::new(move || {
            timed_out.set(true);
            controller.abort();
        })
    };
    let timer = js::set_timeout(on_timeout.as_ref().unchecked_ref(), request.timeout_ms);
    let result = fetch_and_read(request, &controller, abort).await;
    js::clear_timeout(&timer);
    drop(on_timeout);
    result.map_err(|e| {
        if abort.is_aborted() {
            // Stop the request too, not only the waiting for it.
            controller.abort();
            Failure::Aborted
        } else if timed_out.get() {
            Failure::Timeout
        } else if e.is_null() {
            Failure::Redirect
        } else {
            network(e)
        }
    })
}

fn network(e: JsValue) -> Failure {
    Failure::Network(js::error_text(&e))
}

/// The headers of every attempt: the caller's, then the JSON content type
/// and the key, which the caller cannot override.
pub(crate) fn headers(
    extra: &[(String, String)],
    key: &str,
    json: bool,
) -> Result<Headers, JsValue> {
    let headers = Headers::new()?;
    for (name, value) in extra {
        headers.set(name, value)?;
    }
    if json {
        headers.set("Content-Type", "application/json")?;
    }
    headers.set("Idempotency-Key", key)?;
    Ok(headers)
}

/// `fetch`, then the body; `Err(null)` for a redirect.
async fn fetch_and_read(
    request: &Request<'_>,
    controller: &AbortController,
    abort: &Abort,
) -> Result<Answer, JsValue> {
    let init: JsValue = Object::new().into();
    js::set(&init, "method", &request.method.into());
    let headers = headers(request.headers, request.key, request.body.is_some())?;
    js::set(&init, "headers", &headers);
    if let Some(body) = request.body {
        js::set(&init, "body", &body.into());
    }
    if !matches!(request.method, "GET" | "HEAD") {
        js::set(&init, "redirect", &"manual".into());
    }
    js::set(&init, "signal", &controller.signal());

    let response: Response = abort
        .wait(js::fetch(request.url, &init))
        .await?
        .unchecked_into();
    if js::get(&response, "type").as_string().as_deref() == Some("opaqueredirect") {
        return Err(JsValue::NULL);
    }
    let answer_headers = response.headers();
    let header = |name: &str| answer_headers.get(name).ok().flatten();
    let replayed = header("Idempotent-Replayed").is_some_and(|v| v.trim_ascii() == "true");
    let retry_after = header("Retry-After");
    let json = header("Content-Type").is_none_or(|t| contains_json(&t));

    let text = abort.wait(response.text()?).await?;
    let body = if text.unchecked_ref::<JsString>().length() == 0 {
        JsValue::NULL
    } else if json {
        js::json_parse(&text).unwrap_or(text)
    } else {
        text
    };
    Ok(Answer {
        status: response.status(),
        replayed,
        retry_after,
        body,
    })
}

/// `application/json`, `application/problem+json` and the like.
fn contains_json(content_type: &str) -> bool {
    content_type
        .as_bytes()
        .windows(4)
        .any(|w| w.eq_ignore_ascii_case(b"json"))
}
