//! The caller's `AbortSignal` (the `signal` call option), as something
//! every wait of a call races against: the settle time, each `fetch` and
//! the reading of its answer, each backoff. An abort ends the wait at once.

use js_sys::{Array, Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::AbortSignal;

use crate::js;

/// A call's abort signal, or none.
pub(crate) struct Abort(Option<(AbortSignal, Promise)>);

impl Abort {
    /// Watches `signal`: from now on, an `abort` event ends every
    /// [`Abort::wait`].
    pub(crate) fn new(signal: Option<AbortSignal>) -> Abort {
        Abort(signal.map(|signal| {
            let mut resolve = None;
            // A promise that rejects when the signal fires and never
            // resolves; `reject` itself is the event listener.
            let rejected = Promise::new(&mut |res: Function, reject: Function| {
                signal
                    .unchecked_ref::<js::Target>()
                    .add_event_listener("abort", &reject);
                resolve = Some(res);
            });
            // Marks the rejection as handled, so that an abort after the
            // call settled is not reported as an unhandled rejection.
            // Resolving a rejected promise does nothing.
            if let Some(resolve) = resolve {
                let _ = rejected.unchecked_ref::<js::Target>().catch(&resolve);
            }
            (signal, rejected)
        }))
    }

    /// The signal has fired.
    pub(crate) fn is_aborted(&self) -> bool {
        self.0.as_ref().is_some_and(|(signal, _)| signal.aborted())
    }

    /// Awaits `promise`, or the abort, whichever comes first. After an
    /// error, [`Abort::is_aborted`] tells which it was.
    pub(crate) async fn wait(&self, promise: Promise) -> Result<JsValue, JsValue> {
        let promise = match &self.0 {
            Some((_, rejected)) => Promise::race(&Array::of2(&promise, rejected)),
            None => promise,
        };
        JsFuture::from(promise).await
    }

    /// Sleeps `ms` milliseconds; `Err` when aborted meanwhile.
    pub(crate) async fn sleep(&self, ms: f64) -> Result<(), ()> {
        self.wait(js::timer(ms)).await.map(drop).map_err(drop)
    }
}
