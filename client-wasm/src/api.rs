//! The exported class, `IdempotentClient` (CONTRACT section 4), and the
//! module's TypeScript declarations. Each method checks its arguments at
//! the edge ([`crate::options`]) and hands the work on: the key lifecycle
//! to [`crate::client`], a call to [`crate::lock`] and [`crate::send`].
//!
//! Every parameter is taken as a `JsValue` and checked here, so that a
//! missing or mistyped argument is an `IdempotencyError` of kind
//! `invalid` (a rejection for the calls that return a promise), never a
//! `TypeError` thrown by the glue.

use std::rc::Rc;

use js_sys::Promise;
use wasm_bindgen::prelude::*;

use crate::client::Client;
use crate::error::Failure;
use crate::lock::{self, Work};
use crate::options::{self, CallOptions, Config, Invalid};
use crate::send::Job;
use crate::text::concat;

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/** Options of {@link IdempotentClient}. Every member is optional. */
export interface ClientOptions {
  /** Prefix of every request URL (`baseUrl + path`). Default: the page's origin. */
  baseUrl?: string;
  /** Prefix of the client's localStorage entries and Web Lock names, one per operation. Default: `"idem:"`. */
  storagePrefix?: string;
  /** How long an operation keeps its key, in milliseconds. Default: `86400000` (24 h). */
  keyTtlMs?: number;
  /** Each attempt is aborted after this many milliseconds. Default: `10000`. */
  timeoutMs?: number;
  /** Requests per call, the first included; a whole number of at least 1. Default: `5`. */
  maxAttempts?: number;
  /** Backoff before the first retry is random in `[0, backoffBaseMs)`, doubling each retry. Default: `200`. */
  backoffBaseMs?: number;
  /** Upper bound of the computed backoff, in milliseconds. Default: `10000`. */
  backoffMaxMs?: number;
  /** A `Retry-After` longer than this many milliseconds is waited this long. Default: `60000`. */
  maxRetryAfterMs?: number;
  /** Headers added to every call, such as `Authorization`. Default: none. */
  headers?: Record<string, string>;
  /** Called after every attempt of every call; what it throws is logged and ignored. */
  onAttempt?: (event: AttemptEvent) => void;
}

/** The optional last argument of `post`, `send` and `resume`. */
export interface CallOptions {
  /** Stops waiting and rejects with kind `"aborted"`; the key and the request stay for `resume`. */
  signal?: AbortSignal;
  /** Headers for this call, over the constructor's (`Idempotency-Key` and `Content-Type` cannot be overridden). */
  headers?: Record<string, string>;
  /** This call's per-attempt timeout, in milliseconds. */
  timeoutMs?: number;
  /** This call's attempts, the first included. */
  maxAttempts?: number;
}

/** An RFC 9457 problem, the body of the server's error answers. */
export interface Problem {
  /** URI of the problem type; its last segment names it, e.g. `…/insufficient-inventory`. */
  type: string;
  title: string;
  status: number;
  detail?: string;
  [member: string]: unknown;
}

/** What every outcome says. */
export interface OutcomeBase {
  /** HTTP status of the final answer. */
  status: number;
  /** `true` when the server replayed a stored answer (`Idempotent-Replayed: true`). */
  replayed: boolean;
  /** The idempotency key the call was sent with. */
  key: string;
  /** How many requests this call sent, at least 1. */
  attempts: number;
}

/** A 2xx answer; `body` is its JSON (`T`), its text when it is not JSON, `null` when empty. */
export interface Succeeded<T> extends OutcomeBase {
  ok: true;
  body: T;
}

/** A final answer that is not 2xx: a business refusal such as `409 insufficient-inventory`. */
export interface Refused extends OutcomeBase {
  ok: false;
  /** The problem (the server's error format); text or `null` from anything else on the way. */
  body: Problem | string | null;
}

/** How a call ended: the first answer that is not retried. Check `ok` first. */
export type Outcome<T = unknown> = Succeeded<T> | Refused;

/** What `onAttempt` receives after each attempt. */
export interface AttemptEvent {
  operation: string;
  key: string;
  /** 1 for the first attempt of the call. */
  attempt: number;
  /** The answer's HTTP status; `null` when the attempt got none. */
  status: number | null;
  /** Why the attempt got no answer; `null` when it got one. */
  error: "timeout" | "network" | "redirect" | "aborted" | null;
  replayed: boolean;
  latencyMs: number;
  /** The wait before the next attempt; `null` when none follows. */
  retryInMs: number | null;
}

