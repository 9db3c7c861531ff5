//! Several calls, tabs and client instances on one operation: one key, one
//! run, and never a silent replacement of a pending request.

use super::*;

/// Two sends of one operation at once (two tabs, or a double click) run it
/// once: the Web Lock makes the second wait until the first has its answer,
/// then replay. Seen from the attempts themselves: the two calls' requests
/// never overlap in time (without the lock the server's deduplication
/// alone would still make one charge, with both requests in flight).
#[wasm_bindgen_test]
async fn concurrent_sends_of_one_operation_charge_once() {
    let setup = Setup::new();
    let (options_a, options_b) = (
        setup.options(Some("delay-after-commit=300")),
        setup.options(Some("delay-after-commit=300")),
    );
    let (events_a, events_b) = (Events::install(&options_a), Events::install(&options_b));
    let (a, b) = (client_of(options_a), client_of(options_b));
    let first = pay(&a, 1200, "double-click", JsValue::UNDEFINED);
    let second = pay(&b, 1200, "double-click", JsValue::UNDEFINED);
    let both: Array = JsFuture::from(Promise::all(&Array::of2(&first, &second)))
        .await
        .map_err(message)
        .unwrap()
        .unchecked_into();
    let (first, second) = (outcome(both.get(0)), outcome(both.get(1)));
    assert_eq!((first.status, second.status), (201, 201));
    assert_eq!(first.key, second.key);
    assert!(first.replayed != second.replayed, "{first:?} {second:?}");
    let (a_from, a_to) = in_flight(&events_a);
    let (b_from, b_to) = in_flight(&events_b);
    // Date.now() has a millisecond's grain.
    assert!(
        b_from >= a_to - 1.0 || a_from >= b_to - 1.0,
        "both calls had requests in flight at once: a {a_from}..{a_to}, b {b_from}..{b_to}"
    );
    assert_eq!(setup.charges().await, 1);
}

/// When a call's requests were in flight: from its first attempt's start
/// to its last attempt's end (Date.now() milliseconds).
fn in_flight(events: &Events) -> (f64, f64) {
    assert!(events.len() > 0, "no attempt was reported");
    let first = events.get(0);
    let last = events.get(events.len() - 1);
    let start = number(&first, "at").unwrap() - number(&first, "latencyMs").unwrap();
    (start, number(&last, "at").unwrap())
}

/// A send with another body while the operation's request is pending (it
/// got no final answer, and may have charged) is refused as `invalid`;
/// the pending request stays as it was, and nothing is sent.
#[wasm_bindgen_test]
async fn another_body_for_a_pending_operation_is_refused() {
    let setup = Setup::new();
    let once = [("baseUrl", UNREACHABLE.into()), ("maxAttempts", 1.into())];
    let client = setup.client_with(None, &once);
    let u = || JsValue::UNDEFINED;
    let first = rejected(pay(&client, 1500, "cart", u())).await;
    assert_eq!(first.kind, "exhausted");
    let before = setup.stored("cart").unwrap();

    let events_options = setup.options(None);
    let events = Events::install(&events_options);
    let other = client_of(events_options);
    let refused = rejected(pay(&other, 1501, "cart", u())).await;
    assert_eq!(
        (refused.kind.as_str(), refused.attempts),
        ("invalid", 0),
        "{refused:?}"
    );
    assert!(refused.message.contains("pending request"), "{refused:?}");
    assert_eq!(refused.key, first.key);
    assert_eq!(events.len(), 0, "nothing was sent");
    assert_eq!(setup.stored("cart").unwrap(), before);

    // The same body again is the same request: it is sent.
    let same = resolved(pay(&other, 1500, "cart", u())).await;
    assert_eq!((same.status, same.key), (201, first.key.unwrap()));
}

/// Removes `navigator.locks` from this page until dropped, as on plain
/// http or in an old browser.
struct NoWebLocks {
    descriptor: JsValue,
}

impl NoWebLocks {
    fn install() -> Self {
        let proto = Object::get_prototype_of(&get(&js::global(), "navigator"));
        let descriptor = Object::get_own_property_descriptor(&proto, &"locks".into());
        js_sys::Reflect::delete_property(&proto, &"locks".into()).unwrap();
        assert!(get(&get(&js::global(), "navigator"), "locks").is_undefined());
        NoWebLocks { descriptor }
    }
}

impl Drop for NoWebLocks {
    fn drop(&mut self) {
        if self.descriptor.is_object() {
            let proto = Object::get_prototype_of(&get(&js::global(), "navigator"));
            Object::define_property(&proto, &"locks".into(), self.descriptor.unchecked_ref());
        }
    }
}

/// Without Web Locks, two tabs that start the same new operation at the
/// same moment each make a key; `localStorage` keeps the one written last.
/// Here the other tab's write lands while this tab's call is starting:
/// the call adopts the key in storage instead of sending its own, so both
/// tabs send one key and the server runs the operation once.
#[wasm_bindgen_test]
async fn without_web_locks_a_racing_tab_s_key_wins_and_is_sent() {
    let _no_locks = NoWebLocks::install();
    let setup = Setup::new();
    let client = setup.client(None);
    let call = pay(&client, 1600, "race", JsValue::UNDEFINED);
    // The other tab read "no key" too, and its write comes last.
    let theirs = "2b7f6e5d-4c3b-4d1e-9d3a-8e03c5a21f4b";
    let mut record = String::from(r#"{"v":1,"key":""#);
    record.push_str(theirs);
    record.push_str(r#"","created":"#);
    record.push_str(&(now() as u64).to_string());
    record.push_str(r#","expires":99999999999999,"answered":false}"#);
    sleep(20.0).await;
    local_storage()
        .set_item(&(setup.prefix.clone() + "race"), &record)
        .unwrap();

    let ours = resolved(call).await;
    assert_eq!(ours.key, theirs, "the key in storage wins");
    let other_tab = post(&setup.client(None), 1600, "race").await;
    assert_eq!((other_tab.key.as_str(), other_tab.replayed), (theirs, true));
    assert_eq!(setup.charges().await, 1);
}

/// The same race for real: two windows of this origin (separate
/// processes where the browser makes them), without Web Locks, start the
/// same new operations at the same moments. Every operation ends with one
/// key in both windows, and one charge.
#[wasm_bindgen_test]
async fn without_web_locks_two_windows_racing_end_with_one_key() {
    let setup = Setup::new();
    let names: Vec<String> = (0..10)
        .map(|i| String::from("race-") + &i.to_string())
        .collect();
    let operations: Vec<&str> = names.iter().map(String::as_str).collect();
    let results =
        frames::race_in_windows(server(), &setup.options(None), &operations, &charge(1700)).await;
    let keys = |i: u32| -> Vec<String> {
        let result = results.get(i);
        assert!(get(&result, "error").is_undefined(), "{result:?}");
        get(&result, "keys")
            .unchecked_into::<Array>()
            .iter()
            .map(|key| key.as_string().unwrap())
            .collect()
    };
    let (a, b) = (keys(0), keys(1));
    let differing: Vec<&str> = operations
        .iter()
        .zip(a.iter().zip(&b))
        .filter(|(_, (a, b))| a != b)
        .map(|(op, _)| *op)
        .collect();
    assert!(differing.is_empty(), "two keys for {differing:?}");
    assert_eq!(setup.charges().await, operations.len() as u32);
}
