//! `--caller-rate N`: at most N requests a second per caller, a token
//! bucket with a burst of 2N (governor's keyed GCRA); past it, `429`
//! `rate-limited` with `Retry-After` in whole seconds, rounded up, and the
//! request is not handled at all.
//!
//! - **Who is a caller**: the one the shop derives from the bearer token
//!   or the `sid` cookie ([`caller_from_headers`]); a request without
//!   usable credentials (the page, `GET /inventory/…`, a 401 to be) counts
//!   against its peer's IP address instead, so that all of one address's
//!   anonymous requests share one bucket.
//! - **Exempt**: `GET /healthz` and `GET /metrics`, the probes an
//!   orchestrator and Prometheus send; every other path counts.
//! - **Memory**: a caller's entry is dropped once its bucket is full again
//!   (2 s after its last request), by a sweep every
//!   [`SWEEP_EVERY`]: the map holds only the callers of the last seconds.
//!
//! A tower service with its own future, like [`crate::observe`]: no box
//! and no clone of the services beneath it per request.

use crate::domain::caller_from_headers;
use crate::error::ApiError;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use exactly_once::Caller;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use pin_project_lite::pin_project;
use serve::ConnectionControl;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service};

/// How often the callers whose buckets are full again are forgotten.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// Paths never limited: the health and metrics probes.
const EXEMPT: &[&str] = &["/healthz", "/metrics"];

/// Whose bucket a request takes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Who {
    /// A caller with credentials.
    Caller(Caller),
    /// A request without: its peer's address.
    Address(IpAddr),
}

/// The limiter of `--caller-rate`, shared by every connection.
#[derive(Clone)]
pub struct CallerRate {
    limiter: Arc<DefaultKeyedRateLimiter<Who>>,
    per_second: NonZeroU32,
}

impl CallerRate {
    /// `per_second` requests a second per caller, bursts of twice that;
    /// `None` for 0 (no limit).
    pub fn new(per_second: u32) -> Option<Self> {
        let per_second = NonZeroU32::new(per_second)?;
        let burst = per_second.saturating_mul(NonZeroU32::MIN.saturating_add(1));
        let quota = Quota::per_second(per_second).allow_burst(burst);
        Some(Self {
            limiter: Arc::new(RateLimiter::keyed(quota)),
            per_second,
        })
    }

    /// Forgets, every [`SWEEP_EVERY`], the callers whose buckets are full
    /// again: run it beside the server.
    pub fn forget_idle(&self) -> impl Future<Output = ()> + Send + 'static {
        let limiter = self.limiter.clone();
        async move {
            let mut every = tokio::time::interval(SWEEP_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                limiter.retain_recent();
                limiter.shrink_to_fit();
            }
        }
    }

    /// `None` when `request` may go on; else how long its caller must wait.
    /// The caller found is left in the request for the route (one SHA-256
    /// of the token per request, not two).
    fn wait(&self, request: &mut Request) -> Option<Duration> {
        if EXEMPT.contains(&request.uri().path()) {
            return None;
        }
        let who = match caller_from_headers(request.headers()) {
            Ok(caller) => {
                request.extensions_mut().insert(caller);
                Who::Caller(caller)
            }
            Err(_) => Who::Address(
                request
                    .extensions()
                    .get::<ConnectionControl>()
                    .and_then(ConnectionControl::peer)
                    .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |peer| peer.ip()),
            ),
        };
        let refused = self.limiter.check_key(&who).err()?;
        Some(refused.wait_time_from(DefaultClock::default().now()))
    }
}

impl<S> Layer<S> for CallerRate {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            rate: self.clone(),
        }
    }
}

/// A service behind `--caller-rate` (see the module documentation).
#[derive(Clone)]
pub struct Limited<S> {
    inner: S,
    rate: CallerRate,
}

impl<S> Service<Request> for Limited<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        match self.rate.wait(&mut request) {
            None => Answer::Handled {
                future: self.inner.call(request),
            },
            Some(wait) => Answer::Refused {
                response: Some(
                    ApiError::RateLimited {
                        per_second: self.rate.per_second.get(),
                        retry_after: wait,
                    }
                    .into_response(),
                ),
            },
        }
    }
}

pin_project! {
    /// The inner service's answer, or the 429.
    #[project = AnswerProj]
    pub enum Answer<F> {
        /// Handled by the inner service.
        Handled { #[pin] future: F },
        /// Refused here.
        Refused { response: Option<Response> },
    }
}

impl<F> Future for Answer<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            AnswerProj::Handled { future } => future.poll(cx),
            AnswerProj::Refused { response } => Poll::Ready(Ok(response
                .take()
                .expect("a refused answer is polled once"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(token: &str) -> Request {
        Request::builder()
            .uri("/charges")
            .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
            .body(axum::body::Body::empty())
            .unwrap()
    }

    #[test]
    fn a_caller_gets_a_burst_of_twice_the_rate_and_others_are_not_touched() {
        let rate = CallerRate::new(3).unwrap();
        for _ in 0..6 {
            assert_eq!(rate.wait(&mut request("token-aaaaaaaaaaaaaaaa")), None);
        }
        let wait = rate.wait(&mut request("token-aaaaaaaaaaaaaaaa")).unwrap();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(334),
            "{wait:?}"
        );
        assert_eq!(rate.wait(&mut request("token-bbbbbbbbbbbbbbbb")), None);
    }

    #[test]
    fn probes_are_exempt_and_zero_is_no_limit() {
        let rate = CallerRate::new(1).unwrap();
        let probe = || {
            Request::builder()
                .uri("/healthz")
                .body(axum::body::Body::empty())
                .unwrap()
        };
        for _ in 0..10 {
            assert_eq!(rate.wait(&mut probe()), None);
        }
        assert!(CallerRate::new(0).is_none());
    }
}
