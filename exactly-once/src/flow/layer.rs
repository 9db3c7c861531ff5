//! The tower adapter: [`KeyedLayer`] reads a keyed JSON request at the
//! edge, as the axum extractor does, and hands your service an
//! `http::Request<Keyed>`; your service calls
//! [`Engine::execute`](crate::Engine::execute) and answers. Any
//! `Service<http::Request<_>>` takes it: hyper's, tonic's HTTP routes,
//! axum's `Router` as a whole.

use crate::caller::Caller;
use crate::error::{Error, Problem};
use crate::flow::keyed::Keyed;
use crate::flow::keyed::{is_json, parse_json, unreadable, MAX_BODY_BYTES};
use crate::key::IdempotencyKey;
use crate::record::Answer;
use crate::store::IdempotentRequest;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

/// A tower [`Layer`] that keys the requests of the service it wraps: the
/// caller (from `identify`, 401 when it says `None`), the key (400), the
/// content type (415), the body within its limit (413) and in time (408),
/// JSON (400), in that order, as the axum extractor does. A request
/// refused here stores nothing and never reaches your service.
///
/// ```
/// use exactly_once::{Caller, Engine, Keyed, KeyedLayer, NoFaults, Refused, RunContext, Sqlite, PhaseEnd};
/// use tower::ServiceBuilder;
///
/// # #[derive(Debug)] struct AddNote;
/// # impl exactly_once::Operation<Sqlite> for AddNote {
/// #     fn run(&self, _: &rusqlite::Connection, _: &RunContext<'_>) -> rusqlite::Result<PhaseEnd> {
/// #         Ok(PhaseEnd::Finished(exactly_once::StoredResponse::new(http::StatusCode::CREATED, "application/json", "{}")))
/// #     }
/// # }
/// # fn demo(engine: Engine<Sqlite>) {
/// let service = ServiceBuilder::new()
///     .layer(KeyedLayer::new(|parts: &http::request::Parts| {
///         let token = parts.headers.get("authorization")?;
///         Some(Caller::of(token.as_bytes()))
///     }))
///     .service_fn(move |request: http::Request<Keyed>| {
///         let engine = engine.clone();
///         async move {
///             let keyed = request.into_body().within("notes");
///             let answer = match engine
///                 .execute(keyed.request, &keyed.body, &NoFaults, |body| {
///                     match body.get("text") {
///                         Some(_) => Ok(AddNote),
///                         None => Err("a note needs a text"),
///                     }
///                 })
///                 .await
///                 .or_else(Refused::into_answer)
///             {
///                 Ok(answer) => answer.into_http(),
///                 Err(why) => http::Response::builder()
///                     .status(400)
///                     .body(bytes::Bytes::from(why))
///                     .unwrap(),
///             };
///             Ok::<http::Response<bytes::Bytes>, std::convert::Infallible>(answer)
///         }
///     });
/// # let _ = service;
/// # }
/// ```
pub struct KeyedLayer<F> {
    identify: Arc<F>,
    limit: usize,
}

impl<F> KeyedLayer<F>
where
    F: Fn(&http::request::Parts) -> Option<Caller>,
{
    /// Keys requests for the caller `identify` finds in a request's parts
    /// (a session, an API key); `None` answers 401.
    pub fn new(identify: F) -> Self {
        Self {
            identify: Arc::new(identify),
            limit: MAX_BODY_BYTES,
        }
    }

    /// The largest body accepted ([`MAX_BODY_BYTES`] by default); a larger
    /// one is answered 413.
    pub fn limit(mut self, bytes: usize) -> Self {
        self.limit = bytes;
        self
    }
}

impl<F> Clone for KeyedLayer<F> {
    fn clone(&self) -> Self {
        Self {
            identify: Arc::clone(&self.identify),
            limit: self.limit,
        }
    }
}

impl<S, F> Layer<S> for KeyedLayer<F> {
    type Service = KeyedService<S, F>;

    fn layer(&self, inner: S) -> Self::Service {
        KeyedService {
            inner,
            identify: Arc::clone(&self.identify),
            limit: self.limit,
        }
    }
}

/// The service [`KeyedLayer`] makes.
pub struct KeyedService<S, F> {
    inner: S,
    identify: Arc<F>,
    limit: usize,
}

impl<S: Clone, F> Clone for KeyedService<S, F> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            identify: Arc::clone(&self.identify),
            limit: self.limit,
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, F, B, R> Service<http::Request<B>> for KeyedService<S, F>
where
    S: Service<http::Request<Keyed>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    F: Fn(&http::request::Parts) -> Option<Caller> + Send + Sync + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    R: From<Bytes> + Send + 'static,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The clone that was polled ready serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (identify, limit) = (Arc::clone(&self.identify), self.limit);
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            match read(&parts, body, identify.as_ref(), limit).await {
                Ok(keyed) => inner.call(http::Request::from_parts(parts, keyed)).await,
                Err(refusal) => Ok(refusal),
            }
        })
    }
}

/// The edge, in the extractor's order; a refusal is the answer.
async fn read<B, R>(
    parts: &http::request::Parts,
    body: B,
    identify: &(impl Fn(&http::request::Parts) -> Option<Caller> + ?Sized),
    limit: usize,
) -> Result<Keyed, http::Response<R>>
where
    B: http_body::Body,
    B::Error: Into<BoxError>,
    R: From<Bytes> + Send + 'static,
{
    let refuse = |error: Error| refusal(error.answer());
    let Some(caller) = identify(parts) else {
        return Err(refusal(
            Problem::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Unauthorized",
                "the request does not say who is calling",
            )
            .stored(),
        ));
    };
    let key = IdempotencyKey::from_headers(&parts.headers).map_err(|e| refuse(e.into()))?;
    if !is_json(&parts.headers) {
        return Err(refuse(Error::UnsupportedMediaType));
    }
    let bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            let too_large = error.is::<LengthLimitError>();
            return Err(refuse(unreadable(&*error, too_large, limit)));
        }
    };
    let (body, fingerprint) =
        parse_json(&parts.method, parts.uri.path(), &bytes).map_err(refuse)?;
    let request = IdempotentRequest {
        caller,
        key,
        fingerprint,
    };
    Ok(Keyed::new(request, body, crate::faults::NoFaults))
}

fn refusal<R: From<Bytes>>(response: crate::record::StoredResponse) -> http::Response<R> {
    Answer {
        response,
        replayed: false,
    }
    .into_http()
}
