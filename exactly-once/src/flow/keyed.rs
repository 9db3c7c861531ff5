//! The edge: a keyed JSON request becomes the engine's types, in this
//! order: caller (your extractor's refusal, a 401 say), key (400), faults
//! (your extractor's refusal), content type (415), body size (413) and
//! time (408), JSON (400). A request refused here stores nothing, so the
//! same key may be sent again with a corrected request. The body's fields
//! are parsed later, after the replay lookup.

use crate::caller::Caller;
#[cfg(any(feature = "axum", feature = "tower"))]
use crate::error::Error;
#[cfg(feature = "axum")]
use crate::faults::Faults;
use crate::faults::NoFaults;
#[cfg(any(feature = "axum", feature = "tower"))]
use crate::fingerprint::Fingerprint;
#[cfg(feature = "axum")]
use crate::key::IdempotencyKey;
use crate::store::IdempotentRequest;
#[cfg(feature = "axum")]
use axum::body::Bytes;
#[cfg(feature = "axum")]
use axum::extract::{FromRequest, FromRequestParts, Request};
#[cfg(feature = "axum")]
use axum::response::{IntoResponse, Response};
#[cfg(feature = "axum")]
use http::StatusCode;
use std::marker::PhantomData;

/// The largest body a keyed request may carry by default. Axum's
/// `DefaultBodyLimit` layer sets another; the engine answers 413 for a
/// body over the limit either way.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A keyed JSON request, parsed at the edge: the last argument of your
/// handler, handed to [`Engine::run`](crate::Engine::run).
///
/// `C` is your authentication: any extractor that yields a [`Caller`]
/// (keys are per caller); its refusal is answered as it renders. `F` is
/// what the request asks of the [`Faults`] (fault injection), [`NoFaults`]
/// unless you have some.
///
/// Outside axum, [`Keyed::new`] makes one from what your edge read, and
/// [`KeyedLayer`](crate::KeyedLayer) hands one to any tower service.
#[derive(Debug)]
pub struct Keyed<C = Caller, F = NoFaults> {
    /// Caller, key and fingerprint.
    pub request: IdempotentRequest,
    /// The body, parsed as JSON (each route parses it into its own type).
    pub body: serde_json::Value,
    /// The request's faults.
    pub faults: F,
    by: PhantomData<fn() -> C>,
}

#[cfg(feature = "axum")]
impl<S, C, F> FromRequest<S> for Keyed<C, F>
where
    S: Send + Sync,
    C: FromRequestParts<S> + Into<Caller>,
    C::Rejection: IntoResponse,
    F: Faults + FromRequestParts<S>,
    F::Rejection: IntoResponse,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let caller: Caller = C::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?
            .into();
        let key = IdempotencyKey::from_headers(&parts.headers)
            .map_err(|e| Error::from(e).into_response())?;
        let faults = F::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let req = Request::from_parts(parts, body);
        Self::read(req, state, caller, key, faults)
            .await
            .map_err(IntoResponse::into_response)
    }
}

impl<C, F> Keyed<C, F> {
    /// A keyed request your own edge read: its caller, key and fingerprint
    /// ([`Fingerprint::new`] of the method, path and JSON body), the body,
    /// and its faults ([`NoFaults`] unless you inject faults).
    pub fn new(request: IdempotentRequest, body: serde_json::Value, faults: F) -> Self {
        Self {
            request,
            body,
            faults,
            by: PhantomData,
        }
    }

    /// The request with its key in the namespace `namespace` (a route's
    /// name, say): the same key sent to two namespaces is two operations,
    /// each with its own answer, rather than a 422 for the second.
    /// Operators see the namespaced caller ([`Caller::within`]).
    pub fn within(mut self, namespace: &str) -> Self {
        self.request.caller = self.request.caller.within(namespace);
        self
    }

    #[cfg(feature = "axum")]
    async fn read<S: Send + Sync>(
        req: Request,
        state: &S,
        caller: Caller,
        key: IdempotencyKey,
        faults: F,
    ) -> Result<Self, Error> {
        if !is_json(req.headers()) {
            return Err(Error::UnsupportedMediaType);
        }
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            unreadable(
                &rejection,
                rejection.status() == StatusCode::PAYLOAD_TOO_LARGE,
                MAX_BODY_BYTES,
            )
        })?;
        let (body, fingerprint) = parse_json(&method, &path, &bytes)?;
        Ok(Self::new(
            IdempotentRequest {
                caller,
                key,
                fingerprint,
            },
            body,
            faults,
        ))
    }
}

/// The refusal of a body that could not be read: over the `limit` (413),
/// cut by tower-http's `RequestBodyTimeoutLayer` (408), or broken (400).
#[cfg(any(feature = "axum", feature = "tower"))]
pub(crate) fn unreadable(
    error: &(dyn std::error::Error + 'static),
    too_large: bool,
    limit: usize,
) -> Error {
    if too_large {
        Error::PayloadTooLarge(limit)
    } else if caused_by_timeout(error) {
        Error::RequestTimeout
    } else {
        Error::InvalidRequest(format!("could not read the body: {error}"))
    }
}

/// The body as JSON (400 if it is not) and the request's fingerprint.
#[cfg(any(feature = "axum", feature = "tower"))]
pub(crate) fn parse_json(
    method: &http::Method,
    path: &str,
    bytes: &[u8],
) -> Result<(serde_json::Value, Fingerprint), Error> {
    let body: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::InvalidRequest(format!("the body is not valid JSON: {e}")))?;
    let fingerprint = Fingerprint::new(method, path, &body);
    Ok((body, fingerprint))
}

/// Whether reading the body failed because tower-http's
/// `RequestBodyTimeoutLayer` cut it.
#[cfg(any(feature = "axum", feature = "tower"))]
fn caused_by_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// Whether the request says its body is JSON (`application/json` or
/// `application/*+json`).
#[cfg(any(feature = "axum", feature = "tower"))]
pub(crate) fn is_json(headers: &http::HeaderMap) -> bool {
    let Some(value) = headers
        .get(http::header::CONTENT_TYPE)
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

#[cfg(all(test, any(feature = "axum", feature = "tower")))]
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
            headers.insert(http::header::CONTENT_TYPE, value.parse().unwrap());
            assert_eq!(is_json(&headers), json, "{value:?}");
        }
        assert!(!is_json(&http::HeaderMap::new()));
    }
}
