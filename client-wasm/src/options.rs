//! The client's arguments, read once at the edge: the constructor's
//! options ([`Config`]), the per-call options ([`CallOptions`]), and the
//! operation, method, path and body of a call. Whatever is wrong comes back
//! as a message naming the argument, which the caller turns into an
//! `IdempotencyError` of kind `invalid`: nothing is sent.

use js_sys::{Array, Function, Object};
use retry_policy::Policy;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::AbortSignal;

use crate::js;
use crate::storage::record::is_method;
use crate::storage::StoredRequest;
use crate::text::concat;
use crate::transport;

/// A bad argument, as a message naming it.
pub(crate) type Invalid = String;

/// The constructor's options, checked.
pub(crate) struct Config {
    /// Prefix of every URL, without a trailing `/`. `None` when the option
    /// is absent and the page has an opaque origin (`"null"`: a sandboxed
    /// frame, a `data:` URL): then there is nowhere to send.
    pub(crate) base_url: Option<String>,
    pub(crate) prefix: String,
    pub(crate) key_ttl_ms: u64,
    pub(crate) timeout_ms: f64,
    pub(crate) policy: Policy,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) on_attempt: Option<Function>,
}

/// The last argument of `post`, `send` and `resume`, checked; absent
/// members fall back on the [`Config`].
#[derive(Default)]
pub(crate) struct CallOptions {
    pub(crate) signal: Option<AbortSignal>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timeout_ms: Option<f64>,
    pub(crate) max_attempts: Option<u32>,
}

impl Config {
    /// Reads `new IdempotentClient(options)`.
    pub(crate) fn read(options: &JsValue) -> Result<Config, Invalid> {
        check_object(options, "options")?;
        let base_url = match string(options, "baseUrl")? {
            Some(url) => Some(url),
            None => page_origin(),
        };
        let defaults = Policy::DEFAULT;
        Ok(Config {
            base_url: base_url.map(|url| url.trim_end_matches('/').into()),
            prefix: string(options, "storagePrefix")?.unwrap_or_else(|| "idem:".into()),
            key_ttl_ms: number(options, "keyTtlMs", 1.0)?.unwrap_or(86_400_000.0) as u64,
            timeout_ms: number(options, "timeoutMs", 1.0)?.unwrap_or(10_000.0),
            policy: Policy {
                max_attempts: attempts(options)?.unwrap_or(defaults.max_attempts),
                base_ms: number(options, "backoffBaseMs", 0.0)?.unwrap_or(defaults.base_ms),
                max_ms: number(options, "backoffMaxMs", 0.0)?.unwrap_or(defaults.max_ms),
                max_retry_after_ms: number(options, "maxRetryAfterMs", 0.0)?
                    .unwrap_or(defaults.max_retry_after_ms),
            },
            headers: headers(options)?,
            on_attempt: function(options, "onAttempt")?,
        })
    }
}

impl CallOptions {
    /// Reads the optional last argument of a call.
    pub(crate) fn read(options: &JsValue) -> Result<CallOptions, Invalid> {
        check_object(options, "options")?;
        let signal = js::get(options, "signal");
        let signal = if signal.is_undefined() || signal.is_null() {
            None
        } else if js::get(&signal, "aborted").as_bool().is_some() {
            // Duck-typed rather than `instanceof`: a signal made in another
            // frame is an AbortSignal of another realm.
            Some(signal.unchecked_into())
        } else {
            return Err("signal must be an AbortSignal".into());
        };
        Ok(CallOptions {
            signal,
            headers: headers(options)?,
            timeout_ms: number(options, "timeoutMs", 1.0)?,
            max_attempts: attempts(options)?,
        })
    }
}

/// The operation name of a call: a non-empty string.
pub(crate) fn operation(value: &JsValue) -> Result<String, Invalid> {
    match value.as_string() {
        Some(operation) if !operation.is_empty() => Ok(operation),
        _ => Err("operation must be a non-empty string, such as \"checkout:cart-42\"".into()),
    }
}

