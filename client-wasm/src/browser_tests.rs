//! Browser tests: the client in headless Chromium against a real server.
//!
//! Run by `scripts/test-wasm.sh`, which starts `server --chaos` on a free
//! port with CORS for the test runner's origin and passes its URL at compile
//! time in `IDEM_TEST_SERVER`. Each test uses its own storage prefix and its
//! own bearer token (its own customer), so tests never see each other's keys
//! or charges.

use crate::IdempotentClient;
use js_sys::{Array, Function, Object, Promise, Reflect, JSON};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = fetch)]
    fn fetch_with_init(url: &str, init: &web_sys::RequestInit) -> Promise;
}

/// The server under test, from `IDEM_TEST_SERVER` at compile time.
fn server() -> &'static str {
    match option_env!("IDEM_TEST_SERVER") {
        Some(url) => url,
        None => panic!("IDEM_TEST_SERVER is not set: run these tests with scripts/test-wasm.sh"),
    }
}

fn unique(tag: &str) -> String {
    let mut s = String::from(tag);
    s.push_str(&uuid::Uuid::new_v4().simple().to_string());
    s
}

/// A fresh customer of the demo server: a random bearer token.
fn token() -> String {
    unique("test-")
}

fn local_storage() -> web_sys::Storage {
    get(&js_sys::global(), "localStorage").unchecked_into()
}

fn set(object: &JsValue, name: &str, value: impl Into<JsValue>) {
    Reflect::set(object, &name.into(), &value.into()).unwrap();
}

fn get(object: &JsValue, name: &str) -> JsValue {
    Reflect::get(object, &name.into()).unwrap()
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
            token: token(),
        }
    }

    fn options(&self, chaos: Option<&str>) -> Object {
        let options = Object::new();
        set(&options, "baseUrl", server());
        set(&options, "storagePrefix", self.prefix.as_str());
        set(&options, "backoffBaseMs", 10);
        set(&options, "backoffMaxMs", 100);
        let headers = Object::new();
        let mut auth = String::from("Bearer ");
        auth.push_str(&self.token);
        set(&headers, "Authorization", auth);
        if let Some(chaos) = chaos {
            set(&headers, "X-Chaos", chaos);
        }
        set(&options, "headers", headers);
        options
    }

    fn client(&self, chaos: Option<&str>) -> IdempotentClient {
        IdempotentClient::new(Some(self.options(chaos)))
            .map_err(message)
            .unwrap()
    }

    /// How many charges this test's customer has, from `GET /charges`.
    async fn charges(&self) -> u32 {
        let headers = web_sys::Headers::new().unwrap();
        let mut auth = String::from("Bearer ");
        auth.push_str(&self.token);
        headers.set("Authorization", &auth).unwrap();
        let init = web_sys::RequestInit::new();
        init.set_method("GET");
        init.set_headers(&headers);
        let url = String::from(server()) + "/charges";
        let response: web_sys::Response = JsFuture::from(fetch_with_init(&url, &init))
            .await
            .unwrap()
            .unchecked_into();
        assert_eq!(response.status(), 200, "GET /charges");
        let body = JsFuture::from(response.json().unwrap()).await.unwrap();
        get(&body, "data").unchecked_into::<Array>().length()
    }
}

