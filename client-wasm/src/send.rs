//! One call (`post`, `send`, `resume`) as a state that `run` in
//! `js/browser.js` drives under the operation's lock ([`crate::lock`]):
//! [`Sending::begin`] stores the request beside the key, the settle waits
//! (JavaScript) and [`Sending::settled`] reads the key again, then each
//! [`Sending::next`] starts an attempt and [`Sending::decide`] says what
//! follows its answer as the retry policy ([`exactly_once_retry`]) decides:
//! the outcome, the wait before a retry (with `onAttempt` and the page's
//! `shouldRetry`, in JavaScript), or the call's `IdempotencyError`, until
//! a final answer, `maxAttempts`, the key's end, or the caller's abort.
//!
//! The waiting is JavaScript's and every step here is synchronous: as an
//! `async fn` the same loop was a state machine of 9.7 KB, with the futures
//! runtime around it (docs/BENCHMARKS.md, "The browser client").

use alloc::rc::Rc;
use alloc::string::String;
use exactly_once_retry::{parse_retry_after_with, Attempt, Decision};
use js_sys::Promise;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::client::{left_alone, Client};
use crate::error::{Code, Failure};
use crate::js::{self, Answer, Call};
use crate::lock::SETTLE_MS;
use crate::storage::record::MAX_LEASE_MS;
use crate::storage::{Entry, Record, StoredRequest};
use crate::text::{self, concat, LastTry};

/// Added to the expected end of an attempt or a wait to make the `busy`
/// lease: time for the loop itself on a slow machine.
const LEASE_MARGIN_MS: u64 = 2_000;

/// What a call sends: a new request, or the stored one.
pub(crate) enum Job {
    Send(StoredRequest),
    Resume,
}

/// One call in flight, handed to `run` in `js/browser.js` (which frees it
/// when the call settles). Opaque to pages.
#[wasm_bindgen]
pub struct Sending {
    client: Rc<Client>,
    operation: String,
    call: Call,
    job: Option<Job>,
    /// The record as stored, the request, the record as it was before the
    /// call (`None`: there was none) and the call's name for messages; set
    /// by `begin`.
    state: Option<(Record, StoredRequest, Option<Record>, String)>,
    attempts: u32,
    status: Option<u16>,
    /// The key's life ends before the next attempt could leave.
    ending: bool,
}

impl Sending {
    pub(crate) fn new(client: Rc<Client>, operation: String, job: Job, call: Call) -> Sending {
        Sending {
            client,
            operation,
            call,
            job: Some(job),
            state: None,
            attempts: 0,
            status: None,
            ending: false,
        }
    }

    fn state(&self) -> &(Record, StoredRequest, Option<Record>, String) {
        match &self.state {
            Some(state) => state,
            None => unreachable(),
        }
    }

    /// The call's `IdempotencyError`: `failure` about this operation, with
    /// the key and what was sent.
    fn fail(&self, code: Code, message: String, cause: JsValue) -> JsValue {
        let mut failure = Failure::new(code, message);
        failure.key = self.state.as_ref().map(|state| state.0.key.clone());
        failure.attempts = self.attempts;
        failure.last_status = self.status;
        failure.cause = cause;
        failure.of(&self.operation).into_js()
    }
}

/// What `begin` is not called before: never.
fn unreachable() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    unreachable!()
}

#[wasm_bindgen]
impl Sending {
    /// Finds the operation's record or makes one and stores the request in
    /// it with a `busy` lease (key and request in one entry, one write), so
    /// that a reload can resume whatever is sent. Returns how long a young
    /// key must settle first, in milliseconds ([`crate::lock`]; 0: not at
    /// all). An abort until then rejects with nothing stored.
    pub fn begin(&mut self) -> Result<f64, JsValue> {
        let client = &self.client;
        let operation = &self.operation;
        let call = &self.call;
        let fail = |failure: Failure| failure.of(operation).into_js();
        let now = js::now_ms();
        let wanted = call.key();
        let found = client.live_record(operation, now).map_err(fail)?;
        let before = found.clone();
        let (mut record, request) = match self.job.take() {
            Some(Job::Send(request)) => {
                let record = found.unwrap_or_else(|| {
                    let key = wanted.clone().unwrap_or_else(js::new_key);
                    Record::new(key, now, client.config.key_ttl_ms())
                });
                (record, request)
            }
            _ => match found {
                Some(mut record) => match record.request.take() {
                    Some(request) => (record, request),
                    None => return Err(fail(nothing_to_resume(operation, Some(&record)))),
                },
                None => return Err(fail(nothing_to_resume(operation, None))),
            },
        };
        let call_name = text::call_name(&request.method, &request.path, operation);
        if let Some(wanted) = wanted.filter(|wanted| *wanted != record.key) {
            return Err(fail(other_key(&call_name, &wanted, record.key)));
        }
        if call.aborted() {
            return Err(fail(aborted_before(&call_name, call)));
        }
        client
            .hold(operation, &mut record, request.clone(), call.timeout_ms())
            .map_err(fail)?;
        let age = now.saturating_sub(record.created_ms);
        self.state = Some((record, request, before, call_name));
        Ok(SETTLE_MS.saturating_sub(age) as f64)
    }

