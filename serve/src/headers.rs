//! Reading request headers that may appear at most once, and the text of
//! an `Idempotency-Key`, which both binaries accept by the same rule.

use http::header::AsHeaderName;
use http::{HeaderMap, HeaderValue};

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
        assert_eq!(single(&headers, "x-once"), Err(Repeated));
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
}