/// The message of a thrown or rejected `Error`.
fn message(e: impl Into<JsValue>) -> String {
    let value: JsValue = e.into();
    get(&value, "message").as_string().unwrap_or_default()
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

async fn post(client: &IdempotentClient, amount: u32, operation: &str) -> Outcome {
    let value = JsFuture::from(client.post("/charges".into(), charge(amount), operation.into()))
        .await
        .map_err(message)
        .unwrap();
    outcome(value)
}

fn is_uuid_v4(key: &str) -> bool {
    let b = key.as_bytes();
    b.len() == 36
        && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-')
        && b[14] == b'4'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b')
        && b.iter()
            .enumerate()
            .all(|(i, c)| [8, 13, 18, 23].contains(&i) || matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// A key is made once and read back by every later client instance.
#[wasm_bindgen_test]
fn keys_survive_a_new_client_instance() {
    let setup = Setup::new();
    let first = setup
        .client(None)
        .key_for("checkout:cart-1".into())
        .unwrap();
    assert!(is_uuid_v4(&first), "{first}");
    let again = setup
        .client(None)
        .key_for("checkout:cart-1".into())
        .unwrap();
    assert_eq!(first, again);
    let other = setup
        .client(None)
        .key_for("checkout:cart-2".into())
        .unwrap();
    assert_ne!(first, other);
    let stored = local_storage()
        .get_item(&(setup.prefix.clone() + "checkout:cart-1"))
        .unwrap()
        .expect("the key is in localStorage");
    assert!(stored.contains(&first), "{stored}");
}

/// `release` forgets the key; the next call makes a new one.
#[wasm_bindgen_test]
fn release_makes_a_new_key() {
    let setup = Setup::new();
    let client = setup.client(None);
    let first = client.key_for("op".into()).unwrap();
    client.release("op".into()).unwrap();
    let second = client.key_for("op".into()).unwrap();
    assert_ne!(first, second);
    assert_eq!(setup.client(None).key_for("op".into()).unwrap(), second);
}

/// A key lives `keyTtlMs`: then the operation gets a new key, and a new
/// client purges the expired record.
#[wasm_bindgen_test]
async fn an_expired_key_is_replaced_and_purged() {
    let setup = Setup::new();
    let options = setup.options(None);
    set(&options, "keyTtlMs", 50);
    let client = IdempotentClient::new(Some(options.clone()))
        .map_err(message)
        .unwrap();
    let first = client.key_for("short-lived".into()).unwrap();
    let name = setup.prefix.clone() + "short-lived";
    crate::js::sleep(80.0).await;
    assert!(local_storage().get_item(&name).unwrap().is_some());
    IdempotentClient::new(Some(options))
        .map_err(message)
        .unwrap();
    assert!(local_storage().get_item(&name).unwrap().is_none());
    let second = client.key_for("short-lived".into()).unwrap();
    assert_ne!(first, second);
}

/// Entries that are not our current record format count as absent and
/// never throw.
#[wasm_bindgen_test]
fn garbage_records_are_ignored() {
    let setup = Setup::new();
    let storage = local_storage();
    let garbage = [
        "garbage",
        "",
        "{}",
        "null",
        r#"{"v":0,"key":"old","created":1,"expires":99999999999999,"answered":false}"#,
        r#"{"v":1,"key":"k","created":"x","expires":2,"answered":false}"#,
        r#"{"v":1,"key":"","created":1,"expires":99999999999999,"answered":false,"method":"POST","path":"/charges","body":null}"#,
        "\u{0}\u{1}{[",
    ];
    for (i, text) in garbage.iter().enumerate() {
        let name = setup.prefix.clone() + "op-" + &i.to_string();
        storage.set_item(&name, text).unwrap();
    }
    let client = setup.client(None);
    assert!(client.pending_operations().is_empty());
    for i in 0..garbage.len() {
        let key = client
            .key_for(String::from("op-") + &i.to_string())
            .unwrap();
        assert!(is_uuid_v4(&key), "{key}");
    }
    // The garbage was replaced by real records.
    let client = setup.client(None);
    let key = client.key_for("op-0".into()).unwrap();
    assert_eq!(client.key_for("op-0".into()).unwrap(), key);
}

/// A post resolves with `{status, ok, body, replayed, key, attempts}`.
#[wasm_bindgen_test]
async fn a_post_returns_the_outcome() {
    let setup = Setup::new();
    let client = setup.client(None);
    let key = client.key_for("checkout:1".into()).unwrap();
    let outcome = post(&client, 1999, "checkout:1").await;
    assert_eq!(outcome.status, 201, "{outcome:?}");
    assert!(outcome.ok);
    assert!(!outcome.replayed);
    assert_eq!(outcome.key, key);
    assert_eq!(outcome.attempts, 1);
    assert_eq!(get(&outcome.body, "amount").as_f64(), Some(1999.0));
    assert_eq!(
        get(&outcome.body, "currency").as_string().as_deref(),
        Some("usd")
    );
    assert!(get(&outcome.body, "id")
        .as_string()
        .unwrap()
        .starts_with("ch_"));
    assert!(client.pending_operations().is_empty());
    assert_eq!(setup.charges().await, 1);
}

/// A refused request is an answer, not a reason to retry: the outcome
/// carries the parsed problem+json.
#[wasm_bindgen_test]
async fn a_client_error_is_an_answer_with_its_problem() {
    let setup = Setup::new();
    let client = setup.client(None);
    let outcome = post(&client, 0, "bad-amount").await;
    assert_eq!(outcome.status, 400, "{outcome:?}");
    assert!(!outcome.ok);
    assert_eq!(outcome.attempts, 1);
    let problem_type = get(&outcome.body, "type").as_string().unwrap();
    assert!(problem_type.ends_with("invalid-request"), "{problem_type}");
    assert_eq!(setup.charges().await, 0);
}

/// A business `409` (not enough stock) is a final answer: no retry, and the
/// operation is no longer pending.
#[wasm_bindgen_test]
async fn a_business_conflict_is_final() {
    let setup = Setup::new();
    let client = setup.client(None);
    let body = JSON::parse(r#"{"item_id":"sku-poster","quantity":1000}"#).unwrap();
    let value = JsFuture::from(client.post("/reservations".into(), body, "too-many".into()))
        .await
        .map_err(message)
        .unwrap();
    let outcome = outcome(value);
    assert_eq!(outcome.status, 409, "{outcome:?}");
    assert_eq!(outcome.attempts, 1, "{outcome:?}");
    let problem_type = get(&outcome.body, "type").as_string().unwrap();
    assert!(
        problem_type.ends_with("insufficient-inventory"),
        "{problem_type}"
    );
    assert!(client.pending_operations().is_empty());
}

/// Sending the same operation again replays the first answer.
#[wasm_bindgen_test]
async fn a_replay_says_replayed_true() {
    let setup = Setup::new();
    let first = post(&setup.client(None), 500, "checkout:2").await;
    let second = post(&setup.client(None), 500, "checkout:2").await;
    assert_eq!((first.status, first.replayed), (201, false));
    assert_eq!((second.status, second.replayed), (201, true));
    assert_eq!(first.key, second.key);
    assert_eq!(get(&first.body, "id"), get(&second.body, "id"));
    assert_eq!(setup.charges().await, 1);
}

/// An answer slower than `timeoutMs` is abandoned and retried with the same
/// key; the retry gets the stored answer, and there is one charge.
#[wasm_bindgen_test]
async fn a_slow_answer_is_retried_with_the_same_key_and_charges_once() {
    let setup = Setup::new();
    let options = setup.options(Some("delay-after-commit=3000"));
    set(&options, "timeoutMs", 500);
    let client = IdempotentClient::new(Some(options))
        .map_err(message)
        .unwrap();
    let key = client.key_for("slow".into()).unwrap();
    let outcome = post(&client, 700, "slow").await;
    assert_eq!(outcome.status, 201, "{outcome:?}");
    assert!(outcome.attempts >= 2, "{outcome:?}");
    assert!(outcome.replayed, "{outcome:?}");
    assert_eq!(outcome.key, key);
    assert_eq!(setup.charges().await, 1);
}

/// A connection dropped after the commit is retried with the same key, and
/// the retry is answered with the stored response.
///
/// Who retries depends on the connection: on a fresh one `fetch` rejects and
/// the client sends attempt 2; on a reused keep-alive connection Chromium
/// itself resends the request once before `fetch` sees anything, so the
/// client counts one attempt. Either way the resend carries the same
/// `Idempotency-Key` and is replayed.
#[wasm_bindgen_test]
async fn a_dropped_answer_is_retried_and_replayed() {
    let setup = Setup::new();
    let client = setup.client(Some("drop-after-commit"));
    let outcome = post(&client, 800, "dropped").await;
    assert_eq!(outcome.status, 201, "{outcome:?}");
    assert!(matches!(outcome.attempts, 1 | 2), "{outcome:?}");
    assert!(outcome.replayed, "{outcome:?}");
    assert_eq!(setup.charges().await, 1);
}

/// The story of a reload mid-payment: the server commits, the first page
/// gives up without an answer (here: its only attempt times out); the next
/// page finds the operation pending and resumes it with the same key and
/// body, and gets the stored answer.
#[wasm_bindgen_test]
async fn a_stored_request_is_resumed() {
    let setup = Setup::new();
    let options = setup.options(Some("delay-after-commit=3000"));
    set(&options, "maxAttempts", 1);
    set(&options, "timeoutMs", 300);
    let first_page = IdempotentClient::new(Some(options))
        .map_err(message)
        .unwrap();
    let key = first_page.key_for("checkout:reload".into()).unwrap();
    let error =
        JsFuture::from(first_page.post("/charges".into(), charge(900), "checkout:reload".into()))
            .await
            .map(outcome)
            .expect_err("no answer within one attempt");
    let error = message(error);
    assert!(error.contains("timed out after 300 ms"), "{error}");
    assert!(error.contains("1 attempt"), "{error}");
    assert_eq!(
        first_page.pending_operations(),
        vec!["checkout:reload".to_owned()]
    );

    let next_page = setup.client(None);
    assert_eq!(
        next_page.pending_operations(),
        vec!["checkout:reload".to_owned()]
    );
    let resumed = outcome(
        JsFuture::from(next_page.resume("checkout:reload".into()))
            .await
            .map_err(message)
            .unwrap(),
    );
    assert_eq!(resumed.status, 201, "{resumed:?}");
    assert!(resumed.replayed, "{resumed:?}");
    assert_eq!(resumed.key, key);
    assert_eq!(get(&resumed.body, "amount").as_f64(), Some(900.0));
    assert!(next_page.pending_operations().is_empty());
    assert_eq!(setup.charges().await, 1);
}

/// `resume` of an operation with no stored request rejects.
#[wasm_bindgen_test]
async fn resuming_an_unknown_operation_rejects() {
    let setup = Setup::new();
    let error = JsFuture::from(setup.client(None).resume("never-sent".into()))
        .await
        .map(outcome)
        .expect_err("nothing to resume");
    assert!(message(error).contains("no stored request"));
}

/// After `maxAttempts` the call rejects with the cause, and keeps the key
/// and the request.
#[wasm_bindgen_test]
async fn giving_up_keeps_the_key_and_the_request() {
    let setup = Setup::new();
    let options = setup.options(None);
    // Nothing listens on port 9 of the loopback: connection refused.
    set(&options, "baseUrl", "http://127.0.0.1:9");
    set(&options, "maxAttempts", 3);
    let client = IdempotentClient::new(Some(options))
        .map_err(message)
        .unwrap();
    let key = client.key_for("unreachable".into()).unwrap();
    let error = JsFuture::from(client.post("/charges".into(), charge(100), "unreachable".into()))
        .await
        .map(outcome)
        .expect_err("nothing listens there");
    let error = message(error);
    assert!(error.contains("3 attempts"), "{error}");
    assert!(error.contains("network error"), "{error}");
    assert_eq!(client.key_for("unreachable".into()).unwrap(), key);
    assert_eq!(client.pending_operations(), vec!["unreachable".to_owned()]);
}

/// Two sends of one operation at once (two tabs, or a double click) run it
/// once: the Web Lock makes the second wait and replay.
#[wasm_bindgen_test]
async fn concurrent_sends_of_one_operation_charge_once() {
    let setup = Setup::new();
    let a = setup.client(Some("delay-after-commit=300"));
    let b = setup.client(Some("delay-after-commit=300"));
    let first = a.post("/charges".into(), charge(1200), "double-click".into());
    let second = b.post("/charges".into(), charge(1200), "double-click".into());
    let both = JsFuture::from(Promise::all(&Array::of2(&first, &second)))
        .await
        .map_err(message)
        .unwrap();
    let both: Array = both.unchecked_into();
    let (first, second) = (outcome(both.get(0)), outcome(both.get(1)));
    assert_eq!((first.status, second.status), (201, 201));
    assert_eq!(first.key, second.key);
    assert!(first.replayed != second.replayed, "{first:?} {second:?}");
    assert_eq!(setup.charges().await, 1);
}

/// Invalid options throw an `Error` naming the option.
#[wasm_bindgen_test]
fn invalid_options_throw() {
    for (name, value) in [
        ("maxAttempts", JsValue::from(0)),
        ("maxAttempts", JsValue::from(1.5)),
        ("timeoutMs", JsValue::from(-1)),
        ("keyTtlMs", JsValue::from("soon")),
        ("baseUrl", JsValue::from(3)),
    ] {
        let options = Object::new();
        set(&options, name, value);
        let error = IdempotentClient::new(Some(options))
            .map(|_| ())
            .unwrap_err();
        assert!(message(error).contains(name), "{name}");
    }
    let options = Object::new();
    let headers = Object::new();
    set(&headers, "Bad Header", "x");
    set(&options, "headers", headers);
    assert!(IdempotentClient::new(Some(options)).is_err());
    // No options at all is fine.
    assert!(IdempotentClient::new(None).is_ok());
}

/// Fills localStorage to the brim; removes the filler when dropped.
struct FullStorage {
    names: Vec<String>,
}

impl FullStorage {
    fn fill() -> Self {
        let storage = local_storage();
        let mut names = Vec::new();
        let mut size = 1 << 20;
        while size >= 1 {
            let chunk = "x".repeat(size);
            loop {
                let name = String::from("filler-") + &names.len().to_string();
                if storage.set_item(&name, &chunk).is_err() {
                    break;
                }
                names.push(name);
            }
            size /= 2;
        }
        assert!(
            storage.set_item("filler-probe", "1").is_err(),
            "storage is full"
        );
        FullStorage { names }
    }
}

impl Drop for FullStorage {
    fn drop(&mut self) {
        let storage = local_storage();
        for name in &self.names {
            let _ = storage.remove_item(name);
        }
    }
}

/// Counts `console.warn` calls; restores it when dropped.
struct WarnCounter {
    original: JsValue,
    count: std::rc::Rc<std::cell::Cell<u32>>,
    _hook: Closure<dyn FnMut(JsValue)>,
}

impl WarnCounter {
    fn install() -> Self {
        let console = get(&js_sys::global(), "console");
        let original = get(&console, "warn");
        let count = std::rc::Rc::new(std::cell::Cell::new(0));
        let hook = {
            let count = count.clone();
            Closure::<dyn FnMut(JsValue)>::new(move |_message: JsValue| count.set(count.get() + 1))
        };
        let f: &Function = hook.as_ref().unchecked_ref();
        set(&console, "warn", f.clone());
        WarnCounter {
            original,
            count,
            _hook: hook,
        }
    }
}

impl Drop for WarnCounter {
    fn drop(&mut self) {
        set(
            &get(&js_sys::global(), "console"),
            "warn",
            self.original.clone(),
        );
    }
}

/// With localStorage full, keys live in page memory: still one per
/// operation across instances, still sent, and the page is told once.
#[wasm_bindgen_test]
async fn storage_quota_exceeded_falls_back_to_memory() {
    let setup = Setup::new();
    let warnings = WarnCounter::install();
    let full = FullStorage::fill();

    let client = setup.client(None);
    let key = client.key_for("full".into()).unwrap();
    assert!(is_uuid_v4(&key));
    assert_eq!(setup.client(None).key_for("full".into()).unwrap(), key);
    let outcome = post(&client, 1000, "full").await;
    assert_eq!(outcome.status, 201, "{outcome:?}");
    assert_eq!(outcome.key, key);
    let again = post(&setup.client(None), 1000, "full").await;
    assert!(again.replayed);
    assert_eq!(warnings.count.get(), 1);
    assert!(local_storage()
        .get_item(&(setup.prefix.clone() + "full"))
        .unwrap()
        .is_none());

    drop(full);
    drop(warnings);
    assert_eq!(setup.charges().await, 1);
}
