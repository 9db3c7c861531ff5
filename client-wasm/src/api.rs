//! The exported class, `IdempotentClient` (CONTRACT section 4). Each
//! method checks its arguments at the edge ([`crate::options`]) and hands
//! the work on: the key lifecycle to [`crate::client`], a call to
//! [`crate::lock`] and [`crate::send`]. Its TypeScript declarations are
//! written by hand in the package (`package/client_wasm.d.ts`).
//!
//! Every parameter is taken as a `JsValue` and checked here, so that a
//! missing or mistyped argument is an `IdempotencyError` of kind
//! `invalid` (a rejection for the calls that return a promise), never a
//! `TypeError` thrown by the glue.

use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;

use js_sys::Promise;
use wasm_bindgen::prelude::*;

use crate::client::Client;
use crate::error::Failure;
use crate::js;
use crate::options::{self, Config, Invalid};
use crate::send::{Job, Sending};

/// A client that sends each logical operation with one idempotency key,
/// kept in `localStorage` across retries, reloads, tabs and instances.
#[wasm_bindgen(js_name = IdempotentClient)]
pub struct IdempotentClient {
    inner: Rc<Client>,
}

#[wasm_bindgen(js_class = IdempotentClient)]
impl IdempotentClient {
    /// Makes a client; throws an `IdempotencyError` (`invalid`) naming a
    /// wrong option. Touches no storage: expired keys of its
    /// `storagePrefix` and `scope` are forgotten (`onExpired` told) at the
    /// client's first call.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> Result<IdempotentClient, JsValue> {
        let config = Config::read(&options)?;
        Ok(IdempotentClient {
            inner: Rc::new(Client::new(config)),
        })
    }

    /// The operation's idempotency key: a UUID v4 made on first use and
    /// kept in localStorage, the same across reloads, tabs and client
    /// instances, until `release(operation)` or `keyTtlMs` after it was
    /// made.
    #[wasm_bindgen(js_name = keyFor)]
    pub fn key_for(&self, operation: JsValue) -> Result<String, JsValue> {
        let operation = options::operation(&operation).map_err(invalid)?;
        Ok(self.inner.key_for(&operation)?)
    }

    /// `send("POST", path, body, operation, options)`.
    pub fn post(
        &self,
        path: JsValue,
        body: JsValue,
        operation: JsValue,
        options: JsValue,
    ) -> Promise {
        self.send("POST".into(), path, body, operation, options)
    }

    /// Sends `body` as JSON to `baseUrl + path` with the operation's key,
    /// until an answer that is not retried (docs/CLIENT.md, "Retries").
    pub fn send(
        &self,
        method: JsValue,
        path: JsValue,
        body: JsValue,
        operation: JsValue,
        options: JsValue,
    ) -> Promise {
        let job = options::request(&method, &path, &body).map(Job::Send);
        self.start(&operation, job, &options)
    }

    /// Operations whose stored request got no final answer yet (the call
    /// was rejected, or the page was closed during it): what a reloaded
    /// page should `resume`. In no particular order.
    #[wasm_bindgen(js_name = pendingOperations)]
    pub fn pending_operations(&self) -> Vec<String> {
        self.inner.pending()
    }

    /// Sends the operation's stored request again: same key, method, path
    /// and body.
    pub fn resume(&self, operation: JsValue, options: JsValue) -> Promise {
        self.start(&operation, Ok(Job::Resume), &options)
    }

    /// Forgets the operation's key and stored request: the next call for
    /// it starts a new operation with a new key.
    pub fn release(&self, operation: JsValue) -> Result<(), JsValue> {
        let operation = options::operation(&operation).map_err(invalid)?;
        Ok(self.inner.release(&operation)?)
    }

    /// Forgets every key and stored request of this client's
    /// `storagePrefix` and `scope` (what a page calls at sign-out), and
    /// returns how many operations it forgot; throws an `IdempotencyError`
    /// (`invalid`), forgetting nothing, while one of them is being sent.
    pub fn clear(&self) -> Result<u32, JsValue> {
        Ok(self.inner.clear()?)
    }

    /// `true` while keys are kept in `localStorage`; `false` once the
    /// client keeps them in page memory (storage missing, disabled or
    /// full), which a reload loses.
    #[wasm_bindgen(getter)]
    pub fn persistent(&self) -> bool {
        self.inner.store().persistent()
    }

    /// The operations whose key expired while their request had no final
    /// answer (tombstones), each as `onExpired` is told it: `{ operation,
    /// key, method, path, body, sentAt }`. Each is refused
    /// (`operation-expired`) until the page, having found out whether it
    /// ran, `release`s it.
    #[wasm_bindgen(js_name = expiredOperations)]
    pub fn expired_operations(&self) -> Vec<JsValue> {
        self.inner.expired()
    }

    /// Aborts every call of this client that has not settled, those waiting
    /// for their operation's lock included (sign-out: `clear()` may follow
    /// at once), and returns how many.
    #[wasm_bindgen(js_name = abortAll)]
    pub fn abort_all(&self) -> u32 {
        self.inner.abort_all()
    }
}

impl IdempotentClient {
    /// The promise of a call: rejected at once (`invalid`) for a bad
    /// argument, else the send loop under the operation's lock.
    fn start(&self, operation: &JsValue, job: Result<Job, Failure>, options: &JsValue) -> Promise {
        let operation = match options::operation(operation) {
            Ok(operation) => operation,
            Err(message) => return Promise::reject(&invalid(message)),
        };
        let job = match job {
            Ok(job) => job,
            Err(failure) => return Promise::reject(&failure.of(&operation).into_js()),
        };
        let call = match js::call(&self.inner.config.settings, options, &operation) {
            Ok(call) => call,
            Err(error) => return Promise::reject(&error),
        };
        let sending = Sending::new(self.inner.clone(), operation.clone(), job, call.clone());
        js::run(sending.into(), &call, &operation)
    }
}

/// A bad argument, as the `IdempotencyError` a page sees.
fn invalid(message: Invalid) -> JsValue {
    Failure::invalid(message).into_js()
}