    /// After the settle: another tab may have made a key at the same moment
    /// and written it last; every tab uses the one in storage.
    pub fn settled(&mut self) -> Result<(), JsValue> {
        let client = &self.client;
        let operation = &self.operation;
        let fail = |failure: Failure| failure.of(operation).into_js();
        let Some((record, request, _, _)) = &mut self.state else {
            unreachable()
        };
        match client.store().get(operation) {
            Entry::Ours(stored) => *record = stored,
            Entry::Later(version) => return Err(fail(left_alone(operation, Some(version)))),
            Entry::Taken => return Err(fail(left_alone(operation, None))),
            // Released or cleared meanwhile: the key was never sent.
            Entry::Empty => {}
        }
        client
            .hold(operation, record, request.clone(), self.call.timeout_ms())
            .map_err(fail)
    }

    /// Starts the next attempt (a promise of its [`Answer`]), or rejects the
    /// call: aborted, or its key's life is over (`key-expired`: the
    /// operation becomes a tombstone). A call that stops before anything
    /// was sent puts the record back as it was.
    pub fn next(&mut self) -> Result<Promise, JsValue> {
        let (record, request, before, call_name) = self.state();
        let (client, operation, call) = (&self.client, &self.operation, &self.call);
        let key = &record.key;
        let stop = if call.aborted() {
            let message = text::aborted(call_name, operation, self.attempts);
            Some((Code::Aborted, message, js::reason(call)))
        } else if self.ending || !record.is_live(js::now_ms()) {
            if let Entry::Ours(stored) = client.store().get(operation) {
                if stored.key == *key {
                    client.expire(operation, stored);
                }
            }
            let message = concat(&[
                call_name,
                ": its key expires before another attempt: not sent again (see expiredOperations)",
            ]);
            Some((Code::KeyExpired, message, JsValue::UNDEFINED))
        } else {
            None
        };
        if let Some((code, message, cause)) = stop {
            client.finish(operation, key, None);
            if self.attempts == 0 {
                client.unhold(operation, key, before.clone());
            }
            return Err(self.fail(code, message, cause));
        }
        let attempts = self.attempts + 1;
        client.lease(operation, key, js::now_ms() + call.timeout_ms() as u64);
        let answer = js::attempt(
            call,
            &request.method,
            &request.path,
            request.body.as_deref(),
            key,
            attempts,
        );
        self.attempts = attempts;
        Ok(answer)
    }

