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
        let (record, request, before) = self.prepare(operation, job, timeout_ms, call).await?;
        let key = &record.key;
        let call_name = text::call_name(&request.method, &request.path, operation);
        let policy = self.config.policy(call.max_attempts());

        let mut attempts: u32 = 0;
        let mut status = None;
        // Whether the key's life ends before the next attempt could leave.
        let mut ending = false;
        loop {
            // Why the call stops here without a final answer, if it does.
            let stop = if call.aborted() {
                let message = text::aborted(&call_name, operation, attempts);
                Some((Code::Aborted, message, js::reason(call)))
            } else if ending || !record.is_live(js::now_ms()) {
                Some(self.expired_in_flight(operation, &record, &call_name))
            } else {
                None
            };
            if let Some((code, message, cause)) = stop {
                self.finish(operation, key, false);
                if attempts == 0 {
                    // Nothing was sent: the record goes back as it was.
                    self.unhold(operation, key, before);
                }
                let mut failure = Failure::new(code, message).keyed(key);
                failure.attempts = attempts;
                failure.last_status = status;
                failure.cause = cause;
                return Err(failure);
            }
            attempts += 1;
            let started = js::now_ms();
            self.lease(operation, key, started + timeout_ms as u64);
            let this: Answer = JsFuture::from(js::attempt(
                call,
                &request.method,
                &request.path,
                request.body.as_deref(),
                key,
                attempts,
            ))
            .await
            .unwrap_or_else(|e| e)
            .unchecked_into();
            let latency_ms = js::now_ms().saturating_sub(started);
            if !this.sent() {
                attempts -= 1;
            }

            let error = this.error();
            let problem_type = this.problem_type();
            let outcome = match error.as_deref() {
                None => Attempt::Answer {
                    status: this.status(),
                    problem_type: problem_type.as_deref(),
                },
                Some("timeout") => Attempt::Timeout,
                Some("redirect") => Attempt::Redirect,
                Some(_) => Attempt::Network,
            };
            // An abort is not retried (`decide` is not asked), nor is a
            // failing headers function, nor an operation that needs an
            // operator (CONTRACT section 3), whatever its status.
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
                    let retry_after = this.retry_after().and_then(|value| {
                        parse_retry_after_with(&value, js::now_ms() as f64, http_date_ms)
                    });
                    Some(policy.decide(attempts, outcome, retry_after, js::random()))
                }
            };
            let mut retry_in_ms = None;
            if let Some(Decision::RetryAfter(ms)) = decision {
                // The next attempt would leave after the key's life: the
                // top of the loop stops the call, without waiting.
                ending = js::now_ms() + ms as u64 >= record.expires_ms;
                if ending {
                    decision = None;
                } else {
                    retry_in_ms = Some(ms);
                }
            }
            if this.sent() {
                status = error.is_none().then(|| this.status());
            }
            // Reports the attempt; before a retry, asks the page's
            // `shouldRetry`, then waits.
            let next = js::after(call, &this, key, attempts, latency_ms as f64, retry_in_ms);

            match decision {
                None => {} // aborted, or the key's end: the top of the loop
                Some(Decision::Done) if error.is_some() => {
                    // A redirect: final, but no answer of the server. The
                    // request stays pending, to resume once the way is clear.
                    self.finish(operation, key, false);
                    let message = text::gave_up(&call_name, operation, attempts, LastTry::Redirect);
                    return Err(gave_up(
                        Code::Redirected,
                        message,
                        key,
                        attempts,
                        None,
                        &this,
                    ));
                }
                Some(Decision::Done) => {
                    self.finish(operation, key, true);
                    return Ok(js::outcome(call, &this, key, attempts));
                }
                Some(Decision::RetryAfter(ms)) => {
                    let until = js::now_ms() + ms as u64 + timeout_ms as u64;
                    self.lease(operation, key, until);
                    // `false`: `shouldRetry` took the answer as final. An
                    // abort of the wait is seen at the top of the loop.
                    if JsFuture::from(next).await.ok() == Some(JsValue::FALSE) {
                        self.finish(operation, key, true);
                        return Ok(js::outcome(call, &this, key, attempts));
                    }
                }
                Some(Decision::GiveUp) => {
                    self.finish(operation, key, false);
                    let cause = this.cause().unwrap_or_default();
                    let (code, last) = match (error.as_deref(), status) {
                        (Some("headers"), _) => (Code::HeadersFailed, LastTry::Headers(&cause)),
                        (None, Some(status)) => (
                            Code::AttemptsExhausted,
                            LastTry::Status(status, problem_type.as_deref()),
                        ),
                        (Some("timeout"), _) => {
                            (Code::AttemptsExhausted, LastTry::Timeout(timeout_ms as u64))
                        }
                        _ => (Code::AttemptsExhausted, LastTry::Network(&cause)),
                    };
                    if attempts == 0 {
                        self.unhold(operation, key, before);
                    }
                    let message = text::gave_up(&call_name, operation, attempts, last);
                    return Err(gave_up(code, message, key, attempts, status, &this));
                }
            }
        }
    }

    /// The key's life ended (or will before the next attempt could leave):
    /// the operation becomes a tombstone (`onExpired` told) and the call
    /// stops with `key-expired`.
    fn expired_in_flight(
        &self,
        operation: &str,
        record: &Record,
        call_name: &str,
    ) -> (Code, String, JsValue) {
        if let Entry::Ours(stored) = self.store().get(operation) {
            if stored.key == record.key {
                self.expire(operation, stored);
            }
        }
        let msg = concat(&[
            call_name,
            ": its key expires before another attempt: not sent again (see expiredOperations)",
        ]);
        (Code::KeyExpired, msg, JsValue::UNDEFINED)
    }

    /// Finds the operation's record or makes one, stores the request in
    /// it with a `busy` lease (key and request in one entry, one write),
    /// settles a young key ([`crate::lock`]), and only then returns the
    /// record as stored, the request to send, and the record as it was
    /// before the call (`None`: there was none), so that a reload can
    /// resume whatever was sent, and a call that sends nothing can put
    /// things back. An abort until then rejects with nothing stored.
    async fn prepare(
        &self,
        operation: &str,
        job: Job,
        timeout_ms: f64,
        call: &Call,
    ) -> Result<(Record, StoredRequest, Option<Record>), Failure> {
        let now = js::now_ms();
        let wanted = call.key();
        let found = self.live_record(operation, now)?;
        let before = found.clone();
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
            return Err(aborted_before(&call_name, call));
        }
        self.hold(operation, &mut record, request.clone(), timeout_ms)?;

        let age = now.saturating_sub(record.created_ms);
        if age < SETTLE_MS {
            // An abort here is seen by the send loop.
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
        Ok((record, request, before))
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
        record.busy_until_ms = Some(lease_end(now, now + timeout_ms as u64));
        self.store().put(operation, record);
        Ok(())
    }

    /// Puts the operation's record back as it was before a call that sent
    /// nothing (`before`; `None`: there was none), if it still has `key`:
    /// an abort or a failing headers function before the first request
    /// leaves nothing for a reload to resume.
    fn unhold(&self, operation: &str, key: &str, before: Option<Record>) {
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
    fn lease(&self, operation: &str, key: &str, until_ms: u64) {
        let end = lease_end(js::now_ms(), until_ms);
        self.update(operation, key, |record| {
            record.busy_until_ms = Some(end);
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

/// When a lease that should cover until `until_ms` ends: a margin later,
/// and never more than [`MAX_LEASE_MS`] after `now` (a longer one would
/// not be believed).
fn lease_end(now: u64, until_ms: u64) -> u64 {
    (until_ms + LEASE_MARGIN_MS).min(now + MAX_LEASE_MS)
}

/// A call that stopped without a final answer after `attempts` requests,
/// the last one's error (if any) as its cause.
fn gave_up(
    code: Code,
    message: String,
    key: &str,
    attempts: u32,
    last_status: Option<u16>,
    answer: &Answer,
) -> Failure {
    let mut failure = Failure::new(code, message).keyed(key);
    failure.attempts = attempts;
    failure.last_status = last_status;
    failure.cause = answer.raw();
    failure
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

/// The refusal of a `resume` with nothing stored to send.
fn nothing_to_resume(operation: &str) -> Failure {
    let mut msg = String::from("resume: no stored request for operation ");
    text::push_quoted(&mut msg, operation);
    Failure::new(Code::NothingToResume, msg)
}
