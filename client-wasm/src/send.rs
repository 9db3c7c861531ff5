//! The send loop of one call (`post`, `send`, `resume`), run under the
//! operation's lock ([`crate::lock`]): store the request beside the key,
//! settle a young key, then attempt, report each attempt to `onAttempt`,
//! and wait or stop as the retry policy ([`retry_policy`]) decides, until
//! a final answer, `maxAttempts`, or the caller's abort.

use js_sys::Object;
use retry_policy::{parse_retry_after, Attempt, Decision, Policy};
use wasm_bindgen::prelude::*;

use crate::abort::Abort;
use crate::client::{foreign, Client};
use crate::error::{Failure, Kind};
use crate::js;
use crate::lock::SETTLE_MS;
use crate::options::CallOptions;
use crate::storage::{Record, Slot, StoredRequest};
use crate::text::{self, LastTry};
use crate::transport::{self, Answer};

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
        options: CallOptions,
    ) -> Result<JsValue, JsValue> {
        let abort = Abort::new(options.signal.clone());
        self.run(operation, job, &options, &abort)
            .await
            .map_err(|failure| failure.of(operation).into_js())
    }

    async fn run(
        &self,
        operation: &str,
        job: Job,
        options: &CallOptions,
        abort: &Abort,
    ) -> Result<JsValue, Failure> {
        let timeout_ms = options.timeout_ms.unwrap_or(self.config.timeout_ms);
        let mut record = self.prepare(operation, job, timeout_ms, abort).await?;
        let Some(request) = record.request.take() else {
            return Err(Failure::invalid("no request".into()));
        };
        let call = text::call_name(&request.method, &request.path, operation);
        let failure = |kind, message, attempts, last_status| Failure {
            kind,
            message,
            operation: None,
            key: Some(record.key.clone()),
            attempts,
            last_status,
        };
        // `start` refused the call when there is no base URL.
        let base_url = self.config.base_url.as_deref().unwrap_or_default();
        let url = text::concat(&[base_url, &request.path]);
        let mut headers = self.config.headers.clone();
        headers.extend(options.headers.iter().cloned());
        let attempt_request = transport::Request {
            url: &url,
            method: &request.method,
            body: request.body.as_deref(),
            key: &record.key,
            headers: &headers,
            timeout_ms,
        };
        let policy = Policy {
            max_attempts: options
                .max_attempts
                .unwrap_or(self.config.policy.max_attempts),
            ..self.config.policy
        };

        let mut attempts: u32 = 0;
        let mut status = None;
        loop {
            if abort.is_aborted() {
                self.finish(operation, &record.key, false);
                let message = text::aborted(&call, operation, attempts);
                return Err(failure(Kind::Aborted, message, attempts, status));
            }
            attempts += 1;
            let started = js::now_ms();
            self.lease(operation, &record.key, started + timeout_ms as u64);
            let result = transport::attempt(&attempt_request, abort).await;
            let latency_ms = js::now_ms().saturating_sub(started);

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
                        .and_then(|v| parse_retry_after(v, js::now_ms() as f64)),
                ),
                Err(transport::Failure::Timeout) => (Attempt::Timeout, None),
                Err(transport::Failure::Redirect) => (Attempt::Redirect, None),
                // An abort is not retried: `decide` is not asked.
                Err(_) => (Attempt::Network, None),
            };
            let decision = match &result {
                Err(transport::Failure::Aborted) => None,
                _ => Some(policy.decide(attempts, outcome, retry_after, js::random())),
            };
            status = result.as_ref().ok().map(|answer| answer.status);
            self.report(&Event {
                operation,
                key: &record.key,
                attempt: attempts,
                status,
                error: match &result {
                    Ok(_) => None,
                    Err(transport::Failure::Timeout) => Some("timeout"),
                    Err(transport::Failure::Network(_)) => Some("network"),
                    Err(transport::Failure::Redirect) => Some("redirect"),
                    Err(transport::Failure::Aborted) => Some("aborted"),
                },
                replayed: result.as_ref().is_ok_and(|answer| answer.replayed),
                latency_ms,
                retry_in_ms: match decision {
                    Some(Decision::RetryAfter(ms)) => Some(ms),
                    _ => None,
                },
            });

            match decision {
                None => {} // aborted: the check at the top of the loop
                Some(Decision::Done) => {
                    self.finish(operation, &record.key, true);
                    let Ok(answer) = result else {
                        return Err(Failure::invalid("a failure is never final".into()));
                    };
                    return Ok(outcome_object(&answer, &record.key, attempts));
                }
                Some(Decision::RetryAfter(ms)) => {
                    let until = js::now_ms() + ms as u64 + timeout_ms as u64;
                    self.lease(operation, &record.key, until);
                    // An abort here is seen at the top of the loop.
                    let _ = abort.sleep(ms).await;
                }
                Some(Decision::GiveUp) => {
                    self.finish(operation, &record.key, false);
                    let last = match &result {
                        Ok(_) => LastTry::Status(status.unwrap_or(0), problem_type.as_deref()),
                        Err(transport::Failure::Timeout) => LastTry::Timeout(timeout_ms as u64),
                        Err(transport::Failure::Network(cause)) => LastTry::Network(cause),
                        Err(_) => LastTry::Redirect,
                    };
                    let message = text::gave_up(&call, operation, attempts, last);
                    return Err(failure(Kind::Exhausted, message, attempts, status));
                }
            }
        }
    }

    /// Finds or makes the operation's record, settles a young key
    /// ([`crate::lock`]), then stores the request in the record with a
    /// `busy` lease, before anything is sent, so that a reload can resume
    /// it. An abort until then rejects with nothing stored but the key.
    async fn prepare(
        &self,
        operation: &str,
        job: Job,
        timeout_ms: f64,
        abort: &Abort,
    ) -> Result<Record, Failure> {
        let now = js::now_ms();
        let (mut record, request) = match job {
            Job::Send(request) => (self.usable_record(operation, now)?, request),
            Job::Resume => match self.store.get(operation) {
                Slot::Ours(record) if record.is_usable(now) => match record.request.clone() {
                    Some(request) => (record, request),
                    None => return Err(nothing_to_resume(operation)),
                },
                Slot::Foreign => return Err(foreign(operation)),
                Slot::Ours(_) | Slot::Empty => return Err(nothing_to_resume(operation)),
            },
        };

        let age = now.saturating_sub(record.created_ms);
        if age < SETTLE_MS && !abort.is_aborted() {
            // An abort here is seen below.
            let _ = abort.sleep((SETTLE_MS - age) as f64).await;
            match self.store.get(operation) {
                // Another tab may have made a key at the same moment and
                // written it last: every tab uses the one in storage.
                Slot::Ours(stored) => record = stored,
                Slot::Foreign => return Err(foreign(operation)),
                // Released meanwhile: the key was never sent, keep it.
                Slot::Empty => {}
            }
        }
        if abort.is_aborted() {
            let call = text::call_name(&request.method, &request.path, operation);
            let mut failure = Failure::invalid(text::aborted(&call, operation, 0));
            failure.kind = Kind::Aborted;
            failure.key = Some(record.key);
            return Err(failure);
        }
        refuse_other_pending(&record, &request, operation)?;
        record.request = Some(request);
        record.answered = false;
        record.busy_until_ms = Some(js::now_ms() + timeout_ms as u64 + LEASE_MARGIN_MS);
        self.store.put(operation, &record);
        Ok(record)
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
        if let Slot::Ours(mut record) = self.store.get(operation) {
            if record.key == key {
                change(&mut record);
                self.store.put(operation, &record);
            }
        }
    }

    /// Calls `onAttempt`, if any. What it throws is reported on the console
    /// and changes nothing.
    fn report(&self, event: &Event<'_>) {
        let Some(on_attempt) = &self.config.on_attempt else {
            return;
        };
        let object: JsValue = Object::new().into();
        js::set(&object, "operation", &event.operation.into());
        js::set(&object, "key", &event.key.into());
        js::set(&object, "attempt", &event.attempt.into());
        js::set(&object, "status", &js::nullable(event.status));
        js::set(&object, "error", &js::nullable(event.error));
        js::set(&object, "replayed", &event.replayed.into());
        js::set(&object, "latencyMs", &(event.latency_ms as f64).into());
        js::set(&object, "retryInMs", &js::nullable(event.retry_in_ms));
        if let Err(e) = on_attempt.call1(&JsValue::UNDEFINED, &object) {
            js::console_warn(&text::concat(&[
                "IdempotentClient: onAttempt threw: ",
                &js::error_text(&e),
            ]));
        }
    }
}