    /// What follows an attempt's answer: the outcome (a final answer), a
    /// promise of the wait before a retry (`false` when the page's
    /// `shouldRetry` took the answer as final: then [`Sending::last`]),
    /// `null` when [`Sending::next`] is to say why the call stops, or the
    /// call's `IdempotencyError`.
    pub fn decide(&mut self, answer: JsValue) -> Result<JsValue, JsValue> {
        let answer: &Answer = answer.unchecked_ref();
        if !answer.sent() {
            self.attempts -= 1;
        }
        let attempts = self.attempts;
        let (record, _, before, call_name) = self.state();
        let (client, operation, call) = (&self.client, &self.operation, &self.call);
        let key = &record.key;
        let error = answer.error();
        let problem_type = answer.problem_type();
        let outcome = match error.as_deref() {
            None => Attempt::Answer {
                status: answer.status(),
                problem_type: problem_type.as_deref(),
            },
            Some("timeout") => Attempt::Timeout,
            Some("redirect") => Attempt::Redirect,
            Some(_) => Attempt::Network,
        };
        // An abort is not retried (`decide` is not asked), nor is a failing
        // headers function, nor an operation that needs an operator
        // (CONTRACT section 3), whatever its status.
        let mut decision = match error.as_deref() {
            Some("aborted") => None,
            Some("headers") => Some(Decision::GiveUp),
            _ if problem_type
                .as_deref()
                .is_some_and(|t| t.ends_with("/operation-needs-attention")) =>
            {
                Some(Decision::Done)
            }
            _ => {
                let retry_after = answer.retry_after().and_then(|value| {
                    parse_retry_after_with(&value, js::now_ms() as f64, http_date_ms)
                });
                let policy = client.config.policy(call.max_attempts());
                Some(policy.decide(attempts, outcome, retry_after, js::random()))
            }
        };
        let mut retry_in_ms = None;
        let mut ending = false;
        if let Some(Decision::RetryAfter(ms)) = decision {
            // The next attempt would leave after the key's life: `next`
            // stops the call, without waiting.
            ending = js::now_ms() + ms as u64 >= record.expires_ms;
            if ending {
                decision = None;
            } else {
                retry_in_ms = Some(ms);
            }
        }
        let status = if answer.sent() {
            error.is_none().then(|| answer.status())
        } else {
            self.status
        };
        // Reports the attempt; before a retry, asks the page's
        // `shouldRetry`, then waits.
        let next = js::after(call, answer, key, attempts, retry_in_ms);
        let gave_up = |code, last| {
            client.finish(operation, key, None);
            if attempts == 0 {
                client.unhold(operation, key, before.clone());
            }
            (code, text::gave_up(call_name, operation, attempts, last))
        };
        let result = match decision {
            // Aborted, or the key's end: `next` says so.
            None => Ok(JsValue::NULL),
            // A redirect: final, but no answer of the server. The request
            // stays pending, to resume once the way is clear.
            Some(Decision::Done) if error.is_some() => {
                Err(gave_up(Code::Redirected, LastTry::Redirect))
            }
            Some(Decision::Done) => Ok(self.last(answer.into())),
            Some(Decision::RetryAfter(ms)) => {
                let until = js::now_ms() + ms as u64 + call.timeout_ms() as u64;
                client.lease(operation, key, until);
                Ok(next.into())
            }
            Some(Decision::GiveUp) => {
                let cause = answer.cause().unwrap_or_default();
                Err(match (error.as_deref(), status) {
                    (Some("headers"), _) => gave_up(Code::HeadersFailed, LastTry::Headers(&cause)),
                    (None, Some(status)) => gave_up(
                        Code::AttemptsExhausted,
                        LastTry::Status(status, problem_type.as_deref()),
                    ),
                    (Some("timeout"), _) => gave_up(
                        Code::AttemptsExhausted,
                        LastTry::Timeout(call.timeout_ms() as u64),
                    ),
                    _ => gave_up(Code::AttemptsExhausted, LastTry::Network(&cause)),
                })
            }
        };
        self.status = status;
        self.ending = ending;
        result.map_err(|(code, message)| self.fail(code, message, answer.raw()))
    }

    /// The call's outcome: `answer`, final. The request is forgotten
    /// with it ([`Record::forget_request`]).
    pub fn last(&self, answer: JsValue) -> JsValue {
        let key = &self.state().0.key;
        let answer: &Answer = answer.unchecked_ref();
        self.client
            .finish(&self.operation, key, Some(answer.status()));
        js::outcome(&self.call, answer, key, self.attempts)
    }
}

impl Client {
    /// Stores `request` in `record` with a `busy` lease, in one write,
    /// unless the record holds another request that got no final answer.
    #[inline(never)]
    pub(crate) fn hold(
        &self,
        operation: &str,
        record: &mut Record,
        request: StoredRequest,
        timeout_ms: f64,
    ) -> Result<(), Failure> {
        refuse_other_pending(record, &request, operation)?;
        let now = js::now_ms();
        if !record.is_pending() {
            record.sent_ms = Some(now);
        }
        record.request = Some(request);
        record.answered = false;
        record.status = None;
        record.busy_until_ms = Some(lease_end(now, now + timeout_ms as u64));
        self.store().put(operation, record);
        Ok(())
    }

    /// Puts the operation's record back as it was before a call that sent
    /// nothing (`before`; `None`: there was none), if it still has `key`:
    /// an abort or a failing headers function before the first request
    /// leaves nothing for a reload to resume.
    pub(crate) fn unhold(&self, operation: &str, key: &str, before: Option<Record>) {
        if let Entry::Ours(record) = self.store().get(operation) {
            if record.key == key {
                match before {
                    Some(before) => self.store().put(operation, &before),
                    None => self.store().remove(operation),
                }
            }
        }
    }

