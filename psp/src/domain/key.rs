//! The `Idempotency-Key` header of a charge request.

use std::fmt;

/// A provider idempotency key: 1 to 255 visible ASCII characters
/// (0x21 to 0x7E), sent bare.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a request has no usable key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The header is absent.
    #[error("a charge needs an Idempotency-Key header")]
    Missing,
    /// The header was sent more than once.
    #[error("the Idempotency-Key header was sent more than once")]
    Repeated,
    /// Empty, too long, or a character outside 0x21..=0x7E.
    #[error(
        "the Idempotency-Key must be 1 to 255 visible ASCII characters (0x21 to 0x7E), sent bare"
    )]
    Invalid,
}

impl IdempotencyKey {
    /// Parses one header value; surrounding spaces are HTTP's and ignored.
    pub fn parse(raw: &[u8]) -> Result<Self, KeyError> {
        serve::headers::key_text(raw.trim_ascii())
            .map(Self)
            .map_err(|_| KeyError::Invalid)
    }

    /// Reads the key of a request: exactly one `Idempotency-Key` header.
    pub fn from_headers(headers: &http::HeaderMap) -> Result<Self, KeyError> {
        let value = serve::headers::single(headers, "idempotency-key")
            .map_err(|_| KeyError::Repeated)?
            .ok_or(KeyError::Missing)?;
        Self::parse(value.as_bytes())
    }
}

serve::text_newtype!(IdempotencyKey);

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({:?})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_visible_ascii_of_1_to_255_characters() {
        for good in ["a", "order-42:attempt", &"k".repeat(255), "  padded\t"] {
            assert!(IdempotencyKey::parse(good.as_bytes()).is_ok(), "{good:?}");
        }
        assert_eq!(
            IdempotencyKey::parse(b" abc ").unwrap().as_ref(),
            "abc",
            "HTTP's surrounding whitespace is not part of the key"
        );
        for bad in [
            &b""[..],
            b"   ",
            b"a b",
            b"caf\xc3\xa9",
            b"tab\there",
            &[b'k'; 256],
        ] {
            assert_eq!(
                IdempotencyKey::parse(bad),
                Err(KeyError::Invalid),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_request_carries_exactly_one_key_header() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(
            IdempotencyKey::from_headers(&headers),
            Err(KeyError::Missing)
        );
        headers.append("idempotency-key", "one".parse().unwrap());
        assert!(IdempotencyKey::from_headers(&headers).is_ok());
        headers.append("idempotency-key", "two".parse().unwrap());
        assert_eq!(
            IdempotencyKey::from_headers(&headers),
            Err(KeyError::Repeated)
        );
    }
}
