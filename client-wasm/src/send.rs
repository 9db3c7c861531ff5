//! The send loop of one call (`post`, `send`, `resume`), run under the
//! operation's lock ([`crate::lock`]): store the request beside the key,
//! settle a young key, then attempt, report each attempt to `onAttempt`,
//! and wait or stop as the retry policy ([`exactly_once_retry`]) decides, until
//! a final answer, `maxAttempts`, or the caller's abort.

use alloc::string::String;
use exactly_once_retry::{parse_retry_after_with, Attempt, Decision};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::client::{left_alone, new_key, Client};
use crate::error::{Failure, Kind};
use crate::js::{self, Answer, Call};
use crate::lock::SETTLE_MS;
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

impl Client {
    /// One call, from its checked arguments to its outcome or its
    /// `IdempotencyError`.
    pub(crate) async fn call(
        &self,
        operation: &str,
        job: Job,
        call: &Call,
    ) -> Result<JsValue, JsValue> {
        self.run(operation, job, call)
            .await
            .map_err(|failure| failure.of(operation).into_js())
    }

    async fn run(&self, operation: &str, job: Job, call: &Call) -> Result<JsValue, Failure> {
        let timeout_ms = call.timeout_ms();
        let (record, request) = self.prepare(operation, job, timeout_ms, call).await?;
        let call_name = text::call_name(&request.method, &request.path, operation);
        let failure = |kind, message, attempts, last_status| Failure {
            kind,
            message,
            operation: None,
            key: Some(record.key.clone()),
            attempts,
            last_status,
        };
        let policy = self.config.policy(call.max_attempts());

        let mut attempts: u32 = 0;
        let mut status = None;
        loop {
            if call.aborted() {
                self.finish(operation, &record.key, false);
                let message = text::aborted(&call_name, operation, attempts);
                return Err(failure(Kind::Aborted, message, attempts, status));
            }
            attempts += 1;
            let started = js::now_ms();
            self.lease(operation, &record.key, started + timeout_ms as u64);
            let answer: Answer = JsFuture::from(js::attempt(
                call,
                &request.method,
                &request.path,
                request.body.as_deref(),
                &record.key,
            ))
            .await
            .unwrap_or_else(|e| e)
            .unchecked_into();
            let latency_ms = js::now_ms().saturating_sub(started);

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
            // An abort is not retried: `decide` is not asked.
            let decision = match error.as_deref() {
                Some("aborted") => None,
                _ => {
                    let retry_after = answer.retry_after().and_then(|value| {
                        parse_retry_after_with(&value, js::now_ms() as f64, http_date_ms)
                    });
                    Some(policy.decide(attempts, outcome, retry_after, js::random()))
                }
            };
            status = error.is_none().then(|| answer.status());
            let retry_in_ms = match decision {
                Some(Decision::RetryAfter(ms)) => Some(ms),
                _ => None,
            };
            js::report(
                call,
                operation,
                &record.key,
                attempts,
                &answer,
                latency_ms as f64,
                retry_in_ms,
            );

            match decision {
                None => {} // aborted: the check at the top of the loop
                Some(Decision::Done) if error.is_some() => {
                    // A redirect: final, but no answer of the server. The
                    // request stays pending, to resume once the way is clear.
                    self.finish(operation, &record.key, false);
                    let message = text::gave_up(&call_name, operation, attempts, LastTry::Redirect);
                    return Err(failure(Kind::Exhausted, message, attempts, None));
                }
                Some(Decision::Done) => {
                    self.finish(operation, &record.key, true);
                    return Ok(js::outcome(call, &answer, &record.key, attempts));
                }
                Some(Decision::RetryAfter(ms)) => {
                    let until = js::now_ms() + ms as u64 + timeout_ms as u64;
                    self.lease(operation, &record.key, until);
                    // An abort here is seen at the top of the loop.
                    let _ = JsFuture::from(js::sleep(call, ms)).await;
                }
                Some(Decision::GiveUp) => {
                    self.finish(operation, &record.key, false);
                    let cause = answer.cause().unwrap_or_default();
                    let last = match (error.as_deref(), status) {
                        (None, Some(status)) => LastTry::Status(status, problem_type.as_deref()),
                        (Some("timeout"), _) => LastTry::Timeout(timeout_ms as u64),
                        _ => LastTry::Network(&cause),
                    };
                    let message = text::gave_up(&call_name, operation, attempts, last);
                    return Err(failure(Kind::Exhausted, message, attempts, status));
                }
            }
        }
    }