/// The request of a `send`: an HTTP method name, a path, and a body that
/// `JSON.stringify` can encode (`undefined` and `null`: no body, the only
/// choice for GET and HEAD).
pub(crate) fn request(
    method: &JsValue,
    path: &JsValue,
    body: &JsValue,
) -> Result<StoredRequest, Invalid> {
    let method = match method.as_string() {
        Some(method) if is_method(&method) => method.to_ascii_uppercase(),
        _ => return Err("method must be an HTTP method name such as \"POST\"".into()),
    };
    let path = path
        .as_string()
        .ok_or("path must be a string such as \"/charges\"")?;
    let body = if body.is_undefined() || body.is_null() {
        None
    } else if method == "GET" || method == "HEAD" {
        return Err(concat(&["a ", &method, " request cannot have a body"]));
    } else {
        let text = js::json_stringify(body).ok().and_then(|t| t.as_string());
        Some(text.ok_or("body cannot be sent as JSON")?)
    };
    Ok(StoredRequest { method, path, body })
}

/// `location.origin`; `""` (relative URLs) where there is no location (a
/// worker without one); `None` for an opaque origin, whose `"null"` is no
/// place to send requests.
fn page_origin() -> Option<String> {
    let origin = js::get(&js::get(&js::global(), "location"), "origin")
        .as_string()
        .unwrap_or_default();
    (origin != "null").then_some(origin)
}

/// The refusal of a call on a page with an opaque origin and no `baseUrl`.
pub(crate) fn opaque_origin() -> Invalid {
    "baseUrl: this page has an opaque origin (\"null\": a sandboxed frame or a data: URL), \
     so requests need an explicit baseUrl option"
        .into()
}

fn option_error(name: &str, expected: &str) -> Invalid {
    concat(&[name, " must be ", expected])
}

/// `undefined`, `null` or an object.
fn check_object(value: &JsValue, name: &str) -> Result<(), Invalid> {
    if value.is_undefined() || value.is_null() || value.is_object() {
        Ok(())
    } else {
        Err(option_error(name, "an object"))
    }
}

/// A string option; `undefined` and `null` mean the default.
fn string(options: &JsValue, name: &str) -> Result<Option<String>, Invalid> {
    let value = js::get(options, name);
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    value
        .as_string()
        .map(Some)
        .ok_or_else(|| option_error(name, "a string"))
}

/// A finite number option of at least `min`, up to 2^53 - 1; `undefined`
/// and `null` mean the default.
fn number(options: &JsValue, name: &str, min: f64) -> Result<Option<f64>, Invalid> {
    let value = js::get(options, name);
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    match value.as_f64() {
        Some(n) if n >= min && n <= 9_007_199_254_740_991.0 => Ok(Some(n)),
        _ => Err(option_error(
            name,
            if min > 0.0 {
                "a positive number"
            } else {
                "a number of at least 0"
            },
        )),
    }
}

/// `maxAttempts`: a whole number of at least 1.
fn attempts(options: &JsValue) -> Result<Option<u32>, Invalid> {
    match number(options, "maxAttempts", 1.0) {
        Ok(Some(n)) if n.fract() == 0.0 && n <= f64::from(u32::MAX) => Ok(Some(n as u32)),
        Ok(None) => Ok(None),
        _ => Err(option_error("maxAttempts", "a whole number of at least 1")),
    }
}

/// A function option (`onAttempt`).
fn function(options: &JsValue, name: &str) -> Result<Option<Function>, Invalid> {
    let value = js::get(options, name);
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    value
        .dyn_into::<Function>()
        .map(Some)
        .map_err(|_| option_error(name, "a function"))
}

/// `headers`: an object of string values, each a valid header.
fn headers(options: &JsValue) -> Result<Vec<(String, String)>, Invalid> {
    let value = js::get(options, "headers");
    if value.is_undefined() || value.is_null() {
        return Ok(Vec::new());
    }
    let expected = || option_error("headers", "an object of strings");
    if !value.is_object() {
        return Err(expected());
    }
    let mut headers = Vec::new();
    for entry in Object::entries(value.unchecked_ref()).iter() {
        let entry: Array = entry.unchecked_into();
        match (entry.get(0).as_string(), entry.get(1).as_string()) {
            (Some(name), Some(value)) => headers.push((name, value)),
            _ => return Err(expected()),
        }
    }
    // Let the browser judge names and values once, here.
    if let Err(e) = transport::headers(&headers, "probe", false) {
        return Err(concat(&["headers: ", &js::error_text(&e)]));
    }
    Ok(headers)
}
