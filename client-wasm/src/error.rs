//! `IdempotencyError`: what every rejection (and every throw) of the client
//! is, with its `kind`, `operation`, `key`, `attempts` and `lastStatus`
//! (CONTRACT section 4).
//!
//! wasm-bindgen cannot export a JS class that extends `Error`, so the
//! exported class is an empty marker whose prototype is linked to
//! `Error.prototype` once, and each error is a real `Error` (with its
//! stack) whose prototype is then set to the marker's. So, for a page:
//! `import { IdempotencyError }`, `e instanceof IdempotencyError`,
//! `e instanceof Error`, `e.name === "IdempotencyError"`, `e.message`,
//! `e.stack` all work.

use std::cell::Cell;

use js_sys::{Error, Object};
use wasm_bindgen::prelude::*;

use crate::js;

/// The class that `instanceof` checks against. Never constructed by pages;
/// its type is declared by hand in `api.rs` (as `extends Error`).
#[wasm_bindgen(skip_typescript)]
pub struct IdempotencyError {
    _marker: u8,
}

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
        let error: JsValue = Error::new(&self.message).into();
        Object::set_prototype_of(error.unchecked_ref::<Object>(), &prototype());
        let kind = match self.kind {
            Kind::Exhausted => "exhausted",
            Kind::Aborted => "aborted",
            Kind::Invalid => "invalid",
        };
        js::set(&error, "kind", &kind.into());
        js::set(&error, "operation", &js::nullable(self.operation));
        js::set(&error, "key", &js::nullable(self.key));
        js::set(&error, "attempts", &self.attempts.into());
        js::set(&error, "lastStatus", &js::nullable(self.last_status));
        error
    }
}

impl From<Failure> for JsValue {
    fn from(failure: Failure) -> JsValue {
        failure.into_js()
    }
}

thread_local! {
    /// `IdempotencyError.prototype`, linked to `Error.prototype`.
    static PROTOTYPE: Cell<Option<Object>> = const { Cell::new(None) };
}

/// `IdempotencyError.prototype`, linked to `Error.prototype` and named on
/// first use.
fn prototype() -> Object {
    let proto = PROTOTYPE.with(Cell::take).unwrap_or_else(|| {
        let marker: JsValue = IdempotencyError { _marker: 0 }.into();
        let proto = Object::get_prototype_of(&marker);
        let error_proto = Object::get_prototype_of(&Error::new(""));
        Object::set_prototype_of(&proto, &error_proto);
        js::set(&proto, "name", &"IdempotencyError".into());
        proto
    });
    PROTOTYPE.with(|cell| cell.set(Some(proto.clone())));
    proto
}
