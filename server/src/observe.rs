//! The one middleware every request passes on its way out: its latency, by
//! route, for `/metrics` ([`Metrics::request_done`]), and a server error
//! logged once, with the whole source chain of the error it carries
//! ([`error::log_server_error`]; the trace layer's own failure line is off).
//!
//! A tower service with its own future rather than two
//! `axum::middleware::from_fn`: each of those boxes every request's future
//! and clones the services beneath it, which cost a replay 9 allocations
//! and 5-8% of its CPU (docs/BENCHMARKS.md, "Per-request CPU").

use crate::error;
use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use exactly_once::Metrics;
use http::{Method, Uri};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;
use tower::{Layer, Service};

/// Wraps a service in [`Observe`].
#[derive(Clone)]
pub struct ObserveLayer {
    metrics: Arc<Metrics>,
}

impl ObserveLayer {
    /// Records into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct Observe<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

/// What is kept of a request until its answer: cheap clones all (the
/// method and URI share the bytes hyper read).
struct Seen {
    started: Instant,
    method: Method,
    uri: Uri,
    route: Option<MatchedPath>,
}

impl<S, E> Service<Request> for Observe<S>
where
    S: Service<Request, Response = Response, Error = E>,
{
    type Response = Response;
    type Error = E;
    type Future = Observed<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), E>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let seen = Seen {
            started: Instant::now(),
            method: request.method().clone(),
            uri: request.uri().clone(),
            route: request.extensions().get::<MatchedPath>().cloned(),
        };
        Observed {
            inner: self.inner.call(request),
            seen: Some(seen),
            metrics: self.metrics.clone(),
        }
    }
}

pin_project! {
    /// The inner service's future, observed when it is ready.
    pub struct Observed<F> {
        #[pin]
        inner: F,
        seen: Option<Seen>,
        metrics: Arc<Metrics>,
    }
}

impl<F, E> Future for Observed<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        if let (Ok(response), Some(seen)) = (&result, this.seen.take()) {
            let route = seen.route.as_ref().map(MatchedPath::as_str);
            this.metrics.request_done(
                &seen.method,
                route,
                response.status(),
                seen.started.elapsed(),
            );
            error::log_server_error(&seen.method, seen.uri.path(), response);
        }
        Poll::Ready(result)
    }
}
