//! The few browser globals the client uses, bound directly so that each
//! costs one small import: timers, `fetch`, `console.warn`, `JSON`, the
//! clock and `Math.random`. They work in windows and workers alike.

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout_raw(handler: &Function, ms: f64) -> JsValue;

    #[wasm_bindgen(js_name = clearTimeout)]
    pub(crate) fn clear_timeout(id: &JsValue);

    /// `fetch(url, init)`; rejects on a network error or an abort. Looked
    /// up on every call, so a page may wrap `globalThis.fetch`.
    #[wasm_bindgen(js_name = fetch)]
    pub(crate) fn fetch(url: &str, init: &JsValue) -> Promise;

    /// An `EventTarget` (an `AbortSignal`) or a `Promise`: the receiver of
    /// the two methods below, bound without their web-sys / js-sys types.
    pub(crate) type Target;

    /// `target.addEventListener(kind, listener)`.
    #[wasm_bindgen(method, js_name = addEventListener)]
    pub(crate) fn add_event_listener(this: &Target, kind: &str, listener: &Function);

    /// `promise.catch(handler)`, with any function as the handler.
    #[wasm_bindgen(method, js_name = catch)]
    pub(crate) fn catch(this: &Target, handler: &Function) -> Promise;

    #[wasm_bindgen(js_namespace = console, js_name = warn)]
    pub(crate) fn console_warn(message: &str);

    /// `JSON.parse` of a JS string, without copying it through Rust.
    #[wasm_bindgen(catch, js_namespace = JSON, js_name = parse)]
    pub(crate) fn json_parse(text: &JsValue) -> Result<JsValue, JsValue>;

    /// `JSON.stringify`; `undefined` for values JSON cannot hold.
    #[wasm_bindgen(catch, js_namespace = JSON, js_name = stringify)]
    pub(crate) fn json_stringify(value: &JsValue) -> Result<JsValue, JsValue>;
}

/// `globalThis`: the window or the worker. (`js_sys::global` is in the
/// module anyway: the futures glue uses it.)
pub(crate) fn global() -> JsValue {
    js_sys::global().into()
}

/// `setTimeout(handler, ms)`, with `ms` clamped to the timers' range:
/// browsers fire a longer delay (over 2^31 - 1 ms, about 24.8 days) at once.
pub(crate) fn set_timeout(handler: &Function, ms: f64) -> JsValue {
    set_timeout_raw(handler, ms.clamp(0.0, 2_147_483_647.0))
}

/// Unix epoch milliseconds.
pub(crate) fn now_ms() -> u64 {
    js_sys::Date::now() as u64
}

/// Uniform in `[0, 1)`.
pub(crate) fn random() -> f64 {
    js_sys::Math::random()
}

/// A promise that resolves after `ms` milliseconds.
pub(crate) fn timer(ms: f64) -> Promise {
    Promise::new(&mut |resolve: Function, _reject: Function| {
        set_timeout(&resolve, ms);
    })
}

/// A readable description of a thrown JS value: `"TypeError: Failed to
/// fetch"` for an error, the string itself for a string.
pub(crate) fn error_text(value: &JsValue) -> String {
    if let Some(s) = value.as_string() {
        return s;
    }
    let get = |name: &str| {
        Reflect::get(value, &JsValue::from_str(name))
            .ok()
            .and_then(|v| v.as_string())
    };
    if value.is_object() {
        match (get("name"), get("message")) {
            (Some(mut name), Some(message)) => {
                if !message.is_empty() {
                    name.push_str(": ");
                    name.push_str(&message);
                }
                return name;
            }
            (None, Some(message)) => return message,
            _ => {}
        }
    }
    String::from("unknown error")
}

/// Reads `object[name]`; `undefined` for a missing member or a non-object.
pub(crate) fn get(object: &JsValue, name: &str) -> JsValue {
    if !object.is_object() {
        return JsValue::UNDEFINED;
    }
    Reflect::get(object, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}

/// Sets `object[name] = value` on a plain object made by this crate.
pub(crate) fn set(object: &JsValue, name: &str, value: &JsValue) {
    // Cannot fail on a plain extensible object.
    let _ = Reflect::set(object, &JsValue::from_str(name), value);
}

/// `value`, or `null` (not `undefined`, which wasm-bindgen makes of `None`).
pub(crate) fn nullable<T: Into<JsValue>>(value: Option<T>) -> JsValue {
    value.map_or(JsValue::NULL, Into::into)
}
