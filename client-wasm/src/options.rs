//! The client's arguments, read once at the edge: the constructor's
//! options ([`Config`]), and the operation, method, path and body of a
//! call. Whatever is wrong comes back as a message naming the argument,
//! which the caller turns into an `IdempotencyError` of kind `invalid`:
//! nothing is sent.
//!
//! The option objects themselves (the constructor's and each call's) are
//! checked in JavaScript (`settings` and `call` in `js/browser.js`), where
//! reading members of a JS object costs no shims; this module takes from
//! them what the key lifecycle and the retry policy need.

use alloc::string::String;
use exactly_once_retry::Policy;
use wasm_bindgen::JsValue;

use crate::error::Failure;
use crate::js::{self, Settings};
use crate::storage::record::is_method;
use crate::storage::StoredRequest;
use crate::text::concat;

/// A bad argument, as a message naming it.
pub(crate) type Invalid = String;

/// The constructor's options, checked (in JavaScript, `settings`). The
/// constructor keeps them as they are and reads nothing else: what the
/// key lifecycle and the retry policy need is read when a call needs it,
/// so that constructing a client while the page loads crosses the wasm
/// boundary once (docs/BENCHMARKS.md, "Init").
pub(crate) struct Config {
    /// All of them, for each call's [`js::call`]; their `store` is the
    /// client's storage, named by prefix and scope.
    pub(crate) settings: Settings,
}

impl Config {
    /// Reads `new IdempotentClient(options)`; `Err` is the
    /// `IdempotencyError` to throw.
    pub(crate) fn read(options: &JsValue) -> Result<Config, JsValue> {
        Ok(Config {
            settings: js::settings(options)?,
        })
    }

    /// How long a key lives (`keyTtlMs`).
    pub(crate) fn key_ttl_ms(&self) -> u64 {
        self.settings.key_ttl_ms() as u64
    }

    /// The retry policy: the client's options over [`Policy::DEFAULT`],
    /// with a call's own `maxAttempts` (`call_attempts`) over both.
    pub(crate) fn policy(&self, call_attempts: Option<u32>) -> Policy {
        let settings = &self.settings;
        let defaults = Policy::DEFAULT;
        Policy {
            max_attempts: call_attempts
                .or_else(|| settings.max_attempts())
                .unwrap_or(defaults.max_attempts),
            base_ms: settings.backoff_base_ms().unwrap_or(defaults.base_ms),
            max_ms: settings.backoff_max_ms().unwrap_or(defaults.max_ms),
            max_retry_after_ms: settings
                .max_retry_after_ms()
                .unwrap_or(defaults.max_retry_after_ms),
        }
    }
}

/// The operation name of a call: a non-empty string.
pub(crate) fn operation(value: &JsValue) -> Result<String, Invalid> {
    match value.as_string() {
        Some(operation) if !operation.is_empty() => Ok(operation),
        _ => Err("operation must be a non-empty string".into()),
    }
}

/// The request of a `send`: an HTTP method name, a path, and a body that
/// `JSON.stringify` can encode, or the JSON text that `fetch` was given, as
/// it is (`undefined` and `null`: no body, the only choice for GET and
/// HEAD). A body that cannot be encoded is refused with what
/// `JSON.stringify` threw as the cause.
pub(crate) fn request(
    method: &JsValue,
    path: &JsValue,
    body: &JsValue,
) -> Result<StoredRequest, Failure> {
    let method = match method.as_string() {
        Some(method) if is_method(&method) => method.to_ascii_uppercase(),
        _ => {
            return Err(Failure::invalid(
                "method must be an HTTP method name".into(),
            ))
        }
    };
    let Some(path) = path.as_string().filter(|path| is_path(path)) else {
        return Err(Failure::invalid(
            "path must be \"/…\" or an http(s) URL".into(),
        ));
    };
    let body = if body.is_undefined() || body.is_null() {
        None
    } else if method == "GET" || method == "HEAD" {
        return Err(Failure::invalid(concat(&[
            "a ",
            &method,
            " request cannot have a body",
        ])));
    } else {
        let (text, cause) = match js::encode(body) {
            Ok(text) => (text.as_string(), JsValue::UNDEFINED),
            Err(cause) => (None, cause),
        };
        match text {
            Some(text) => Some(text),
            None => {
                let mut failure = Failure::invalid("body cannot be sent as JSON".into());
                failure.cause = cause;
                return Err(failure);
            }
        }
    };
    Ok(StoredRequest { method, path, body })
}

/// A path the client can send to: `/…` (after `baseUrl`), or an absolute
/// `http:` or `https:` URL. Anything else (`"charges"`, a typo) would be
/// glued to `baseUrl` into a URL that no server answers.
pub(crate) fn is_path(path: &str) -> bool {
    path.starts_with('/') || path.starts_with("http://") || path.starts_with("https://")
}
