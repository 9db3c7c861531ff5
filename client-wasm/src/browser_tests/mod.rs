//! Browser tests: the client in headless Chromium, Firefox and WebKit against a
//! real server.
//!
//! Run by `scripts/test-wasm.sh`, which starts `server --chaos` on a free
//! port with CORS for the test runner's origin, copies the release build
//! to its `/pkg/`, starts `client-wasm/browser-support/portal.mjs` (a
//! captive portal and a gateway in maintenance), and passes both URLs at
//! compile time in `IDEM_TEST_SERVER` and `IDEM_TEST_PORTAL`. Each test
//! uses its own storage prefix and its own bearer token (its own
//! customer), so tests never see each other's keys or charges.
//!
//! One file per topic; this one holds what they share.

mod abort;
mod accounts;
mod calls;
mod codes;
mod frames;
mod headers_and_fetch;
mod key_life;
mod keys;
mod lock_waits;
mod page;
mod privacy;
mod requests;
mod retries;
mod storage;
mod tabs;

use crate::IdempotentClient;
use js_sys::{Array, Function, Object, Promise, JSON};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// The server under test, from `IDEM_TEST_SERVER` at compile time.
fn server() -> &'static str {
    match option_env!("IDEM_TEST_SERVER") {
        Some(url) => url,
        None => panic!("IDEM_TEST_SERVER is not set: run these tests with scripts/test-wasm.sh"),
    }
}

/// The captive portal and gateway, from `IDEM_TEST_PORTAL` at compile
/// time.
fn portal() -> &'static str {
    match option_env!("IDEM_TEST_PORTAL") {
        Some(url) => url,
        None => panic!("IDEM_TEST_PORTAL is not set: run these tests with scripts/test-wasm.sh"),
    }
}

fn unique(tag: &str) -> String {
    let mut s = String::from(tag);
    s.push_str(&uuid::Uuid::new_v4().simple().to_string());
    s
}

/// The browser globals the tests use beyond the client's.
mod js {
    use js_sys::{Function, Promise};
    use wasm_bindgen::prelude::*;

    #[wasm_bindgen]
    extern "C" {
        #[wasm_bindgen(js_name = setTimeout)]
        pub(super) fn set_timeout(handler: &Function, ms: f64) -> JsValue;

        #[wasm_bindgen(js_name = fetch)]
        pub(super) fn fetch(url: &str, init: &JsValue) -> Promise;
    }

    /// `globalThis`: the window.
    pub(super) fn global() -> JsValue {
        js_sys::global().into()
    }

    /// A promise that resolves after `ms` milliseconds.
    pub(super) fn timer(ms: f64) -> Promise {
        Promise::new(&mut |resolve: Function, _reject: Function| {
            set_timeout(&resolve, ms);
        })
    }
}

fn local_storage() -> web_sys::Storage {
    get(&js::global(), "localStorage").unchecked_into()
}

/// `object[name] = value`.
fn set(object: &JsValue, name: &str, value: impl Into<JsValue>) {
    js_sys::Reflect::set(object, &JsValue::from_str(name), &value.into()).unwrap();
}

use crate::js::get;

/// Sleeps `ms` milliseconds.
async fn sleep(ms: f64) {
    let _ = JsFuture::from(js::timer(ms)).await;
}

/// Options of a test client: its own prefix, fast backoff, the server,
/// the caller's token and an optional chaos header.
struct Setup {
    prefix: String,
    token: String,
}

impl Setup {
    fn new() -> Self {
        Setup {
            prefix: unique("test-") + ":",
            token: unique("test-"),
        }
    }

    fn options(&self, chaos: Option<&str>) -> JsValue {
        let options: JsValue = Object::new().into();
        set(&options, "baseUrl", server());
        set(&options, "storagePrefix", self.prefix.as_str());
        set(&options, "backoffBaseMs", 10);
        set(&options, "backoffMaxMs", 100);
        let headers: JsValue = Object::new().into();
        set(&headers, "Authorization", self.bearer());
        if let Some(chaos) = chaos {
            set(&headers, "X-Chaos", chaos);
        }
        set(&options, "headers", headers);
        options
    }

