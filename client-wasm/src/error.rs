//! Why a call failed, before it becomes the `IdempotencyError` a page sees
//! (CONTRACT section 4): its stable `code` (from which `js/browser.js`
//! derives the contract's `kind`), message, `operation`, `key`,
//! `attempts`, `lastStatus` and `cause`.
//!
//! The class itself is JavaScript (`js/browser.js`): wasm-bindgen cannot
//! export a class that extends `Error`, and a real subclass is both
//! smaller and simpler than linking prototypes by hand. So, for a page:
//! `import { IdempotencyError }`, `e instanceof IdempotencyError`,
//! `e instanceof Error`, `e.name === "IdempotencyError"`, `e.message`,
//! `e.stack`, `e.cause` all work.

use alloc::string::String;
use wasm_bindgen::JsValue;

use crate::js;

/// Why a call failed: the stable `code` a page checks (docs/CLIENT.md,
/// "Errors"). Kind `invalid` (nothing was sent) unless said otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    /// A bad argument or option: a bug in the page.
    InvalidArgument,
    /// Another request for an operation whose request may have run.
    RequestDiffers,
    /// A per-call `key` other than the operation's.
    KeyDiffers,
    /// `resume` of an operation with nothing stored.
    NothingToResume,
    /// The operation's key expired while its request had no final answer:
    /// refused until the page has looked and `release`d it.
    OperationExpired,
    /// A record of a later client version, or of another prefix or scope.
    ForeignRecord,
    /// `release` or `clear` while a call is sending.
    OperationBusy,
    /// Kind `exhausted`: `maxAttempts` sent, none answered finally.
    AttemptsExhausted,
    /// Kind `exhausted`: a redirect, final.
    Redirected,
    /// Kind `exhausted`: the key's life ended before the next attempt.
    KeyExpired,
    /// Kind `exhausted`: the `headers` function threw or rejected.
    HeadersFailed,
    /// Kind `aborted`: the call's signal, or `abortAll()`.
    Aborted,
}

impl Code {
    fn as_str(self) -> &'static str {
        match self {
            Code::InvalidArgument => "invalid-argument",
            Code::RequestDiffers => "request-differs",
            Code::KeyDiffers => "key-differs",
            Code::NothingToResume => "nothing-to-resume",
            Code::OperationExpired => "operation-expired",
            Code::ForeignRecord => "foreign-record",
            Code::OperationBusy => "operation-busy",
            Code::AttemptsExhausted => "attempts-exhausted",
            Code::Redirected => "redirected",
            Code::KeyExpired => "key-expired",
            Code::HeadersFailed => "headers-failed",
            Code::Aborted => "aborted",
        }
    }
}

/// A failed call, before it becomes an `IdempotencyError`.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: Code,
    pub(crate) message: String,
    pub(crate) operation: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) attempts: u32,
    pub(crate) last_status: Option<u16>,
    /// The error behind it, when there is one (fetch's `TypeError`, what
    /// the headers function threw, the signal's reason).
    pub(crate) cause: JsValue,
}

impl Failure {
    /// A failure with nothing sent.
    pub(crate) fn new(code: Code, message: String) -> Failure {
        Failure {
            code,
            message,
            operation: None,
            key: None,
            attempts: 0,
            last_status: None,
            cause: JsValue::UNDEFINED,
        }
    }

    /// A bad argument: nothing was sent.
    pub(crate) fn invalid(message: String) -> Failure {
        Failure::new(Code::InvalidArgument, message)
    }

    /// The same failure, about `operation`.
    pub(crate) fn of(mut self, operation: &str) -> Failure {
        self.operation = Some(operation.into());
        self
    }

    /// The same failure, about the operation's `key`.
    pub(crate) fn keyed(mut self, key: &str) -> Failure {
        self.key = Some(key.into());
        self
    }

    /// The `IdempotencyError` a page sees.
    pub(crate) fn into_js(self) -> JsValue {
        js::fail(
            self.code.as_str(),
            &self.message,
            self.operation.as_deref(),
            self.key.as_deref(),
            self.attempts,
            self.last_status,
            &self.cause,
        )
    }
}

impl From<Failure> for JsValue {
    fn from(failure: Failure) -> JsValue {
        failure.into_js()
    }
}