/// What `onAttempt` receives.
struct Event<'a> {
    operation: &'a str,
    key: &'a str,
    attempt: u32,
    status: Option<u16>,
    error: Option<&'static str>,
    replayed: bool,
    latency_ms: u64,
    retry_in_ms: Option<f64>,
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
        Some(pending) if record.is_pending() && pending != request => {
            let mut msg = text::call_name(&request.method, &request.path, operation);
            msg.push_str(": the operation has a pending request (");
            msg.push_str(&pending.method);
            msg.push(' ');
            msg.push_str(&pending.path);
            msg.push_str(
                ") with another method, path or body, which may already have run. resume(",
            );
            text::push_quoted(&mut msg, operation);
            msg.push_str(") finishes it; release(");
            text::push_quoted(&mut msg, operation);
            msg.push_str(") starts a new operation.");
            let mut failure = Failure::invalid(msg);
            failure.key = Some(record.key.clone());
            Err(failure)
        }
        _ => Ok(()),
    }
}

/// The refusal of a `resume` with nothing stored to send.
fn nothing_to_resume(operation: &str) -> Failure {
    let mut msg = String::from("resume: no stored request for operation ");
    text::push_quoted(&mut msg, operation);
    Failure::invalid(msg)
}

/// `{status, ok, body, replayed, key, attempts}`.
fn outcome_object(answer: &Answer, key: &str, attempts: u32) -> JsValue {
    let outcome: JsValue = Object::new().into();
    let status = answer.status;
    js::set(&outcome, "status", &status.into());
    js::set(&outcome, "ok", &(200..300).contains(&status).into());
    js::set(&outcome, "body", &answer.body);
    js::set(&outcome, "replayed", &answer.replayed.into());
    js::set(&outcome, "key", &key.into());
    js::set(&outcome, "attempts", &attempts.into());
    outcome
}