    fn bearer(&self) -> String {
        String::from("Bearer ") + &self.token
    }

    /// [`Setup::options`] with `extra` members set over them.
    fn options_with(&self, chaos: Option<&str>, extra: &[(&str, JsValue)]) -> JsValue {
        let options = self.options(chaos);
        for (name, value) in extra {
            set(&options, name, value.clone());
        }
        options
    }

    fn client(&self, chaos: Option<&str>) -> IdempotentClient {
        client_of(self.options(chaos))
    }

    /// A client of [`Setup::options_with`].
    fn client_with(&self, chaos: Option<&str>, extra: &[(&str, JsValue)]) -> IdempotentClient {
        client_of(self.options_with(chaos, extra))
    }

    /// The raw text of the operation's storage entry.
    fn stored(&self, operation: &str) -> Option<String> {
        local_storage()
            .get_item(&(self.prefix.clone() + operation))
            .unwrap()
    }

    /// How many charges this test's customer has, from `GET /charges`.
    async fn charges(&self) -> u32 {
        let init: JsValue = Object::new().into();
        let headers: JsValue = Object::new().into();
        set(&headers, "Authorization", self.bearer());
        set(&init, "headers", headers);
        let url = String::from(server()) + "/charges";
        let response: web_sys::Response = JsFuture::from(js::fetch(&url, &init))
            .await
            .unwrap()
            .unchecked_into();
        assert_eq!(response.status(), 200, "GET /charges");
        let body = JsFuture::from(response.json().unwrap()).await.unwrap();
        get(&body, "data").unchecked_into::<Array>().length()
    }
}

fn client_of(options: JsValue) -> IdempotentClient {
    IdempotentClient::new(options).map_err(message).unwrap()
}

/// A base URL where nothing listens (port 9 of the loopback): every
/// attempt is refused.
const UNREACHABLE: &str = "http://127.0.0.1:9";

/// A base URL on the portal: `/redirect` (a captive portal) or
/// `/busy/SECS` (503 with `Retry-After: SECS`).
fn on_portal(route: &str) -> JsValue {
    (String::from(portal()) + route).into()
}

/// A plain object with these members.
fn object(members: &[(&str, JsValue)]) -> JsValue {
    let object: JsValue = Object::new().into();
    for (name, value) in members {
        set(&object, name, value.clone());
    }
    object
}

/// The message of a thrown or rejected `Error`.
fn message(e: impl Into<JsValue>) -> String {
    get(&e.into(), "message").as_string().unwrap_or_default()
}

