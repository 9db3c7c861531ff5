//! Why a call failed, before it becomes the `IdempotencyError` a page sees
//! (CONTRACT section 4): its `kind`, message, `operation`, `key`,
//! `attempts` and `lastStatus`.
//!
//! The class itself is JavaScript (`js/browser.js`): wasm-bindgen cannot
//! export a class that extends `Error`, and a real subclass is both
//! smaller and simpler than linking prototypes by hand. So, for a page:
//! `import { IdempotencyError }`, `e instanceof IdempotencyError`,
//! `e instanceof Error`, `e.name === "IdempotencyError"`, `e.message`,
//! `e.stack` all work.

use alloc::string::String;
use wasm_bindgen::JsValue;

use crate::js;

/// Why a call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Every attempt got no final answer; `maxAttempts` were sent.
    Exhausted,
    /// The caller's `AbortSignal` fired.
    Aborted,
    /// A bad argument or state: nothing was sent.
    Invalid,
}

/// A failed call, before it becomes an `IdempotencyError`.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) kind: Kind,
    pub(crate) message: String,
    pub(crate) operation: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) attempts: u32,
    pub(crate) last_status: Option<u16>,
}

impl Failure {
    /// A bad argument: nothing was sent.
    pub(crate) fn invalid(message: String) -> Failure {
        Failure {
            kind: Kind::Invalid,
            message,
            operation: None,
            key: None,
            attempts: 0,
            last_status: None,
        }
    }

    /// The same failure, about `operation`.
    pub(crate) fn of(mut self, operation: &str) -> Failure {
        self.operation = Some(operation.into());
        self
    }

    /// The `IdempotencyError` a page sees.
    pub(crate) fn into_js(self) -> JsValue {
        let kind = match self.kind {
            Kind::Exhausted => "exhausted",
            Kind::Aborted => "aborted",
            Kind::Invalid => "invalid",
        };
        js::fail(
            kind,
            &self.message,
            self.operation.as_deref(),
            self.key.as_deref(),
            self.attempts,
            self.last_status,
        )
    }
}

impl From<Failure> for JsValue {
    fn from(failure: Failure) -> JsValue {
        failure.into_js()
    }
}