/** `"exhausted"`: `maxAttempts` sent, none answered finally. `"aborted"`: the signal fired. `"invalid"`: a bad argument, nothing was sent. */
export type IdempotencyErrorKind = "exhausted" | "aborted" | "invalid";

/** Every rejection of the client, and what `new IdempotentClient`, `keyFor` and `release` throw. */
export class IdempotencyError extends Error {
  private constructor();
  readonly name: "IdempotencyError";
  readonly kind: IdempotencyErrorKind;
  /** The operation of the call; `null` for the constructor. */
  readonly operation: string | null;
  /** The operation's key; `null` when it has none yet. */
  readonly key: string | null;
  /** Requests this call sent. */
  readonly attempts: number;
  /** HTTP status of the last attempt; `null` when it got no answer, or none was sent. */
  readonly lastStatus: number | null;
}

/** Sends each logical operation with one idempotency key, kept across retries, reloads, tabs and instances. */
export class IdempotentClient {
  /** Throws an `IdempotencyError` (`"invalid"`) naming a wrong option. */
  constructor(options?: ClientOptions);
  /** The operation's key, made on first use and stored. Throws an `IdempotencyError` (`"invalid"`) for a bad name. */
  keyFor(operation: string): string;
  /** `send("POST", path, body, operation, options)`. */
  post<T = unknown>(path: string, body: unknown, operation: string, options?: CallOptions): Promise<Outcome<T>>;
  /** Stores the request beside the key, then sends it until a final answer; rejects with an `IdempotencyError`. */
  send<T = unknown>(method: string, path: string, body: unknown, operation: string, options?: CallOptions): Promise<Outcome<T>>;
  /** Operations whose stored request got no final answer yet. */
  pendingOperations(): string[];
  /** Sends the stored request again: same key, method, path and body. */
  resume<T = unknown>(operation: string, options?: CallOptions): Promise<Outcome<T>>;
  /** Forgets the key and the request. Throws an `IdempotencyError` (`"invalid"`) while a call is sending them. */
  release(operation: string): void;
  /** Frees the wasm side now (optional). */
  free(): void;
  [Symbol.dispose](): void;
}
"#;

/// A client that sends each logical operation with one idempotency key,
/// kept in `localStorage` across retries, reloads, tabs and instances.
#[wasm_bindgen(js_name = IdempotentClient, skip_typescript)]
pub struct IdempotentClient {
    inner: Rc<Client>,
}

#[wasm_bindgen(js_class = IdempotentClient)]
impl IdempotentClient {
    /// Makes a client; throws an `IdempotencyError` (`invalid`) naming a
    /// wrong option. Expired keys under `storagePrefix` are deleted here.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> Result<IdempotentClient, JsValue> {
        let config = Config::read(&options).map_err(invalid)?;
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
}

impl IdempotentClient {
    /// The promise of a call: rejected at once (`invalid`) for a bad
    /// argument, else the send loop under the operation's lock.
    fn start(&self, operation: &JsValue, job: Result<Job, Invalid>, options: &JsValue) -> Promise {
        let operation = match options::operation(operation) {
            Ok(operation) => operation,
            Err(message) => return Promise::reject(&invalid(message)),
        };
        let checked = job.and_then(|job| {
            let options = CallOptions::read(options)?;
            match self.inner.config.base_url {
                Some(_) => Ok((job, options)),
                None => Err(options::opaque_origin()),
            }
        });
        let (job, options) = match checked {
            Ok(checked) => checked,
            Err(message) => {
                return Promise::reject(&Failure::invalid(message).of(&operation).into_js())
            }
        };
        let name = concat(&[&self.inner.config.prefix, &operation]);
        let signal = options.signal.clone();
        let inner = self.inner.clone();
        let work: Work = Box::pin(async move { inner.call(&operation, job, options).await });
        lock::spawn(&name, signal.as_ref(), work)
    }
}

/// A bad argument, as the `IdempotencyError` a page sees.
fn invalid(message: Invalid) -> JsValue {
    Failure::invalid(message).into_js()
}