    /// Finds the operation's record or makes one, stores the request in
    /// it with a `busy` lease (key and request in one entry, one write),
    /// settles a young key ([`crate::lock`]), and only then returns the
    /// record as stored and the request to send, so that a reload can
    /// resume whatever was sent. An abort until then rejects with nothing
    /// stored.
    async fn prepare(
        &self,
        operation: &str,
        job: Job,
        timeout_ms: f64,
        call: &Call,
    ) -> Result<(Record, StoredRequest), Failure> {
        let now = js::now_ms();
        let wanted = call.key();
        let found = self.live_record(operation, now, true)?;
        let (mut record, request) = match job {
            Job::Send(request) => {
                let record = found.unwrap_or_else(|| {
                    let key = wanted.clone().unwrap_or_else(new_key);
                    Record::new(key, now, self.config.key_ttl_ms())
                });
                (record, request)
            }
            Job::Resume => {
                let Some((record, request)) = found
                    .and_then(|mut record| record.request.take().map(|request| (record, request)))
                else {
                    return Err(nothing_to_resume(operation));
                };
                (record, request)
            }
        };
        let call_name = text::call_name(&request.method, &request.path, operation);
        if let Some(wanted) = wanted.filter(|wanted| *wanted != record.key) {
            return Err(other_key(&call_name, &wanted, record.key));
        }
        if call.aborted() {
            return Err(aborted_before(&call_name));
        }
        self.hold(operation, &mut record, request.clone(), timeout_ms)?;

        let age = now.saturating_sub(record.created_ms);
        if age < SETTLE_MS {
            // An abort here is seen below.
            let _ = JsFuture::from(js::sleep(call, (SETTLE_MS - age) as f64)).await;
            match self.store().get(operation) {
                // Another tab may have made a key at the same moment and
                // written it last: every tab uses the one in storage.
                Entry::Ours(stored) => record = stored,
                Entry::Later(version) => return Err(left_alone(operation, Some(version))),
                Entry::Taken => return Err(left_alone(operation, None)),
                // Released or cleared meanwhile: the key was never sent.
                Entry::Empty => {}
            }
            self.hold(operation, &mut record, request.clone(), timeout_ms)?;
        }
        if call.aborted() {
            // Nothing was sent; the request is stored, as after an abort in
            // flight, for `resume`.
            self.finish(operation, &record.key, false);
            let mut failure = aborted_before(&call_name);
            failure.key = Some(record.key);
            return Err(failure);
        }
        Ok((record, request))
    }

    /// Stores `request` in `record` with a `busy` lease, in one write,
    /// unless the record holds another request that got no final answer.
    #[inline(never)]
    fn hold(
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
        record.busy_until_ms = Some(now + timeout_ms as u64 + LEASE_MARGIN_MS);
        self.store().put(operation, record);
        Ok(())
    }

    /// Renews the `busy` lease of the operation's record until `until_ms`
    /// plus a margin, unless it was released or re-keyed meanwhile.
    fn lease(&self, operation: &str, key: &str, until_ms: u64) {
        self.update(operation, key, |record| {
            record.busy_until_ms = Some(until_ms + LEASE_MARGIN_MS);
        });
    }

    /// Ends the call's hold on the record: no more lease, and `answered`
    /// after a final answer.
    fn finish(&self, operation: &str, key: &str, answered: bool) {
        self.update(operation, key, |record| {
            record.busy_until_ms = None;
            record.answered |= answered;
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
            let mut failure = Failure::invalid(msg);
            failure.key = Some(record.key.clone());
            Err(failure)
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

/// `…: aborted before anything was sent.`
fn aborted_before(call_name: &str) -> Failure {
    let mut failure = Failure::invalid(text::aborted(call_name, "", 0));
    failure.kind = Kind::Aborted;
    failure
}

/// The refusal of a per-call `key` other than the operation's own.
fn other_key(call_name: &str, wanted: &str, key: String) -> Failure {
    let mut msg = concat(&[call_name, ": has another key than "]);
    text::push_quoted(&mut msg, wanted);
    msg.push_str(" (release it first)");
    let mut failure = Failure::invalid(msg);
    failure.key = Some(key);
    failure
}

/// The refusal of a `resume` with nothing stored to send.
fn nothing_to_resume(operation: &str) -> Failure {
    let mut msg = String::from("resume: no stored request for operation ");
    text::push_quoted(&mut msg, operation);
    Failure::invalid(msg)
}
