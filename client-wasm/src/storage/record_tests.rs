//! The record format's cases, and its invariants as properties. Host
//! only: serde_json stands in for the browser's `JSON.parse`.

use super::*;

/// Decodes as the browser does, with serde_json in the place of
/// `JSON.parse` (which the host does not have).
fn decode(text: &str) -> Slot {
    use serde_json::Value;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(members)) => Record::from_members(|name| match members.get(name) {
            None => Field::Absent,
            Some(Value::Null) => Field::Null,
            Some(Value::Bool(b)) => Field::Bool(*b),
            Some(Value::Number(n)) => Field::Num(n.as_f64().unwrap_or(f64::NAN)),
            Some(Value::String(s)) => Field::Str(s.clone()),
            Some(_) => Field::Other,
        }),
        _ => Slot::Empty,
    }
}

/// The record a text decodes to, if it is one of ours.
fn ours(text: &str) -> Option<Record> {
    match decode(text) {
        Slot::Ours(record) => Some(record),
        _ => None,
    }
}

fn sample() -> Record {
    Record {
        key: "8e03c5a2-1f4b-4c1e-9d3a-2b7f6e5d4c3b".into(),
        created_ms: 1_764_432_000_000,
        expires_ms: 1_764_518_400_000,
        request: Some(StoredRequest {
            method: "POST".into(),
            path: "/charges".into(),
            body: Some(
                r#"{"amount":1999,"currency":"usd","description":"cart \"42\" é ✓ 😀\n"}"#.into(),
            ),
        }),
        answered: false,
        busy_until_ms: Some(1_764_432_012_000),
        sent_ms: Some(1_764_432_000_100),
        tomb: false,
        status: None,
    }
}

#[test]
fn a_record_survives_a_round_trip() {
    let record = sample();
    assert_eq!(ours(&record.encode()), Some(record.clone()));

    let bare = Record::new("k".into(), 5, 10);
    assert_eq!(ours(&bare.encode()), Some(bare));

    let no_body = Record {
        request: Some(StoredRequest {
            method: "DELETE".into(),
            path: "/x?y=1".into(),
            body: None,
        }),
        answered: true,
        ..record
    };
    assert_eq!(ours(&no_body.encode()), Some(no_body));
}

#[test]
fn control_characters_round_trip() {
    let mut record = sample();
    let body: String = (0u8..0x80).map(char::from).collect();
    record.request.as_mut().unwrap().body = Some(body);
    let text = record.encode();
    assert!(!text.bytes().any(|b| b < 0x20), "{text}");
    assert_eq!(ours(&text), Some(record));
}

