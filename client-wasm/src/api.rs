//! The exported surface: `IdempotentClient` and its options and outcome
//! (CONTRACT section 4). Everything else in the crate serves this file.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use js_sys::{Array, Function, Object, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::future_to_promise;

use crate::js;
use crate::storage::record::push_u64;
use crate::storage::{Record, Store, StoredRequest};
use crate::transport::{self, Failure};
use retry_policy::{Attempt, Decision, Policy};

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/** Options of {@link IdempotentClient}. Every member is optional. */
export interface ClientOptions {
  /** Prefix of every request URL (`baseUrl + path`). Default: the page's origin. */
  baseUrl?: string;
  /** Prefix of the client's localStorage entries, one per operation. Default: `"idem:"`. */
  storagePrefix?: string;
  /** How long an operation keeps its key, in milliseconds. Default: `86400000` (24 h). */
  keyTtlMs?: number;
  /** Each attempt is aborted after this many milliseconds. Default: `10000`. */
  timeoutMs?: number;
  /** Attempts per call, the first included. Default: `5`. */
  maxAttempts?: number;
  /** Backoff before the first retry is random in `[0, backoffBaseMs)`, doubling each retry. Default: `200`. */
  backoffBaseMs?: number;
  /** Upper bound of any backoff, in milliseconds (`Retry-After` wins over it). Default: `10000`. */
  backoffMaxMs?: number;
  /** Headers added to every call, such as `Authorization`. Default: none. */
  headers?: Record<string, string>;
}

/** How a call ended: the first answer that is not retried. */
export interface Outcome<Body = any> {
  /** HTTP status of the answer. */
  status: number;
  /** `true` for a 2xx status. */
  ok: boolean;
  /** The answer's JSON, parsed (problem+json included); its text when it is not JSON; `null` when empty. */
  body: Body;
  /** `true` when the server replayed a stored answer (`Idempotent-Replayed: true`). */
  replayed: boolean;
  /** The idempotency key the call was sent with. */
  key: string;
  /** How many requests this call sent, at least 1. */
  attempts: number;
}
"#;

/// A client that sends each logical operation with one idempotency key,
/// kept in `localStorage` across retries, reloads, tabs and instances.
///
/// ```js
/// const client = new IdempotentClient({ timeoutMs: 10000 });
/// const outcome = await client.post("/charges", { amount: 1999, currency: "usd" }, "checkout:cart-42");
/// ```
#[wasm_bindgen(js_name = IdempotentClient)]
pub struct IdempotentClient {
    inner: Rc<Inner>,
}

struct Inner {
    base_url: String,
    prefix: String,
    key_ttl_ms: u64,
    timeout_ms: f64,
    policy: Policy,
    headers: Vec<(String, String)>,
    store: Store,
}

/// What a locked run sends: a new request, or the stored one.
enum Job {
    Send(StoredRequest),
    Resume,
}

