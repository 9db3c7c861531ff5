//! The `Idempotency-Key` header: bare, or as a structured-field string;
//! and reading a header that may appear only once.

use http::header::AsHeaderName;
use http::{HeaderMap, HeaderValue};
use std::fmt;

/// A key: 1 to 255 visible ASCII characters (0x21 to 0x7E).
///
/// `Idempotency-Key: abc` and `Idempotency-Key: "abc"` (an RFC 8941 string,
/// as the IETF draft spells it) parse to the same key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a header value is not a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyKeyError {
    /// The header is absent.
    #[error("this request needs an Idempotency-Key header")]
    Missing,
    /// No characters between the quotes, or an empty header.
    #[error("the Idempotency-Key is empty")]
    Empty,
    /// Longer than 255 characters.
    #[error("the Idempotency-Key is longer than 255 characters")]
    TooLong,
    /// A character outside 0x21..=0x7E (space, control, non-ASCII).
    #[error("the Idempotency-Key may hold only visible ASCII characters (0x21 to 0x7E)")]
    InvalidCharacter,
    /// The header was sent more than once.
    #[error("the Idempotency-Key header was sent more than once")]
    Repeated,
}

impl IdempotencyKey {
    /// Parses one header value. Surrounding spaces (HTTP's optional
    /// whitespace) are ignored.
    pub fn parse(raw: &[u8]) -> Result<Self, IdempotencyKeyError> {
        let raw = trim_ows(raw);
        // A whole structured-field string is the quoted form; anything
        // else, a key that merely starts with `"` included (`"abc`), is a
        // bare key, as the contract allows any visible ASCII sent bare.
        let unquoted = match raw.first() {
            Some(b'"') => unquote(raw),
            _ => None,
        };
        let key = unquoted.as_deref().unwrap_or(raw);
        key_text(key).map(Self).map_err(|bad| match bad {
            BadKey::Empty => IdempotencyKeyError::Empty,
            BadKey::TooLong => IdempotencyKeyError::TooLong,
            BadKey::InvalidCharacter => IdempotencyKeyError::InvalidCharacter,
        })
    }

    /// Reads the key of a request: exactly one `Idempotency-Key` header.
    pub fn from_headers(headers: &http::HeaderMap) -> Result<Self, IdempotencyKeyError> {
        let value = single(headers, "idempotency-key")
            .map_err(|_| IdempotencyKeyError::Repeated)?
            .ok_or(IdempotencyKeyError::Missing)?;
        Self::parse(value.as_bytes())
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({:?})", self.0)
    }
}

fn trim_ows(mut raw: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = raw {
        raw = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = raw {
        raw = rest;
    }
    raw
}

/// RFC 8941 §4.2.5: a string is `"` chars `"`, where `\"` and `\\` are the
/// only escapes and nothing may follow the closing quote. `None` when `raw`
/// is not one such string.
fn unquote(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut bytes = raw[1..].iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => out.push(escaped),
                _ => return None,
            },
            b'"' => return bytes.next().is_none().then_some(out),
            _ => out.push(b),
        }
    }
    None
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
/// A header that must appear at most once appeared more often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeated;

/// The value of header `name`: `None` when the request has none,
/// [`Repeated`] when it has more than one (`HeaderMap::get` would quietly
/// take the first).
pub fn single<K: AsHeaderName>(
    headers: &HeaderMap,
    name: K,
) -> Result<Option<&HeaderValue>, Repeated> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(Repeated);
    }
    Ok(first)
}

/// The longest idempotency key accepted, in characters: Stripe's limit,
/// which the contract takes for the server's keys.
pub const MAX_KEY_LEN: usize = 255;

/// Why bytes are not the text of an idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadKey {
    /// No characters.
    Empty,
    /// More than [`MAX_KEY_LEN`].
    TooLong,
    /// A character outside 0x21..=0x7E (space, control, non-ASCII).
    InvalidCharacter,
}