fn charge(amount: u32) -> JsValue {
    let mut text = String::from(r#"{"currency":"usd","description":"browser test","amount":"#);
    text.push_str(&amount.to_string());
    text.push('}');
    JSON::parse(&text).unwrap()
}

/// An outcome's members, for assertions.
#[derive(Debug)]
struct Outcome {
    status: u32,
    ok: bool,
    replayed: bool,
    key: String,
    attempts: u32,
    body: JsValue,
}

fn outcome(value: JsValue) -> Outcome {
    Outcome {
        status: get(&value, "status").as_f64().unwrap() as u32,
        ok: get(&value, "ok").as_bool().unwrap(),
        replayed: get(&value, "replayed").as_bool().unwrap(),
        key: get(&value, "key").as_string().unwrap(),
        attempts: get(&value, "attempts").as_f64().unwrap() as u32,
        body: get(&value, "body"),
    }
}

/// An `IdempotencyError`'s members, for assertions.
#[derive(Debug)]
struct Rejection {
    kind: String,
    message: String,
    operation: Option<String>,
    key: Option<String>,
    attempts: u32,
    last_status: Option<u32>,
}

/// Reads an `IdempotencyError`, checking that it is one: an `Error` whose
/// prototype is `IdempotencyError`'s.
fn rejection(value: JsValue) -> Rejection {
    assert!(
        value.is_instance_of::<js_sys::Error>(),
        "not an Error: {value:?}"
    );
    assert_eq!(
        get(&value, "name").as_string().as_deref(),
        Some("IdempotencyError"),
        "{value:?}"
    );
    assert!(
        !Object::has_own(&Object::get_prototype_of(&value), &"message".into()),
        "the prototype is IdempotencyError's, not Error's"
    );
    Rejection {
        kind: get(&value, "kind").as_string().unwrap(),
        message: message(value.clone()),
        operation: get(&value, "operation").as_string(),
        key: get(&value, "key").as_string(),
        attempts: get(&value, "attempts").as_f64().unwrap() as u32,
        last_status: get(&value, "lastStatus").as_f64().map(|s| s as u32),
    }
}

/// Awaits a call that must resolve.
async fn resolved(promise: Promise) -> Outcome {
    outcome(JsFuture::from(promise).await.map_err(message).unwrap())
}

/// Awaits a call that must reject with an `IdempotencyError`.
async fn rejected(promise: Promise) -> Rejection {
    match JsFuture::from(promise).await {
        Ok(value) => panic!("resolved: {:?}", outcome(value)),
        Err(e) => rejection(e),
    }
}

/// `client.post("/charges", charge(amount), operation, options)`.
fn pay(client: &IdempotentClient, amount: u32, operation: &str, options: JsValue) -> Promise {
    client.post("/charges".into(), charge(amount), operation.into(), options)
}

/// A charge that must resolve.
async fn post(client: &IdempotentClient, amount: u32, operation: &str) -> Outcome {
    resolved(pay(client, amount, operation, JsValue::UNDEFINED)).await
}

/// A lower-case hyphenated UUID of version 4 and the RFC 4122 variant, as
/// `uuid` reads it too.
fn is_uuid_v4(key: &str) -> bool {
    let read = uuid::Uuid::try_parse(key)
        .is_ok_and(|u| u.get_version_num() == 4 && u.get_variant() == uuid::Variant::RFC4122);
    let b = key.as_bytes();
    read && b.len() == 36
        && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-')
        && b[14] == b'4'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b')
        && b.iter()
            .enumerate()
            .all(|(i, c)| [8, 13, 18, 23].contains(&i) || matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Milliseconds since the epoch, as the client counts them.
fn now() -> f64 {
    js_sys::Date::now()
}

/// Collects the events an `onAttempt` option receives.
struct Events {
    list: Array,
    _hook: Closure<dyn FnMut(JsValue)>,
}

impl Events {
    /// Adds `onAttempt` to `options`.
    fn install(options: &JsValue) -> Events {
        let list = Array::new();
        let hook = {
            let list = list.clone();
            Closure::<dyn FnMut(JsValue)>::new(move |event: JsValue| {
                set(&event, "at", now());
                list.push(&event);
            })
        };
        let f: &Function = hook.as_ref().unchecked_ref();
        set(options, "onAttempt", f.clone());
        Events { list, _hook: hook }
    }

    fn get(&self, i: u32) -> JsValue {
        self.list.get(i)
    }

    fn len(&self) -> u32 {
        self.list.length()
    }
}

/// A field of an event as a number, `None` for `null`.
fn number(event: &JsValue, name: &str) -> Option<f64> {
    let value = get(event, name);
    assert!(
        value.is_null() || value.as_f64().is_some(),
        "{name} is {value:?}"
    );
    value.as_f64()
}

/// Calls `abort()` on an `AbortController` after `ms` milliseconds.
fn abort_after(controller: &web_sys::AbortController, ms: f64) {
    let controller = controller.clone();
    let abort = Closure::once_into_js(move || controller.abort());
    js::set_timeout(abort.unchecked_ref(), ms);
}