#[wasm_bindgen(js_class = IdempotentClient)]
impl IdempotentClient {
    /// Makes a client. Throws when an option has the wrong type or range.
    /// Expired keys under `storagePrefix` are deleted here.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_optional_param_type = "ClientOptions")] options: Option<Object>,
    ) -> Result<IdempotentClient, JsError> {
        let options: JsValue = options.map_or(JsValue::UNDEFINED, Into::into);
        let base_url = match string_option(&options, "baseUrl")? {
            Some(url) => url,
            None => page_origin(),
        };
        let prefix = string_option(&options, "storagePrefix")?.unwrap_or_else(|| "idem:".into());
        let key_ttl_ms = number_option(&options, "keyTtlMs", 86_400_000.0, 1.0)?;
        let timeout_ms = number_option(&options, "timeoutMs", 10_000.0, 1.0)?;
        let max_attempts = number_option(&options, "maxAttempts", 5.0, 1.0)?;
        if max_attempts.fract() != 0.0 || max_attempts > f64::from(u32::MAX) {
            return Err(JsError::new(
                "maxAttempts must be a whole number of at least 1",
            ));
        }
        let base_ms = number_option(&options, "backoffBaseMs", 200.0, 0.0)?;
        let max_ms = number_option(&options, "backoffMaxMs", 10_000.0, 0.0)?;
        let headers = headers_option(&js::get(&options, "headers"))?;

        let store = Store::open(prefix.clone());
        store.purge_expired(js::now_ms());
        Ok(IdempotentClient {
            inner: Rc::new(Inner {
                base_url: base_url.trim_end_matches('/').into(),
                prefix,
                key_ttl_ms: key_ttl_ms as u64,
                timeout_ms,
                policy: Policy {
                    max_attempts: max_attempts as u32,
                    base_ms,
                    max_ms,
                    ..Policy::DEFAULT
                },
                headers,
                store,
            }),
        })
    }

    /// The operation's idempotency key: a UUID v4 made on first use and kept
    /// in localStorage, the same across reloads, tabs and client instances,
    /// until `release(operation)` or `keyTtlMs` after it was made.
    #[wasm_bindgen(js_name = keyFor)]
    pub fn key_for(&self, operation: String) -> Result<String, JsError> {
        check_operation(&operation)?;
        Ok(self.inner.live_record(&operation, js::now_ms()).key)
    }

    /// `send("POST", path, body, operation)`.
    #[wasm_bindgen(unchecked_return_type = "Promise<Outcome>")]
    pub fn post(
        &self,
        path: String,
        #[wasm_bindgen(unchecked_param_type = "unknown")] body: JsValue,
        operation: String,
    ) -> Promise {
        self.send("POST".into(), path, body, operation)
    }

    /// Sends `body` as JSON to `baseUrl + path` with the operation's key.
    ///
    /// The request is stored beside the key before the first attempt. A
    /// network error, a timeout, 408, 409 `idempotency-key-in-use`, 425, 429,
    /// 500, 502, 503 and 504 are retried with the same key, after
    /// exponential backoff with full jitter or the answer's `Retry-After`.
    /// Resolves with the first other answer, whatever its status; rejects
    /// with an `Error` after `maxAttempts` attempts, keeping the key and the
    /// request for `resume`. A `body` of `undefined` or `null` sends none.
    #[wasm_bindgen(unchecked_return_type = "Promise<Outcome>")]
    pub fn send(
        &self,
        method: String,
        path: String,
        #[wasm_bindgen(unchecked_param_type = "unknown")] body: JsValue,
        operation: String,
    ) -> Promise {
        self.start(
            operation,
            stored_request(method, path, &body).map(Job::Send),
        )
    }

    /// Operations sent without a final answer yet (the call was rejected, or
    /// the page was closed during it): what a reloaded page should `resume`.
    /// In no particular order.
    #[wasm_bindgen(js_name = pendingOperations)]
    pub fn pending_operations(&self) -> Vec<String> {
        let now = js::now_ms();
        self.inner
            .store
            .records()
            .into_iter()
            .filter(|(_, record)| record.is_live(now) && record.is_pending())
            .map(|(operation, _)| operation)
            .collect()
    }

    /// Sends the operation's stored request again: same key, method, path and
    /// body. Rejects when the operation has no stored request.
    #[wasm_bindgen(unchecked_return_type = "Promise<Outcome>")]
    pub fn resume(&self, operation: String) -> Promise {
        self.start(operation, Ok(Job::Resume))
    }

    /// Forgets the operation's key and stored request: the next call for it
    /// starts a new operation with a new key.
    pub fn release(&self, operation: String) -> Result<(), JsError> {
        check_operation(&operation)?;
        self.inner.store.remove(&operation);
        Ok(())
    }
}

impl IdempotentClient {
    /// The promise of a `send` or `resume`: rejected at once for bad
    /// arguments, else the send loop under the operation's lock. Every
    /// rejection is an `Error` (a `JsError`).
    fn start(&self, operation: String, job: Result<Job, JsError>) -> Promise {
        let job = match check_operation(&operation).and(job) {
            Ok(job) => job,
            Err(e) => return Promise::reject(&e.into()),
        };
        let mut lock_name = self.inner.prefix.clone();
        lock_name.push_str(&operation);
        let inner = self.inner.clone();
        let work: Work = Box::pin(async move {
            inner
                .send_locked(&operation, job)
                .await
                .map_err(|msg| JsError::new(&msg).into())
        });
        spawn_locked(&lock_name, work)
    }
}

/// The send loop of one call, as one concrete type so that the glue that
/// turns futures into promises exists once in the module.
type Work = Pin<Box<dyn Future<Output = Result<JsValue, JsValue>>>>;

/// The request of a `send`, checked.
fn stored_request(method: String, path: String, body: &JsValue) -> Result<StoredRequest, JsError> {
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(JsError::new(
            "method must be an HTTP method name such as \"POST\"",
        ));
    }
    let body = if body.is_undefined() || body.is_null() {
        None
    } else {
        let text = js::json_stringify(body).ok().and_then(|t| t.as_string());
        Some(text.ok_or_else(|| JsError::new("body cannot be sent as JSON"))?)
    };
    Ok(StoredRequest {
        method: method.to_ascii_uppercase(),
        path,
        body,
    })
}

