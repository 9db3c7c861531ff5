//! What the client takes from JavaScript: the browser's side of the client
//! (`js/browser.js`: option objects, `fetch`, timers, the Web Lock,
//! `localStorage`, the objects a page receives, `IdempotencyError`), and
//! the few globals used directly (`JSON`, the clock, `Math.random`).
//!
//! Each import costs a shim on both sides of the wasm boundary; the module
//! is shaped so that a call crosses it a handful of times per attempt.

use alloc::string::String;
use alloc::vec::Vec;
use js_sys::{Promise, Reflect};
use wasm_bindgen::prelude::*;

#[wasm_bindgen(module = "/js/browser.js")]
extern "C" {
    /// The constructor's options, checked and completed with the client's
    /// defaults (the retry policy's are left to Rust).
    pub(crate) type Settings;

    /// Checks `new IdempotentClient(options)`; throws an `IdempotencyError`
    /// (`invalid`) naming a wrong option.
    #[wasm_bindgen(catch)]
    pub(crate) fn settings(options: &JsValue) -> Result<Settings, JsValue>;

    /// The client's entries (its prefix and scope).
    #[wasm_bindgen(method, getter)]
    pub(crate) fn store(this: &Settings) -> Store;
    #[wasm_bindgen(method, getter = keyTtlMs)]
    pub(crate) fn key_ttl_ms(this: &Settings) -> f64;
    #[wasm_bindgen(method, getter = maxAttempts)]
    pub(crate) fn max_attempts(this: &Settings) -> Option<u32>;
    #[wasm_bindgen(method, getter = backoffBaseMs)]
    pub(crate) fn backoff_base_ms(this: &Settings) -> Option<f64>;
    #[wasm_bindgen(method, getter = backoffMaxMs)]
    pub(crate) fn backoff_max_ms(this: &Settings) -> Option<f64>;
    #[wasm_bindgen(method, getter = maxRetryAfterMs)]
    pub(crate) fn max_retry_after_ms(this: &Settings) -> Option<f64>;

    /// What one call uses: its options merged over the [`Settings`], its
    /// `AbortSignal`, `onAttempt`.
    #[derive(Clone)]
    pub(crate) type Call;

    /// Checks a call's options; throws an `IdempotencyError` (`invalid`)
    /// about `operation` naming a wrong one, or when the page has an opaque
    /// origin and no `baseUrl`.
    #[wasm_bindgen(catch)]
    pub(crate) fn call(
        settings: &Settings,
        options: &JsValue,
        operation: &str,
    ) -> Result<Call, JsValue>;

    #[wasm_bindgen(method, getter = timeoutMs)]
    pub(crate) fn timeout_ms(this: &Call) -> f64;
    /// The call's own `maxAttempts`, if it has one.
    #[wasm_bindgen(method, getter = maxAttempts)]
    pub(crate) fn max_attempts(this: &Call) -> Option<u32>;
    /// The call's signal has fired.
    #[wasm_bindgen(method, getter)]
    pub(crate) fn aborted(this: &Call) -> bool;
    /// The call's own `key` option, if it has one (checked).
    #[wasm_bindgen(method, getter)]
    pub(crate) fn key(this: &Call) -> Option<String>;

    /// Why the call was aborted: the page's signal's reason, or
    /// `abortAll()`'s.
    pub(crate) fn reason(call: &Call) -> JsValue;

    /// The expired operation of a tombstone, `{ operation, key, method,
    /// path, body, sentAt }`, from its record's `text`; when `tell`,
    /// `onExpired` (if any) is called with it first, and what it throws is
    /// logged and changes nothing.
    pub(crate) fn expired(settings: &Settings, operation: &str, text: &str, tell: bool) -> JsValue;

    /// Whether the page gave the client an `onExpired`.
    #[wasm_bindgen(js_name = hasOnExpired)]
    pub(crate) fn has_on_expired(settings: &Settings) -> bool;

    /// Aborts every call of the client that has not settled: one string
    /// per call, its operation when it holds the operation's lock (and so
    /// may hold its lease), else `""`.
    #[wasm_bindgen(js_name = abortAll)]
    pub(crate) fn abort_all(settings: &Settings) -> Vec<String>;

    /// The JSON text of a request's body: a `fetch` body as given, else
    /// `JSON.stringify`'s (which throws for a `BigInt`, and gives
    /// `undefined` for a function).
    #[wasm_bindgen(catch)]
    pub(crate) fn encode(body: &JsValue) -> Result<JsValue, JsValue>;

    /// Whether two JSON texts are the same JSON (canonical form: object
    /// keys sorted, no whitespace), as the server compares bodies.
    #[wasm_bindgen(js_name = sameJson)]
    pub(crate) fn same_json(a: &str, b: &str) -> bool;

    /// Runs the call (the steps of `sending`, a `Sending` of `send.rs`
    /// handed over as a value, so that this module imports none of the
    /// client's modules; its waits in JavaScript) under the
    /// Web Lock named like the operation's storage entry, or unlocked where
    /// there is none or it is refused; rejects (`lock-timeout`) when the
    /// lock is not granted within the call's `timeoutMs` × `maxAttempts`
    /// and the holder's `busy` lease has run out. The promise settles as
    /// the call does.
    pub(crate) fn run(sending: JsValue, call: &Call, operation: &str) -> Promise;

    /// Attempt number `n`: one `fetch` with the key and its answer read,
    /// within the call's timeout; always resolves, with an [`Answer`].
    pub(crate) fn attempt(
        call: &Call,
        method: &str,
        path: &str,
        body: Option<&str>,
        key: &str,
        n: u32,
    ) -> Promise;

    /// After attempt number `attempt`: reports it to `onAttempt` (when a
    /// request left) and, when a retry follows in `retry_in_ms`, asks the
    /// page's `shouldRetry(response, attempt)`: resolves to `false` when it
    /// says no (the answer is then final), else to `true` once the wait is
    /// over; rejects when the call is aborted first.
    pub(crate) fn after(
        call: &Call,
        answer: &Answer,
        key: &str,
        attempt: u32,
        retry_in_ms: Option<f64>,
    ) -> Promise;

    /// What one attempt got.
    pub(crate) type Answer;

    /// The HTTP status; 0 when there was no answer.
    #[wasm_bindgen(method, getter)]
    pub(crate) fn status(this: &Answer) -> u16;
    /// Why there was no answer: `timeout`, `network`, `redirect`,
    /// `aborted` or `headers`.
    #[wasm_bindgen(method, getter)]
    pub(crate) fn error(this: &Answer) -> Option<String>;
    /// Whether a request left (not when the attempt stopped before it).
    #[wasm_bindgen(method, getter)]
    pub(crate) fn sent(this: &Answer) -> bool;
    /// The browser's description of a network error.
    #[wasm_bindgen(method, getter)]
    pub(crate) fn cause(this: &Answer) -> Option<String>;
    /// The error behind a missing answer, as it was thrown.
    #[wasm_bindgen(method, getter)]
    pub(crate) fn raw(this: &Answer) -> JsValue;
    /// The raw `Retry-After` header.
    #[wasm_bindgen(method, getter = retryAfter)]
    pub(crate) fn retry_after(this: &Answer) -> Option<String>;
    /// The `type` of a problem+json body.
    #[wasm_bindgen(method, getter = problemType)]
    pub(crate) fn problem_type(this: &Answer) -> Option<String>;

    /// `{ status, ok, body, replayed, key, attempts, code }`, or a
    /// `Response` for a call of `fetch`.
    pub(crate) fn outcome(call: &Call, answer: &Answer, key: &str, attempts: u32) -> JsValue;

    /// An `IdempotencyError` with its `code` (which gives its `kind`).
    pub(crate) fn fail(
        code: &str,
        message: &str,
        operation: Option<&str>,
        key: Option<&str>,
        attempts: u32,
        last_status: Option<u16>,
        cause: &JsValue,
    ) -> JsValue;

    /// A fresh idempotency key: a UUID v4 (lower-case, hyphenated) of 16
    /// bytes from `crypto.getRandomValues`, which unlike
    /// `crypto.randomUUID` works on plain http pages too.
    #[wasm_bindgen(js_name = newKey)]
    pub(crate) fn new_key() -> String;

    /// One client's entries: `localStorage`, or page memory where it
    /// refuses (and the page is told once). Never throws.
    pub(crate) type Store;

    /// `false` once the entries are kept in page memory.
    #[wasm_bindgen(method, getter)]
    pub(crate) fn persistent(this: &Store) -> bool;
    #[wasm_bindgen(method)]
    pub(crate) fn get(this: &Store, operation: &str) -> Option<String>;
    #[wasm_bindgen(method)]
    pub(crate) fn put(this: &Store, operation: &str, text: &str);
    #[wasm_bindgen(method)]
    pub(crate) fn remove(this: &Store, operation: &str);
    /// The operations whose entry names this prefix and scope could make.
    #[wasm_bindgen(method)]
    pub(crate) fn operations(this: &Store) -> Vec<String>;
}

#[wasm_bindgen]
extern "C" {
    /// `JSON.parse` of a JS string, without copying it through Rust.
    #[wasm_bindgen(catch, js_namespace = JSON, js_name = parse)]
    pub(crate) fn json_parse(text: &JsValue) -> Result<JsValue, JsValue>;

    /// `JSON.stringify` of a string: its JSON string literal.
    #[wasm_bindgen(js_namespace = JSON, js_name = stringify)]
    pub(crate) fn json_string(text: &str) -> String;

    /// `Date.parse`: epoch milliseconds, NaN for what it cannot read.
    #[wasm_bindgen(js_namespace = Date, js_name = parse)]
    pub(crate) fn date_parse(text: &str) -> f64;
}

/// Unix epoch milliseconds.
pub(crate) fn now_ms() -> u64 {
    js_sys::Date::now() as u64
}

/// Uniform in `[0, 1)`.
pub(crate) fn random() -> f64 {
    js_sys::Math::random()
}

/// Reads `object[name]`; `undefined` for a missing member or a non-object.
pub(crate) fn get(object: &JsValue, name: &str) -> JsValue {
    if !object.is_object() {
        return JsValue::UNDEFINED;
    }
    Reflect::get(object, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}
