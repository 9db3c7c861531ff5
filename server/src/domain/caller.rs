//! Who is calling: a bearer token or the `sid` cookie, reduced to the
//! engine's [`Caller`] (a hash of the token).

use exactly_once::Caller;
use std::fmt;

/// A session token as sent by a caller: 16 to 256 characters of
/// `A-Z a-z 0-9 . _ ~ + / = -`.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionToken(String);

/// Why a caller could not be identified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallerError {
    /// Neither `Authorization: Bearer …` nor a `sid` cookie was sent.
    #[error("send `Authorization: Bearer TOKEN` or the `sid` cookie that `GET /` sets")]
    Missing,
    /// The `Authorization` header is not of the `Bearer TOKEN` form.
    #[error("the Authorization header must be `Bearer TOKEN`")]
    NotBearer,
    /// The token is too short, too long or has a character outside the alphabet.
    #[error("a token is 16 to 256 characters of A-Z a-z 0-9 . _ ~ + / = -")]
    Malformed,
}

impl SessionToken {
    /// Parses a token, refusing anything outside the contract's alphabet.
    pub fn parse(raw: &str) -> Result<Self, CallerError> {
        checked(raw).map(|raw| Self(raw.to_owned()))
    }

    /// A fresh random token for a new browser session (64 hex characters).
    pub fn generate() -> Self {
        Self(hex::encode(rand::random::<[u8; 32]>()))
    }

    /// The token itself: only for the `Set-Cookie` header, never for logs.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionToken(<redacted>)")
    }
}

/// The caller a token stands for: the SHA-256 of the token. The token
/// itself is never stored or logged; two callers with different tokens
/// never share a key or a charge.
pub fn caller_of(token: &SessionToken) -> Caller {
    Caller::of(&token.0)
}

/// Identifies the caller of a request from its `Authorization` header
/// (which wins when present) or its `sid` cookie.
pub fn caller_from_headers(headers: &http::HeaderMap) -> Result<Caller, CallerError> {
    if let Some(value) = headers.get(http::header::AUTHORIZATION) {
        let value = value.to_str().map_err(|_| CallerError::NotBearer)?;
        let (scheme, token) = value.split_once(' ').ok_or(CallerError::NotBearer)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(CallerError::NotBearer);
        }
        return checked(token.trim_start_matches(' ')).map(Caller::of);
    }
    match session_cookie(headers) {
        Some(raw) => checked(raw).map(Caller::of),
        None => Err(CallerError::Missing),
    }
}

/// `raw`, if it is a token: 16 to 256 characters of the contract's alphabet.
fn checked(raw: &str) -> Result<&str, CallerError> {
    let ok_len = (16..=256).contains(&raw.len());
    let ok_chars = raw
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._~+/=-".contains(&b));
    if ok_len && ok_chars {
        Ok(raw)
    } else {
        Err(CallerError::Malformed)
    }
}

/// The value of the `sid` cookie, if the request carries one.
pub fn session_cookie(headers: &http::HeaderMap) -> Option<&str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == "sid")
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{header, HeaderMap, HeaderValue};
    use proptest::prelude::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn tokens_follow_the_contract_alphabet_and_length() {
        let cases = [
            ("abcdefghijklmnop", true),
            ("A-Z.a_z~0+9/=-xx", true),
            (&"x".repeat(256), true),
            ("abcdefghijklmno", false),
            (&"x".repeat(257), false),
            ("abcdefghijklmnop q", false),
            ("abcdefghijklmnopé", false),
            ("abcdefghijklmnop;", false),
            ("", false),
        ];
        for (raw, ok) in cases {
            assert_eq!(SessionToken::parse(raw).is_ok(), ok, "{raw:?}");
        }
    }

    #[test]
    fn bearer_wins_over_the_cookie_and_both_identify_the_same_token_alike() {
        let t = "token-aaaaaaaaaaaaaaaa";
        let by_bearer =
            caller_from_headers(&headers(&[(header::AUTHORIZATION, &format!("Bearer {t}"))]));
        let by_cookie =
            caller_from_headers(&headers(&[(header::COOKIE, &format!("a=b; sid={t}"))]));
        assert_eq!(by_bearer.clone().unwrap(), by_cookie.clone().unwrap());
        let both = caller_from_headers(&headers(&[
            (header::AUTHORIZATION, "bearer other-token-bbbbbbbbbb"),
            (header::COOKIE, &format!("sid={t}")),
        ]));
        assert_ne!(both.unwrap(), by_cookie.unwrap());
    }

    #[test]
    fn missing_or_malformed_credentials_are_refused() {
        assert_eq!(
            caller_from_headers(&HeaderMap::new()),
            Err(CallerError::Missing)
        );
        assert_eq!(
            caller_from_headers(&headers(&[(
                header::AUTHORIZATION,
                "Basic abcdefghijklmnopq"
            )])),
            Err(CallerError::NotBearer)
        );
        assert_eq!(
            caller_from_headers(&headers(&[(header::AUTHORIZATION, "Bearer short")])),
            Err(CallerError::Malformed)
        );
        assert_eq!(
            caller_from_headers(&headers(&[(header::COOKIE, "sid=short")])),
            Err(CallerError::Malformed)
        );
    }

    #[test]
    fn display_never_shows_the_token() {
        let token = SessionToken::parse("secret-token-1234567890").unwrap();
        let caller = caller_of(&token);
        assert!(!format!("{caller} {caller:?} {token:?}").contains("secret"));
    }

    proptest! {
        #[test]
        fn valid_tokens_parse_and_hash_deterministically(raw in "[A-Za-z0-9._~+/=-]{16,256}") {
            let a = caller_of(&SessionToken::parse(&raw).unwrap());
            let b = caller_of(&SessionToken::parse(&raw).unwrap());
            prop_assert_eq!(a, b);
        }

        #[test]
        fn any_string_with_a_foreign_character_is_refused(
            head in "[A-Za-z0-9]{8,20}", bad in "[^A-Za-z0-9._~+/=-]", tail in "[A-Za-z0-9]{8,20}"
        ) {
            let raw = format!("{head}{bad}{tail}");
            prop_assert!(SessionToken::parse(&raw).is_err());
        }
    }
}