impl Inner {
    /// The operation's live record, made and stored when absent or expired.
    fn live_record(&self, operation: &str, now: u64) -> Record {
        if let Some(record) = self.store.get(operation) {
            if record.is_live(now) {
                return record;
            }
        }
        let record = Record::new(new_key(), now, self.key_ttl_ms);
        self.store.put(operation, &record);
        record
    }

    /// Stores the request and sends it until a final answer or
    /// `maxAttempts`. Runs under the operation's lock when there is one.
    async fn send_locked(&self, operation: &str, job: Job) -> Result<JsValue, String> {
        let now = js::now_ms();
        let mut record = match job {
            Job::Send(request) => {
                let mut record = self.live_record(operation, now);
                record.request = Some(request);
                record
            }
            Job::Resume => match self.store.get(operation) {
                Some(record) if record.is_live(now) && record.request.is_some() => record,
                _ => {
                    let mut msg = String::from("no stored request for operation ");
                    push_quoted(&mut msg, operation);
                    return Err(msg);
                }
            },
        };
        record.answered = false;
        self.store.put(operation, &record);

        let Some(request) = record.request.as_ref() else {
            return Err("no request".into());
        };
        let mut url = self.base_url.clone();
        url.push_str(&request.path);
        let attempt_request = transport::Request {
            url: &url,
            method: &request.method,
            body: request.body.as_deref(),
            key: &record.key,
            headers: &self.headers,
            timeout_ms: self.timeout_ms,
        };

        let mut attempts: u32 = 0;
        loop {
            attempts += 1;
            let result = transport::attempt(&attempt_request).await;
            let problem_type = match &result {
                Ok(answer) if answer.status == 409 => answer.problem_type(),
                _ => None,
            };
            let (outcome, retry_after) = match &result {
                Ok(answer) => (
                    Attempt::Answer {
                        status: answer.status,
                        problem_type: problem_type.as_deref(),
                    },
                    answer
                        .retry_after
                        .as_deref()
                        .and_then(|v| retry_policy::parse_retry_after(v, js::now_ms() as f64)),
                ),
                Err(Failure::Timeout) => (Attempt::Timeout, None),
                Err(Failure::Network(_)) => (Attempt::Network, None),
            };
            match self
                .policy
                .decide(attempts, outcome, retry_after, js::random())
            {
                Decision::Done => {
                    let Ok(answer) = result else {
                        return Err("unreachable: a failure is never final".into());
                    };
                    self.mark_answered(operation, &record.key);
                    return Ok(outcome_object(&answer, &record.key, attempts));
                }
                Decision::RetryAfter(ms) => js::sleep(ms).await,
                Decision::GiveUp => {
                    return Err(give_up_message(
                        request,
                        operation,
                        attempts,
                        &result,
                        self.timeout_ms,
                    ))
                }
            }
        }
    }

    /// Ends the pending state of the operation, unless it was released or
    /// re-keyed meanwhile (then there is nothing of ours to mark).
    fn mark_answered(&self, operation: &str, key: &str) {
        if let Some(mut current) = self.store.get(operation) {
            if current.key == key {
                current.answered = true;
                self.store.put(operation, &current);
            }
        }
    }
}

/// Runs `work` under the Web Lock `name` where `navigator.locks` exists, so
/// that two tabs never have the same operation in flight; the lock's promise
/// settles as `work` does. Without Web Locks (or when the lock cannot be
/// asked for, say for a reserved name) it runs directly: the server's
/// deduplication still holds.
fn spawn_locked(name: &str, work: Work) -> Promise {
    let slot = Rc::new(Cell::new(Some(work)));
    if let Some((locks, request)) = web_locks() {
        let callback = {
            let slot = slot.clone();
            Closure::once_into_js(move |_lock: JsValue| -> Promise {
                match slot.take() {
                    Some(work) => future_to_promise(work),
                    None => Promise::resolve(&JsValue::UNDEFINED),
                }
            })
        };
        if let Ok(granted) = request.call2(&locks, &JsValue::from_str(name), &callback) {
            return granted.unchecked_into();
        }
    }
    match slot.take() {
        Some(work) => future_to_promise(work),
        None => Promise::resolve(&JsValue::UNDEFINED),
    }
}

/// `navigator.locks` and its `request` method, when the browser has them.
fn web_locks() -> Option<(JsValue, Function)> {
    let locks = js::get(&js::get(&js::global(), "navigator"), "locks");
    let request = js::get(&locks, "request").dyn_into::<Function>().ok()?;
    Some((locks, request))
}

/// `{status, ok, body, replayed, key, attempts}`.
fn outcome_object(answer: &transport::Answer, key: &str, attempts: u32) -> JsValue {
    let outcome: JsValue = Object::new().into();
    let status = answer.status;
    js::set(&outcome, "status", &JsValue::from(status));
    js::set(&outcome, "ok", &JsValue::from((200..300).contains(&status)));
    js::set(&outcome, "body", &answer.body);
    js::set(&outcome, "replayed", &JsValue::from(answer.replayed));
    js::set(&outcome, "key", &JsValue::from_str(key));
    js::set(&outcome, "attempts", &JsValue::from(attempts));
    outcome
}