    /// Renews the `busy` lease of the operation's record until `until_ms`
    /// plus a margin (at most [`MAX_LEASE_MS`] from now), unless it was
    /// released or re-keyed meanwhile.
    pub(crate) fn lease(&self, operation: &str, key: &str, until_ms: u64) {
        let end = lease_end(js::now_ms(), until_ms);
        self.update(operation, key, |record| {
            record.busy_until_ms = Some(end);
        });
    }

    /// Ends the call's hold on the record: no more lease; after a final
    /// answer (its `status`), the request is forgotten, body and all.
    pub(crate) fn finish(&self, operation: &str, key: &str, status: Option<u16>) {
        self.update(operation, key, |record| {
            record.busy_until_ms = None;
            if status.is_some() {
                record.forget_request(status);
            }
        });
    }

    /// Changes the stored record of `operation` if it still has `key`.
    fn update(&self, operation: &str, key: &str, change: impl FnOnce(&mut Record)) {
        if let Entry::Ours(mut record) = self.store().get(operation) {
            if record.key == key {
                change(&mut record);
                self.store().put(operation, &record);
            }
        }
    }
}

/// When a lease that should cover until `until_ms` ends: a margin later,
/// and never more than [`MAX_LEASE_MS`] after `now` (a longer one would
/// not be believed).
fn lease_end(now: u64, until_ms: u64) -> u64 {
    (until_ms + LEASE_MARGIN_MS).min(now + MAX_LEASE_MS)
}

/// An HTTP-date as Unix epoch milliseconds, read by the browser's
/// `Date.parse`. HTTP-dates are GMT, and the asctime form says so nowhere:
/// without a zone, `Date.parse` would read it as local time.
fn http_date_ms(date: &str) -> Option<f64> {
    let ms = if date.ends_with("GMT") {
        js::date_parse(date)
    } else {
        js::date_parse(&text::concat(&[date, " GMT"]))
    };
    Some(ms).filter(|ms| !ms.is_nan())
}

/// A new request for an operation whose last request got no final answer
/// yet must be that same request: the old one may already have charged,
/// and replacing it would hide that. Resume it, or release it.
fn refuse_other_pending(
    record: &Record,
    request: &StoredRequest,
    operation: &str,
) -> Result<(), Failure> {
    match &record.request {
        Some(pending) if record.is_pending() && !same_request(pending, request) => {
            let mut msg = text::call_name(&request.method, &request.path, operation);
            msg.push_str(": its pending request (");
            msg.push_str(&pending.method);
            msg.push(' ');
            msg.push_str(&pending.path);
            msg.push_str(") differs and may have run: resume or release it first");
            Err(Failure::new(Code::RequestDiffers, msg).keyed(&record.key))
        }
        _ => Ok(()),
    }
}

/// The same request as the server sees it: method, path, and the body as
/// canonical JSON (object keys sorted, no whitespace), so that the same
/// JSON sent with another key order is the same request there and here.
fn same_request(a: &StoredRequest, b: &StoredRequest) -> bool {
    a.method == b.method
        && a.path == b.path
        && match (&a.body, &b.body) {
            (None, None) => true,
            (Some(x), Some(y)) => x == y || js::same_json(x, y),
            _ => false,
        }
}

/// `…: aborted before anything was sent.`, with the abort's reason.
fn aborted_before(call_name: &str, call: &Call) -> Failure {
    let mut failure = Failure::new(Code::Aborted, text::aborted(call_name, "", 0));
    failure.cause = js::reason(call);
    failure
}

/// The refusal of a per-call `key` other than the operation's own.
fn other_key(call_name: &str, wanted: &str, key: String) -> Failure {
    let mut msg = concat(&[call_name, ": has another key than "]);
    text::push_quoted(&mut msg, wanted);
    msg.push_str(" (release it first)");
    Failure::new(Code::KeyDiffers, msg).keyed(&key)
}

/// The refusal of a `resume` with nothing stored to send; when the
/// operation's `record` kept its final answer's status (its request
/// forgotten), that status as `lastStatus`.
fn nothing_to_resume(operation: &str, record: Option<&Record>) -> Failure {
    let mut msg = String::from("resume: no stored request for operation ");
    text::push_quoted(&mut msg, operation);
    let mut failure = Failure::new(Code::NothingToResume, msg);
    failure.last_status = record.and_then(|record| record.status);
    failure
}
