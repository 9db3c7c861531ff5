//! The key lifecycle: made once, kept, expired, released, and left alone
//! when another version of the client owns it or a call is sending it.

use super::*;

/// A key is made once and read back by every later client instance.
#[wasm_bindgen_test]
fn keys_survive_a_new_client_instance() {
    let setup = Setup::new();
    let key_for = |op: &str| setup.client(None).key_for(op.into()).unwrap();
    let first = key_for("checkout:cart-1");
    assert!(is_uuid_v4(&first), "{first}");
    assert_eq!(key_for("checkout:cart-1"), first);
    assert_ne!(key_for("checkout:cart-2"), first);
    let stored = setup.stored("checkout:cart-1").expect("in localStorage");
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
/// client purges the expired record at its first use of the storage.
#[wasm_bindgen_test]
async fn an_expired_key_is_replaced_and_purged() {
    let setup = Setup::new();
    let short_lived = [("keyTtlMs", JsValue::from(50))];
    let client = setup.client_with(None, &short_lived);
    let first = client.key_for("short-lived".into()).unwrap();
    sleep(80.0).await;
    assert!(setup.stored("short-lived").is_some());
    let another = setup.client_with(None, &short_lived);
    assert!(
        setup.stored("short-lived").is_some(),
        "constructing reads nothing"
    );
    assert!(another.pending_operations().is_empty());
    assert!(setup.stored("short-lived").is_none());
    let second = client.key_for("short-lived".into()).unwrap();
    assert_ne!(first, second);
}

/// Entries that are not a record of any version count as absent and never
/// throw.
#[wasm_bindgen_test]
fn garbage_records_are_ignored() {
    let setup = Setup::new();
    let storage = local_storage();
    let garbage = [
        "garbage",
        "",
        "{}",
        "null",
        r#"{"v":"1","key":"old","created":1,"expires":99999999999999,"answered":false}"#,
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
            .key_for(JsValue::from(String::from("op-") + &i.to_string()))
            .unwrap();
        assert!(is_uuid_v4(&key), "{key}");
    }
    // The garbage was replaced by real records.
    let client = setup.client(None);
    let key = client.key_for("op-0".into()).unwrap();
    assert_eq!(client.key_for("op-0".into()).unwrap(), key);
}

/// During a deploy an older tab and a newer one share localStorage: a
/// record of a later format version (with a pending payment) is present,
/// not absent. This client neither uses, replaces, sends nor deletes it;
/// it says so with an `invalid` error naming the version.
#[wasm_bindgen_test]
async fn a_record_of_another_version_is_never_overwritten() {
    let setup = Setup::new();
    // (Version 3 is this release's tombstone: the next format is 4.)
    let newer = r#"{"v":4,"key":"6a1f0c52-0000-4000-8000-000000000001","created":1,"expires":99999999999999,"requests":[{"method":"POST","path":"/charges"}]}"#;
    local_storage()
        .set_item(&(setup.prefix.clone() + "checkout:deploy"), newer)
        .unwrap();
    let client = setup.client(None);

    let thrown = rejection(client.key_for("checkout:deploy".into()).unwrap_err());
    assert_eq!(thrown.kind, "invalid", "{thrown:?}");
    assert!(thrown.message.contains("version 4"), "{thrown:?}");
    let sent = rejected(pay(&client, 100, "checkout:deploy", JsValue::UNDEFINED)).await;
    assert_eq!(
        (sent.kind.as_str(), sent.attempts),
        ("invalid", 0),
        "{sent:?}"
    );
    let resumed = rejected(client.resume("checkout:deploy".into(), JsValue::UNDEFINED)).await;
    assert_eq!(resumed.kind, "invalid", "{resumed:?}");
    assert!(rejection(client.release("checkout:deploy".into()).unwrap_err()).kind == "invalid");
    assert!(client.pending_operations().is_empty());

    // A new client, which purges expired records at its first use, leaves
    // it too.
    assert!(setup.client(None).pending_operations().is_empty());
    assert_eq!(setup.stored("checkout:deploy").as_deref(), Some(newer));
    assert_eq!(setup.charges().await, 0);
}

/// `keyFor` and `release` cannot wait for the operation's lock, but they
/// never take a key from under a call that is sending with it: a key that
/// expires while its call is in flight is still that operation's key, and
/// `release` refuses until the call has settled.
#[wasm_bindgen_test]
async fn key_for_and_release_leave_a_key_in_flight_alone() {
    let setup = Setup::new();
    // (The key lives long enough for the first attempt to leave after the
    // settle: no key is sent after its life.)
    let sender = setup.client_with(Some("delay-after-commit=1500"), &[("keyTtlMs", 300.into())]);
    let call = pay(&sender, 300, "in-flight", JsValue::UNDEFINED);
    sleep(700.0).await; // the key has expired; the call is waiting
    let other_tab = setup.client(None);
    let key = other_tab.key_for("in-flight".into()).unwrap();
    let refused = rejection(other_tab.release("in-flight".into()).unwrap_err());
    assert_eq!(refused.kind, "invalid", "{refused:?}");
    assert!(refused.message.contains("being sent"), "{refused:?}");
    assert_eq!(refused.key.as_deref(), Some(key.as_str()));

    let done = resolved(call).await;
    assert_eq!((done.status, done.key.as_str()), (201, key.as_str()));
    other_tab.release("in-flight".into()).unwrap();
    assert!(setup.stored("in-flight").is_none());
}

/// A bad operation name throws from `keyFor` and `release` (they return no
/// promise), as an `IdempotencyError` of kind `invalid`.
#[wasm_bindgen_test]
fn key_for_and_release_throw_invalid_for_a_bad_name() {
    let client = Setup::new().client(None);
    for bad in [JsValue::UNDEFINED, JsValue::from(""), JsValue::from(7)] {
        let thrown = rejection(client.key_for(bad.clone()).unwrap_err());
        assert_eq!(thrown.kind, "invalid");
        assert!(thrown.message.contains("operation"), "{thrown:?}");
        assert_eq!(rejection(client.release(bad).unwrap_err()).kind, "invalid");
    }
}