/// `POST /charges (operation "checkout:cart-42"): no answer after 5
/// attempts; the last one got HTTP 503. …`
fn give_up_message(
    request: &StoredRequest,
    operation: &str,
    attempts: u32,
    last: &Result<transport::Answer, Failure>,
    timeout_ms: f64,
) -> String {
    let mut msg = request.method.clone();
    msg.push(' ');
    msg.push_str(&request.path);
    msg.push_str(" (operation ");
    push_quoted(&mut msg, operation);
    msg.push_str("): gave up after ");
    push_u64(&mut msg, u64::from(attempts));
    msg.push_str(if attempts == 1 {
        " attempt"
    } else {
        " attempts"
    });
    msg.push_str("; the last one ");
    match last {
        Ok(answer) => {
            msg.push_str("got HTTP ");
            push_u64(&mut msg, u64::from(answer.status));
            if let Some(t) = answer.problem_type() {
                msg.push_str(" (");
                msg.push_str(&t);
                msg.push(')');
            }
        }
        Err(Failure::Timeout) => {
            msg.push_str("timed out after ");
            push_u64(&mut msg, timeout_ms as u64);
            msg.push_str(" ms");
        }
        Err(Failure::Network(cause)) => {
            msg.push_str("failed: network error (");
            msg.push_str(cause);
            msg.push(')');
        }
    }
    msg.push_str(". The key and the request are kept: resume(");
    push_quoted(&mut msg, operation);
    msg.push_str(") sends it again.");
    msg
}

fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    out.push_str(s);
    out.push('"');
}

fn check_operation(operation: &str) -> Result<(), JsError> {
    if operation.is_empty() {
        return Err(JsError::new("operation must be a non-empty string"));
    }
    Ok(())
}

/// A fresh UUID v4 from the browser's CSPRNG, lower-case and hyphenated
/// (`8e03c5a2-1f4b-4c1e-9d3a-2b7f6e5d4c3b`), written here rather than by
/// uuid's formatter, which brings slice-index panics along.
fn new_key() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut key = String::with_capacity(36);
    for (i, byte) in uuid::Uuid::new_v4().as_bytes().iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            key.push('-');
        }
        key.push(char::from(HEX[usize::from(byte >> 4)]));
        key.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    key
}

/// `location.origin`, or `""` (relative URLs) where there is none.
fn page_origin() -> String {
    js::get(&js::get(&js::global(), "location"), "origin")
        .as_string()
        .unwrap_or_default()
}

fn option_error(name: &str, expected: &str) -> JsError {
    let mut msg = String::from(name);
    msg.push_str(" must be ");
    msg.push_str(expected);
    JsError::new(&msg)
}

/// A string option; `undefined` and `null` mean the default.
fn string_option(options: &JsValue, name: &str) -> Result<Option<String>, JsError> {
    let value = js::get(options, name);
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    value
        .as_string()
        .map(Some)
        .ok_or_else(|| option_error(name, "a string"))
}

/// A finite number option of at least `min`; `undefined` and `null` mean
/// `default`.
fn number_option(options: &JsValue, name: &str, default: f64, min: f64) -> Result<f64, JsError> {
    let value = js::get(options, name);
    if value.is_undefined() || value.is_null() {
        return Ok(default);
    }
    match value.as_f64() {
        Some(n) if n.is_finite() && n >= min && n <= 9_007_199_254_740_991.0 => Ok(n),
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

/// `headers`: an object of string values, each a valid header.
fn headers_option(value: &JsValue) -> Result<Vec<(String, String)>, JsError> {
    if value.is_undefined() || value.is_null() {
        return Ok(Vec::new());
    }
    if !value.is_object() {
        return Err(option_error("headers", "an object of strings"));
    }
    let mut headers = Vec::new();
    for entry in Object::entries(value.unchecked_ref()).iter() {
        let entry: Array = entry.unchecked_into();
        match (entry.get(0).as_string(), entry.get(1).as_string()) {
            (Some(name), Some(value)) => headers.push((name, value)),
            _ => return Err(option_error("headers", "an object of strings")),
        }
    }
    // Let the browser judge names and values once, here.
    if let Err(e) = transport::headers(&headers, "probe", false) {
        let mut msg = String::from("headers: ");
        msg.push_str(&js::error_text(&e));
        return Err(JsError::new(&msg));
    }
    Ok(headers)
}
