//! The edge: a keyed JSON request becomes domain types, in the order the
//! contract's validation follows: caller (401), key (400), `X-Chaos` (400),
//! content type (415), body size (413) and time (408), JSON (400). A
//! request refused here stores nothing, so the same key may be sent again
//! with a corrected request. The body's fields are parsed later, after the
//! replay lookup.

use crate::chaos::Chaos;
use crate::domain::{Caller, Fingerprint, IdempotencyKey};
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::IdempotentRequest;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use http::{header, StatusCode};

/// The largest body a keyed request may carry.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A keyed JSON request, parsed at the edge.
#[derive(Debug)]
pub struct Keyed {
    /// Caller, key and fingerprint.
    pub request: IdempotentRequest,
    /// The body, parsed as JSON (each route parses it into its own type).
    pub body: serde_json::Value,
    /// What chaos mode should do to it (nothing, unless enabled and asked).
    pub chaos: Chaos,
}

impl FromRequest<AppState> for Keyed {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_headers(req.headers())?;
        let key = IdempotencyKey::from_headers(req.headers())?;
        let chaos = Chaos::from_request(req.headers(), req.extensions(), state.chaos)?;
        if !is_json(req.headers()) {
            return Err(ApiError::UnsupportedMediaType);
        }
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(MAX_BODY_BYTES)
            } else if caused_by::<tower_http::timeout::TimeoutError>(&rejection) {
                ApiError::RequestTimeout
            } else {
                ApiError::InvalidRequest(format!("could not read the body: {rejection}"))
            }
        })?;
        let body: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::InvalidRequest(format!("the body is not valid JSON: {e}")))?;
        let fingerprint = Fingerprint::new(&method, &path, &body);
        Ok(Self {
            request: IdempotentRequest {
                caller,
                key,
                fingerprint,
            },
            body,
            chaos,
        })
    }
}

fn caused_by<E: std::error::Error + 'static>(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<E>() {
            return true;
        }
        cause = e.source();
    }
    false
}

fn is_json(headers: &http::HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    let (kind, subtype) = essence.split_once('/').unwrap_or((essence, ""));
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json")
            || subtype
                .get(subtype.len().saturating_sub(5)..)
                .is_some_and(|suffix| suffix.eq_ignore_ascii_case("+json")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_any_json_suffix_are_json_in_any_case() {
        for (value, json) in [
            ("application/json", true),
            ("Application/JSON; charset=utf-8", true),
            (" application/json ;charset=utf-8", true),
            ("application/problem+json", true),
            ("application/vnd.api+JSON", true),
            ("text/json", false),
            ("application/jsonx", false),
            ("application/json+x", false),
            ("application/x-www-form-urlencoded", false),
            ("json", false),
            ("", false),
        ] {
            let mut headers = http::HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            assert_eq!(is_json(&headers), json, "{value:?}");
        }
        assert!(!is_json(&http::HeaderMap::new()));
    }
}