#[test]
fn the_format_is_stable() {
    let text = Record::new("abc".into(), 1, 1).encode();
    assert_eq!(
        text,
        r#"{"v":2,"key":"abc","created":1,"expires":2,"answered":false}"#
    );
    let text = sample().encode();
    assert!(
        text.ends_with(r#","sent":1764432000100,"busy":1764432012000}"#),
        "{text}"
    );
    // What `Store.get` hands over for another owner's record.
    assert_eq!(decode(r#"{"v":0}"#), Slot::Taken);
}

/// The first release's records (version 1, no owner, no `sent`) are still
/// read: the upgrade path. The committed browser fixture is one of them.
#[test]
fn first_release_records_are_read_without_an_owner() {
    let fixture = include_str!("../browser_tests/fixtures/record-v1.json");
    let Slot::Ours(record) = decode(fixture) else {
        panic!("the fixture is not read: {fixture}");
    };
    assert_eq!(record.sent_ms, None);
    assert_eq!(record.key, "5b0e3c1a-7d2f-4e8b-9a6c-1f2e3d4c5b6a");
    assert!(record.is_pending());
    // Written back, it is a version-2 record, `sent` its key's birth.
    let text = record.encode();
    assert!(text.starts_with(r#"{"v":2,"key":"#), "{text}");
    let upgraded = ours(&text).unwrap();
    assert_eq!(upgraded.key, record.key);
    assert_eq!(upgraded.sent_ms, Some(record.created_ms));
}

#[test]
fn a_version_2_record_says_when_its_request_was_sent() {
    let text = sample().encode();
    assert_eq!(ours(&text).and_then(|r| r.sent_ms), Some(1_764_432_000_100));
    let mistyped = text.replacen(r#""sent":1764432000100"#, r#""sent":"soon""#, 1);
    assert_eq!(decode(&mistyped), Slot::Empty, "{mistyped}");
}

#[test]
fn a_clock_set_back_before_the_key_was_made_ends_its_life() {
    let record = Record::new("k".into(), 10_000, 500);
    assert!(record.is_live(10_000));
    assert!(!record.is_live(9_999), "the device clock went back");
    assert!(!record.is_usable(9_999));
}

#[test]
fn records_written_by_hand_or_by_js_are_read() {
    let text = r#" { "expires" : 20 , "created":10, "key":"k-1","v":1,
        "answered":true, "method":"POST", "path":"/charges",
        "body":"{\"a\":\"\u00e9\ud83d\ude00\/\"}", "note": "extra fields are fine", "n": null } "#;
    let record = ours(text).expect("valid record");
    assert_eq!(record.key, "k-1");
    assert_eq!((record.created_ms, record.expires_ms), (10, 20));
    assert!(record.answered);
    let request = record.request.unwrap();
    assert_eq!(request.body.as_deref(), Some("{\"a\":\"é😀/\"}"));
}

#[test]
fn garbage_reads_as_absent() {
    let long = "x".repeat(100_000);
    for text in [
        "",
        "null",
        "[]",
        "{}",
        "{",
        "not json at all",
        "8e03c5a2-1f4b-4c1e-9d3a-2b7f6e5d4c3b",
        r#"{"v":1,"key":"k","created":1,"expires":2,"answered":false"#,
        r#"{"v":1,"key":"k","created":1,"expires":2,"answered":false}}"#,
        r#"{"v":1,"key":"k","created":1,"expires":2,"answered":false} x"#,
        r#"{"v":1,"key":"k","created":1,"expires":2,"answered":false,}"#,
        r#"{"v":1,"key":"k\u","created":1,"expires":2,"answered":false}"#,
        r#"{"v":1,"key":"k\ud800","created":1,"expires":2,"answered":false}"#,
        r#"{"v":1,"key":"k\x","created":1,"expires":2,"answered":false}"#,
        "{\"v\":1,\"key\":\"k\n\",\"created\":1,\"expires\":2,\"answered\":false}",
        long.as_str(),
    ] {
        assert_eq!(decode(text), Slot::Empty, "{text:?}");
    }
}

#[test]
fn records_of_later_versions_are_left_alone_and_name_their_version() {
    let current = Record::new("k".into(), 1, 2).encode();
    for v in [4, 17] {
        let text = current.replacen("\"v\":2", &format!("\"v\":{v}"), 1);
        assert_eq!(decode(&text), Slot::Later(v), "{text}");
    }
    // Whatever a later version stores beside its `v`.
    let newer = r#"{"v":4,"keys":["a","b"],"expires":-1.5,"request":{"method":"POST"}}"#;
    assert_eq!(decode(newer), Slot::Later(4));
    // Version 0 never existed: it is what `Store.get` hands over for a
    // record of another owner.
    assert_eq!(
        decode(&current.replacen("\"v\":2", "\"v\":0", 1)),
        Slot::Taken
    );
}

#[test]
fn a_version_that_is_not_a_whole_number_is_garbage() {
    let current = Record::new("k".into(), 1, 2).encode();
    // (`2.0` is 2 to JSON.parse: version 2.)
    for v in ["\"2\"", "1.5", "null", "-1", "true", "{}"] {
        let text = current.replacen("\"v\":2", &format!("\"v\":{v}"), 1);
        assert_eq!(decode(&text), Slot::Empty, "{text}");
    }
    // An unversioned shape: just the key.
    assert_eq!(decode(r#"{"key":"k","created":1}"#), Slot::Empty);
}

#[test]
fn records_of_another_shape_read_as_absent() {
    let base = r#""v":1,"key":"k","created":1,"expires":2,"answered":false"#;
    for text in [
        // missing fields
        r#"{"v":1,"created":1,"expires":2,"answered":false}"#.to_string(),
        r#"{"v":1,"key":"k","expires":2,"answered":false}"#.to_string(),
        r#"{"v":1,"key":"k","created":1,"answered":false}"#.to_string(),
        r#"{"v":1,"key":"k","created":1,"expires":2}"#.to_string(),
        // mistyped fields
        r#"{"v":1,"key":7,"created":1,"expires":2,"answered":false}"#.to_string(),
        r#"{"v":1,"key":"k","created":"1","expires":2,"answered":false}"#.to_string(),
        r#"{"v":1,"key":"k","created":1,"expires":-2,"answered":false}"#.to_string(),
        r#"{"v":1,"key":"k","created":1,"expires":2.5,"answered":false}"#.to_string(),
        r#"{"v":1,"key":"k","created":01,"expires":2,"answered":false}"#.to_string(),
        r#"{"v":1,"key":"k","created":1,"expires":2,"answered":0}"#.to_string(),
        r#"{"v":1,"key":"k","created":1,"expires":99999999999999999,"answered":false}"#.to_string(),
        // invalid keys and times
        r#"{"v":1,"key":"","created":1,"expires":2,"answered":false}"#.to_string(),
        r#"{"v":1,"key":"a b","created":1,"expires":2,"answered":false}"#.to_string(),
        r#"{"v":1,"key":"k","created":3,"expires":2,"answered":false}"#.to_string(),
        // half a request, or a body without one
        format!(r#"{{{base},"method":"POST"}}"#),
        format!(r#"{{{base},"path":"/charges"}}"#),
        format!(r#"{{{base},"body":"{{}}"}}"#),
        format!(r#"{{{base},"method":"","path":"/p"}}"#),
        format!(r#"{{{base},"method":"PO ST","path":"/p"}}"#),
        format!(r#"{{{base},"method":"POST","path":"/p","body":1}}"#),
        format!(r#"{{{base},"method":"POST","path":null}}"#),
        // a mistyped lease
        format!(r#"{{{base},"busy":"soon"}}"#),
        format!(r#"{{{base},"busy":-1}}"#),
    ] {
        assert_eq!(decode(&text), Slot::Empty, "{text}");
    }
    assert!(ours(&format!("{{{base}}}")).is_some());
    // A repeated member: the last one counts, as in JSON.parse.
    assert_eq!(
        ours(&format!(r#"{{{base},"key":"k2"}}"#)).unwrap().key,
        "k2"
    );
    // Members a later version may add, of any shape, are ignored.
    assert!(ours(&format!(r#"{{{base},"extra":{{"a":[1,-2.5]}}}}"#)).is_some());
}

#[test]
fn a_key_is_live_until_it_expires() {
    let record = Record::new("k".into(), 1_000, 500);
    assert_eq!(record.expires_ms, 1_500);
    assert!(record.is_live(1_000));
    assert!(record.is_live(1_499));
    assert!(!record.is_live(1_500));
    let forever = Record::new("k".into(), 1_000, u64::MAX);
    assert_eq!(ours(&forever.encode()), Some(forever));
}

#[test]
fn pending_means_sent_without_a_final_answer() {
    let mut record = sample();
    assert!(record.is_pending());
    record.answered = true;
    assert!(!record.is_pending());
    assert!(!Record::new("k".into(), 0, 1).is_pending());
}

#[test]
fn keys_are_visible_ascii_up_to_255() {
    assert!(is_valid_key("8e03c5a2-1f4b-4c1e-9d3a-2b7f6e5d4c3b"));
    assert!(is_valid_key(&"~".repeat(255)));
    assert!(!is_valid_key(&"a".repeat(256)));
    assert!(!is_valid_key(""));
    assert!(!is_valid_key("é"));
    assert!(!is_valid_key("a\tb"));
}

#[test]
fn a_busy_key_stays_usable_past_its_expiry() {
    let mut record = Record::new("k".into(), 1_000, 500);
    assert!(!record.is_busy(1_000));
    record.busy_until_ms = Some(2_000);
    assert!(record.is_busy(1_999));
    assert!(!record.is_busy(2_000));
    assert!(!record.is_live(1_600));
    assert!(record.is_usable(1_600));
    assert!(!record.is_usable(2_000));
    assert_eq!(ours(&record.encode()), Some(record));
}

#[test]
fn a_lease_longer_than_any_call_writes_is_not_believed() {
    let mut record = Record::new("k".into(), 1_000, 500);
    record.busy_until_ms = Some(1_000 + MAX_LEASE_MS);
    assert!(record.is_busy(1_000));
    // Written by a clock that was ahead, or read by one set back.
    assert!(!record.is_busy(999));
    assert!(!record.is_usable(999));
    record.busy_until_ms = Some(u64::MAX >> 11);
    assert!(!record.is_busy(1_000));
}

#[test]
fn a_tombstone_is_version_3_and_never_usable() {
    let mut record = sample();
    record.tomb = true;
    let text = record.encode();
    assert!(text.starts_with(r#"{"v":3,"key":"#), "{text}");
    assert_eq!(ours(&text), Some(record.clone()));
    assert!(!record.is_usable(record.created_ms));
    assert!(record.is_pending());
}

/// After its final answer a record keeps the key, its times, `answered`
/// and the status: no method, path, body or `sent`, so nothing of the
/// request (an e-mail address in its body) outlives the answer.
#[test]
fn an_answered_record_keeps_the_key_and_the_status_not_the_request() {
    let mut record = sample();
    record.busy_until_ms = None;
    record.forget_request(Some(201));
    let text = record.encode();
    assert_eq!(
        text,
        r#"{"v":2,"key":"8e03c5a2-1f4b-4c1e-9d3a-2b7f6e5d4c3b","created":1764432000000,"expires":1764518400000,"answered":true,"status":201}"#
    );
    let read = ours(&text).unwrap();
    assert_eq!(read, record);
    assert!(!read.is_pending());
    assert_eq!(
        (read.request, read.sent_ms, read.status),
        (None, None, Some(201))
    );
}

/// `status` is only ever told, never needed: a record of an earlier
/// version has none, and a mistyped one is no status, not garbage.
#[test]
fn a_missing_or_mistyped_status_is_no_status() {
    let text = r#"{"v":2,"key":"k","created":1,"expires":2,"answered":true}"#;
    assert_eq!(ours(text).unwrap().status, None);
    for status in [r#""201""#, "-1", "70000", "2.5", "null"] {
        let text = text.replace('}', &format!(r#","status":{status}}}"#));
        let record = ours(&text).unwrap_or_else(|| panic!("{text}"));
        assert_eq!(record.status, None, "{text}");
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn arb_record() -> impl Strategy<Value = Record> {
        let request = proptest::option::of(
            ("[A-Z]{1,7}", ".{0,40}", proptest::option::of(".{0,200}"))
                .prop_map(|(method, path, body)| StoredRequest { method, path, body }),
        );
        (
            "[!-~]{1,255}",
            0..=MAX_SAFE_INTEGER,
            0..=MAX_SAFE_INTEGER,
            request,
            any::<bool>(),
            proptest::option::of(0..=MAX_SAFE_INTEGER),
            0..=MAX_SAFE_INTEGER,
            any::<bool>(),
            proptest::option::of(any::<u16>()),
        )
            .prop_map(
                |(key, a, b, request, answered, busy_until_ms, sent, tomb, status)| Record {
                    key,
                    created_ms: a.min(b),
                    expires_ms: a.max(b),
                    sent_ms: request.as_ref().map(|_| sent),
                    request,
                    answered,
                    busy_until_ms,
                    tomb,
                    status,
                },
            )
    }

    proptest! {
        /// Whatever the client stores, it reads back unchanged.
        #[test]
        fn every_record_survives_a_round_trip(record in arb_record()) {
            prop_assert_eq!(ours(&record.encode()), Some(record));
        }

        /// A record cut short (a full quota, a torn write) reads as absent,
        /// never as another record.
        #[test]
        fn a_truncated_record_reads_as_absent(record in arb_record(), cut in 0.0f64..1.0) {
            let text = record.encode();
            let mut at = (text.len() as f64 * cut) as usize;
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            prop_assert_eq!(decode(&text[..at]), Slot::Empty);
        }

        /// Arbitrary text never panics, and whatever decodes re-encodes to
        /// the same record.
        #[test]
        fn arbitrary_text_never_panics(text in ".{0,300}") {
            if let Some(record) = ours(&text) {
                prop_assert_eq!(ours(&record.encode()), Some(record));
            }
        }

        /// Arbitrary JSON-looking text never panics either.
        #[test]
        fn json_shaped_garbage_never_panics(text in r#"\{("[a-z]{1,8}":(-?[0-9]{1,20}(\.[0-9])?|"[^"]{0,10}"|true|null|\{\}|\[[0-9,\[\]]{0,6}\]),?){0,8}\}"#) {
            let _ = decode(&text);
        }
    }
}