/// The text of an idempotency key: 1 to [`MAX_KEY_LEN`] visible ASCII
/// characters (0x21 to 0x7E). HTTP's surrounding whitespace is the
/// caller's to trim (the server unquotes first).
pub fn key_text(key: &[u8]) -> Result<String, BadKey> {
    if key.is_empty() {
        return Err(BadKey::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(BadKey::TooLong);
    }
    if !key.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err(BadKey::InvalidCharacter);
    }
    // Only visible ASCII is left, so this cannot fail.
    String::from_utf8(key.to_vec()).map_err(|_| BadKey::InvalidCharacter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;
    use IdempotencyKeyError::*;

    #[test]
    fn a_header_is_absent_single_or_repeated() {
        let mut headers = HeaderMap::new();
        assert_eq!(single(&headers, "x-once"), Ok(None));
        headers.append("x-once", HeaderValue::from_static("a"));
        assert_eq!(
            single(&headers, "x-once"),
            Ok(Some(&HeaderValue::from_static("a")))
        );
        headers.append("X-Once", HeaderValue::from_static("b"));
        assert_eq!(single(&headers, "x-once"), Err(super::Repeated));
    }

    #[test]
    fn key_text_is_1_to_255_visible_ascii_characters() {
        for good in ["a", "!~", "order-42:attempt", &"k".repeat(255)] {
            assert_eq!(key_text(good.as_bytes()).as_deref(), Ok(good));
        }
        assert_eq!(key_text(b""), Err(BadKey::Empty));
        assert_eq!(key_text(&[b'k'; 256]), Err(BadKey::TooLong));
        for bad in [&b"a b"[..], b"caf\xc3\xa9", b"tab\there", b"\x7f", b" x"] {
            assert_eq!(key_text(bad), Err(BadKey::InvalidCharacter), "{bad:?}");
        }
    }

    #[test]
    fn keys_parse_as_the_contract_says() {
        let long = "k".repeat(255);
        let too_long = "k".repeat(256);
        let quoted_long = format!("\"{long}\"");
        let cases: &[(&str, Result<&str, IdempotencyKeyError>)] = &[
            (
                "8e03978e-40d5-43e8-bc93-6894a57f9324",
                Ok("8e03978e-40d5-43e8-bc93-6894a57f9324"),
            ),
            ("\"8e03978e\"", Ok("8e03978e")),
            ("  abc  ", Ok("abc")),
            ("a", Ok("a")),
            ("!~", Ok("!~")),
            (&long, Ok(&long)),
            (&quoted_long, Ok(&long)),
            ("\"a\\\"b\"", Ok("a\"b")),
            ("a\"b", Ok("a\"b")),
            ("\"a\\\\b\"", Ok("a\\b")),
            ("", Err(Empty)),
            ("\"\"", Err(Empty)),
            (&too_long, Err(TooLong)),
            ("a b", Err(InvalidCharacter)),
            ("\"a b\"", Err(InvalidCharacter)),
            ("a\tb", Err(InvalidCharacter)),
            // Not one whole quoted string: a bare key that starts with `"`.
            ("\"abc", Ok("\"abc")),
            ("\"\"abc\"\"", Ok("\"\"abc\"\"")),
            ("\"abc\"x", Ok("\"abc\"x")),
            ("\"a\\nb\"", Ok("\"a\\nb\"")),
            ("\"a b", Err(InvalidCharacter)),
        ];
        for (raw, want) in cases {
            let got = IdempotencyKey::parse(raw.as_bytes()).map(|k| k.0);
            assert_eq!(
                got.as_deref().map_err(Clone::clone),
                want.clone(),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn non_ascii_and_control_bytes_are_refused() {
        assert_eq!(
            IdempotencyKey::parse("clé".as_bytes()),
            Err(InvalidCharacter)
        );
        assert_eq!(IdempotencyKey::parse(b"a\x01b"), Err(InvalidCharacter));
        assert_eq!(IdempotencyKey::parse(b"a\x7fb"), Err(InvalidCharacter));
    }

    #[test]
    fn the_header_must_be_sent_exactly_once() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(IdempotencyKey::from_headers(&headers), Err(Missing));
        headers.append("idempotency-key", "a".parse().unwrap());
        assert!(IdempotencyKey::from_headers(&headers).is_ok());
        headers.append("idempotency-key", "b".parse().unwrap());
        assert_eq!(
            IdempotencyKey::from_headers(&headers),
            Err(IdempotencyKeyError::Repeated)
        );
    }

    proptest! {
        #[test]
        fn bare_and_quoted_spell_the_same_key(key in "[!-~]{1,255}") {
            let quoted = format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
            let bare = IdempotencyKey::parse(key.as_bytes()).map(|k| k.0);
            // A bare key is itself, unless it is one whole quoted string.
            if !(key.starts_with('"') && unquote(key.as_bytes()).is_some()) {
                prop_assert_eq!(bare, Ok(key.clone()));
            }
            prop_assert_eq!(IdempotencyKey::parse(quoted.as_bytes()).map(|k| k.0), Ok(key));
        }

        #[test]
        fn parsing_never_panics_and_accepts_only_visible_ascii(raw in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(key) = IdempotencyKey::parse(&raw) {
                prop_assert!(!key.0.is_empty() && key.0.len() <= 255);
                prop_assert!(key.0.bytes().all(|b| (0x21..=0x7e).contains(&b)));
            }
        }
    }
}
