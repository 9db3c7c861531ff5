//! The shop's errors, rendered as `application/problem+json` (RFC 9457)
//! like the engine's: the caller is not authenticated, a field or query is
//! not what the API takes, nothing is served at a path, and every error of
//! the engine ([`exactly_once::Error`]) as it renders itself.

pub use exactly_once::workspace::{BoxError, PROBLEM_JSON};
pub use exactly_once::Problem;

use crate::domain::CallerError;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};

/// Everything that can go wrong in a request, each with its problem type.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No usable caller credentials.
    #[error(transparent)]
    Unauthorized(#[from] CallerError),
    /// The body, a query parameter or a header is not what the API takes.
    #[error("{0}")]
    InvalidRequest(String),
    /// The path exists but not with this method.
    #[error("this method is not allowed on this path")]
    MethodNotAllowed,
    /// No such resource.
    #[error("{0}")]
    NotFound(String),
    /// The caller sent more than `--caller-rate` requests a second: the
    /// request was not handled; retry after `retry_after`.
    #[error(
        "this caller sent more than {per_second} requests a second (bursts of twice that); \
         nothing was done, retry after the Retry-After header's seconds"
    )]
    RateLimited {
        /// `--caller-rate`.
        per_second: u32,
        /// How long until the caller's bucket holds a request again.
        retry_after: std::time::Duration,
    },
    /// What the engine refused or could not do: a key's errors, 409, 422,
    /// 503, 500.
    #[error(transparent)]
    Engine(#[from] exactly_once::Error),
}

impl From<exactly_once::StoreError> for ApiError {
    fn from(e: exactly_once::StoreError) -> Self {
        Self::Engine(e.into())
    }
}

impl ApiError {
    /// A bug: `what` went wrong, nothing was done.
    pub fn internal(what: impl Into<String>) -> Self {
        Self::Engine(exactly_once::Error::internal(what))
    }

    /// Status, problem type and title of the shop's own errors; `None`
    /// for the engine's, which render themselves.
    fn parts(&self) -> Option<(StatusCode, &'static str, &'static str)> {
        Some(match self {
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized", "Unauthorized"),
            Self::InvalidRequest(_) => (
                StatusCode::BAD_REQUEST,
                "invalid-request",
                "Invalid request",
            ),
            Self::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid-request",
                "Method not allowed",
            ),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not-found", "Not found"),
            Self::RateLimited { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate-limited",
                "Too many requests",
            ),
            Self::Engine(_) => return None,
        })
    }

    /// The status code this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Engine(e) => e.status(),
            own => own
                .parts()
                .map_or(StatusCode::INTERNAL_SERVER_ERROR, |p| p.0),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Engine(e) = self {
            return e.into_response();
        }
        let (status, slug, title) = self.parts().expect("the shop's own errors have parts");
        let detail = self.to_string();
        let mut response = Problem::new(status, slug, title, &detail).into_response();
        match self {
            Self::Unauthorized(_) => {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            Self::RateLimited { retry_after, .. } => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, whole_seconds(retry_after).into());
            }
            _ => {}
        }
        response
    }
}

/// `Retry-After`'s seconds: rounded up, at least 1.
fn whole_seconds(wait: std::time::Duration) -> u64 {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    seconds.max(1)
}

/// Logs a server error once, with its cause ([`exactly_once::workspace::log_server_error`]):
/// every 5xx of the shop is the engine's.
pub use exactly_once::workspace::log_server_error;
