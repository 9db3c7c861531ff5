//! Reading request headers that may appear at most once.

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
}
