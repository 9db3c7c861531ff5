//! The bodies of the `cargo fuzz` targets in `fuzz/`, kept here so that
//! `server/tests/fuzz_corpus.rs` replays the committed corpus through the
//! very same checks in the ordinary test run (docs/FUZZING.md).
//!
//! Each function takes arbitrary bytes and panics when an invariant of
//! docs/CONTRACT.md section 3 does not hold. None of them may panic for any
//! other reason: every input is a legal input. The parser targets are here;
//! the whole-request target is [`request`](fn@request), on a fresh
//! database from [`app`] per input.

mod app;
mod request;

pub use request::request;

use crate::domain::{Caller, Fingerprint, IdempotencyKey, SessionToken};
use http::{header, HeaderMap, HeaderValue, Method};
use request::header_value;
use serve::headers::MAX_KEY_LEN;

/// Target `idempotency_key`: `data` is one `Idempotency-Key` header value.
///
/// A key that parses is 1 to 255 bytes of 0x21..=0x7E; its structured-field
/// spelling (`"` with `\` and `"` escaped) parses to the same key; its bare
/// spelling parses to itself unless it starts with `"`; optional whitespace
/// around the value changes nothing.
pub fn idempotency_key(data: &[u8]) {
    let parsed = IdempotencyKey::parse(data);
    let mut padded = b" \t".to_vec();
    padded.extend_from_slice(data);
    padded.extend_from_slice(b"\t ");
    assert_eq!(
        IdempotencyKey::parse(&padded),
        parsed,
        "surrounding whitespace changed the answer for {data:?}"
    );
    let Ok(key) = parsed else { return };
    let raw = key.as_ref();
    assert!(
        (1..=MAX_KEY_LEN).contains(&raw.len()),
        "key of {} bytes from {data:?}",
        raw.len()
    );
    assert!(
        raw.bytes().all(|b| (0x21..=0x7e).contains(&b)),
        "key {raw:?} has a byte outside 0x21..=0x7E (from {data:?})"
    );
    let quoted = format!("\"{}\"", raw.replace('\\', "\\\\").replace('"', "\\\""));
    assert_eq!(
        IdempotencyKey::parse(quoted.as_bytes()).as_ref(),
        Ok(&key),
        "the quoted spelling {quoted:?} is another key"
    );
    if !raw.starts_with('"') {
        assert_eq!(
            IdempotencyKey::parse(raw.as_bytes()).as_ref(),
            Ok(&key),
            "the bare spelling {raw:?} is another key"
        );
    }
    let trimmed = trim_ows(data);
    if !trimmed.starts_with(b"\"") {
        assert_eq!(raw.as_bytes(), trimmed, "a bare key is the value itself");
    }
}

/// `raw` without HTTP's optional whitespace (spaces and tabs) around it.
fn trim_ows(raw: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = raw.iter().position(|b| !is_ows(b)).unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |i| i + 1);
    &raw[start..end]
}

/// Target `caller`: `data` is read as UTF-8 (lossily). Its first byte picks
/// the headers sent (bit 0: `Authorization`, bit 1: `Cookie`); the rest, cut
/// at `\n`, is the `Authorization` value and then one `Cookie` value a line.
///
/// `Caller::from_headers` never panics and agrees with a plain reading of
/// docs/CONTRACT.md section 3; `SessionToken::parse` accepts exactly 16 to 256
/// characters of `A-Z a-z 0-9 . _ ~ + / = -`; a valid token names the same
/// caller as `Bearer`, `bearer` with extra spaces, or the `sid` cookie.
pub fn caller(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let mut lines = text.split('\n');
    let authorization = lines.next().unwrap_or_default();
    let cookies: Vec<&str> = lines.collect();

    for candidate in std::iter::once(&*text)
        .chain(std::iter::once(authorization))
        .chain(cookies.iter().copied())
        .chain(authorization.split_once(' ').map(|(_, token)| token))
    {
        assert_eq!(
            SessionToken::parse(candidate).is_ok(),
            is_contract_token(candidate),
            "SessionToken::parse disagrees with the contract on {candidate:?}"
        );
        if SessionToken::parse(candidate).is_ok() {
            same_caller_however_sent(candidate);
        }
    }

    let mut headers = HeaderMap::new();
    let auth_value = (mode & 1 != 0).then(|| header_value(authorization.as_bytes()));
    if let Some(value) = &auth_value {
        headers.insert(header::AUTHORIZATION, value.clone());
    }
    if mode & 2 != 0 {
        for cookie in &cookies {
            headers.append(header::COOKIE, header_value(cookie.as_bytes()));
        }
    }
    let got = crate::domain::caller_from_headers(&headers).ok();
    let expected = match &auth_value {
        Some(value) => expected_bearer(value),
        None => crate::domain::session_cookie(&headers)
            .and_then(|sid| SessionToken::parse(sid).ok())
            .map(|token| crate::domain::caller_of(&token)),
    };
    assert_eq!(got, expected, "Caller::from_headers on {headers:?}");
}

/// docs/CONTRACT.md section 3, read literally.
fn is_contract_token(raw: &str) -> bool {
    (16..=256).contains(&raw.chars().count())
        && raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._~+/=-".contains(c))
}

/// `Bearer TOKEN` (scheme case-insensitive, spaces before the token allowed).
fn expected_bearer(value: &HeaderValue) -> Option<Caller> {
    let value = value.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = SessionToken::parse(token.trim_start_matches(' ')).ok()?;
    Some(crate::domain::caller_of(&token))
}

fn same_caller_however_sent(token: &str) {
    let want = crate::domain::caller_of(&SessionToken::parse(token).expect("a valid token"));
    for (name, value) in [
        (header::AUTHORIZATION, format!("Bearer {token}")),
        (header::AUTHORIZATION, format!("bearer   {token}")),
        (header::COOKIE, format!("sid={token}")),
        (header::COOKIE, format!("theme=dark; sid={token}; x=y")),
    ] {
        let mut headers = HeaderMap::new();
        headers.insert(
            name,
            HeaderValue::from_str(&value).expect("a visible value"),
        );
        assert_eq!(
            crate::domain::caller_from_headers(&headers),
            Ok(want),
            "{value:?} names another caller"
        );
    }
}

/// Target `fingerprint`: when `data` is JSON, its fingerprint does not
/// depend on spacing (pretty or compact re-serialisation), and changes with
/// the value (wrapped in an array or an object), the method and the path.
pub fn fingerprint(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let fp = |v: &serde_json::Value| Fingerprint::new(&Method::POST, "/charges", v);
    let base = fp(&value);
    for text in [
        serde_json::to_string_pretty(&value).expect("a Value serialises"),
        serde_json::to_string(&value).expect("a Value serialises"),
    ] {
        let again: serde_json::Value =
            serde_json::from_str(&text).expect("serde_json reads its own output");
        assert_eq!(
            fp(&again),
            base,
            "the same JSON value spelled {text:?} has another fingerprint (from {:?})",
            String::from_utf8_lossy(data)
        );
    }
    let others = [
        fp(&serde_json::Value::Array(vec![value.clone()])),
        fp(&serde_json::json!({ "body": value.clone() })),
        Fingerprint::new(&Method::PUT, "/charges", &value),
        Fingerprint::new(&Method::POST, "/reservations", &value),
    ];
    for other in others {
        assert_ne!(other, base, "a different request has the same fingerprint");
    }
}

// ---------------------------------------------------------------------------
// Target `request`: whole requests through the router.
