//! The engine's errors, rendered as `application/problem+json` (RFC 9457).
//!
//! Internal details are logged, never sent: rendering is free of side
//! effects and leaves a server error in the response's extensions, where
//! [`log_server_error`] logs it once with its whole source chain (axum's
//! error-handling example). Your own errors can use [`Problem`] for the
//! same shape.

use crate::key::IdempotencyKeyError;
use crate::record::StoredResponse;
use crate::store::{StoreError, StoreErrorKind};
#[cfg(feature = "axum")]
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{header, StatusCode};
use serde::Serialize;
use std::fmt;
#[cfg(feature = "axum")]
use std::sync::Arc;

/// Any error, as a server error's cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The media type of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Seconds a caller should wait before retrying a 503 or a 409 in-use.
pub(crate) const RETRY_AFTER_SECS: u64 = 1;

/// Seconds a caller with too many unfinished operations should wait before
/// starting another: about as long as a step's outside call may take to
/// finish one of them.
pub(crate) const UNFINISHED_RETRY_AFTER_SECS: u64 = 10;

/// What can go wrong in a keyed request, each with its problem type.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `Idempotency-Key` header is absent.
    #[error("this request needs an Idempotency-Key header")]
    MissingIdempotencyKey,
    /// The `Idempotency-Key` header is not a valid key.
    #[error(transparent)]
    InvalidIdempotencyKey(IdempotencyKeyError),
    /// The body could not be read or is not JSON.
    #[error("{0}")]
    InvalidRequest(String),
    /// The body is not sent as JSON.
    #[error("send the body as application/json")]
    UnsupportedMediaType,
    /// The body did not arrive in time.
    #[error("the body did not arrive within the time allowed")]
    RequestTimeout,
    /// The body is over the limit.
    #[error("the body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// The key was used before with another method, path or body.
    #[error(
        "this Idempotency-Key was used with a different request; use a new key for a new request"
    )]
    IdempotencyKeyMismatch,
    /// The first request with this key is still running.
    #[error("a request with this Idempotency-Key is still running; retry after a moment")]
    IdempotencyKeyInUse,
    /// A new key whose operation would stop unfinished while its caller
    /// already has the cap's number of unfinished operations
    /// ([`EngineBuilder::max_unfinished_per_caller`](crate::EngineBuilder::max_unfinished_per_caller)):
    /// nothing was done or stored. 429 `rate-limited`, with `Retry-After`.
    #[error(
        "this caller has {0} operations that have not finished yet, as many as one caller may \
         have; nothing was done. Retry after the Retry-After header's seconds, once some \
         have finished"
    )]
    TooManyUnfinished(u32),
    /// A step outside the database gave no final answer: the operation
    /// waits at its recovery point; a retry resumes it.
    #[error("{0}")]
    StepUnavailable(StepUnavailable),
    /// What a step returns when it can never succeed by retrying (the
    /// service it calls refused the request for good: a 401, a 404, a
    /// request it cannot read; or the operation's own state is unreadable).
    /// The engine sets the operation aside for an operator instead of
    /// retrying it: its answer is then [`Error::OperationNeedsAttention`].
    /// The text says why, for the operator.
    #[error("the step failed for good: {0}")]
    StepFailedForGood(String),
    /// The operation was set aside for an operator (a dead letter): it
    /// stopped at a step that cannot succeed by retrying, what it did so
    /// far is kept, and every retry of its key gets this answer until an
    /// operator settles it. 424, not retried.
    #[error(
        "this operation stopped at a step that cannot succeed by retrying; what it did so far \
         is kept and an operator will settle it. Retrying this Idempotency-Key gets this answer \
         until then"
    )]
    OperationNeedsAttention,
    /// The database cannot be reached: nothing ran, retry later.
    #[error("the database is unavailable; nothing was done, retry later")]
    Unavailable(#[source] BoxError),
    /// The connection to the database broke while the request was being
    /// committed: it may have been done. Never "nothing was done".
    #[error(
        "the database connection broke while this request was being committed, so it may or \
         may not have been done; retry with the same Idempotency-Key to get its real outcome"
    )]
    OutcomeUnknown(#[source] BoxError),
    /// A later phase of an operation in phases failed (the database, or a
    /// step's answer that makes no sense): the operation is recorded at its
    /// recovery point, and may have had effects already. Never "nothing
    /// was done": the same key, sent again, resumes it and gets its outcome.
    #[error(
        "this operation was started and has not finished, so its outcome is not known yet; \
         send the same request with the same Idempotency-Key again to get it"
    )]
    Unfinished(#[source] BoxError),
    /// A bug or an unexpected database error: everything was rolled back.
    #[error("internal error; nothing was done")]
    Internal(#[source] BoxError),
    /// The database's schema is one this release cannot serve on (not
    /// migrated yet, or migrated by a later release with a migration that
    /// does not run beside this one): nothing was done. The text names the
    /// migration, for the operator reading `/healthz`.
    #[error("this release cannot serve on the database's schema, so nothing was done: {0}")]
    IncompatibleSchema(String),
}

/// A step that could not reach what it calls (a partner's API): answered 503 with `Retry-After` and the problem type
/// the application names, and the operation is kept at its recovery point.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StepUnavailable {
    /// The problem type's slug: `/problems/<slug>`.
    pub slug: &'static str,
    /// The problem's title, constant per slug.
    pub title: &'static str,
    /// What the caller is told.
    pub detail: String,
    /// Why, for the log.
    pub reason: String,
}

impl StepUnavailable {
    /// The problem `/problems/<slug>` titled `title`, telling the caller
    /// `detail`; `reason` goes to the log.
    pub fn new(
        slug: &'static str,
        title: &'static str,
        detail: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            slug,
            title,
            detail: detail.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for StepUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl From<IdempotencyKeyError> for Error {
    fn from(e: IdempotencyKeyError) -> Self {
        match e {
            IdempotencyKeyError::Missing => Self::MissingIdempotencyKey,
            other => Self::InvalidIdempotencyKey(other),
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e.kind() {
            StoreErrorKind::Unavailable => Self::Unavailable(Box::new(e)),
            StoreErrorKind::OutcomeUnknown => Self::OutcomeUnknown(Box::new(e)),
            StoreErrorKind::Internal => Self::Internal(Box::new(e)),
            StoreErrorKind::IncompatibleSchema => Self::IncompatibleSchema(e.context().to_owned()),
        }
    }
}

impl Error {
    /// A bug: `what` went wrong, nothing was done.
    pub fn internal(what: impl Into<String>) -> Self {
        Self::Internal(what.into().into())
    }

    /// What a failure of a later phase (after the first phase committed)
    /// tells the caller: that a step's service is unavailable, when it is,
    /// and otherwise that the outcome is not known yet
    /// ([`Error::Unfinished`]), whatever the failure would have said of a
    /// first phase.
    pub fn in_later_phase(self) -> Self {
        match self {
            kept @ (Self::StepUnavailable(_)
            | Self::Unfinished(_)
            | Self::OperationNeedsAttention) => kept,
            Self::Unavailable(e) | Self::OutcomeUnknown(e) | Self::Internal(e) => {
                Self::Unfinished(e)
            }
            other => Self::Unfinished(other.to_string().into()),
        }
    }

    /// True when the answer says that nothing was done, which a log line
    /// may then repeat.
    pub fn nothing_done(&self) -> bool {
        !matches!(
            self,
            Self::OutcomeUnknown(_)
                | Self::Unfinished(_)
                | Self::StepUnavailable(_)
                | Self::StepFailedForGood(_)
                | Self::OperationNeedsAttention
        )
    }

    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        use Error::*;
        match self {
            MissingIdempotencyKey => (
                StatusCode::BAD_REQUEST,
                "missing-idempotency-key",
                "Missing Idempotency-Key",
            ),
            InvalidIdempotencyKey(_) => (
                StatusCode::BAD_REQUEST,
                "invalid-idempotency-key",
                "Invalid Idempotency-Key",
            ),
            InvalidRequest(_) => (
                StatusCode::BAD_REQUEST,
                "invalid-request",
                "Invalid request",
            ),
            UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "invalid-request",
                "Unsupported media type",
            ),
            RequestTimeout => (
                StatusCode::REQUEST_TIMEOUT,
                "invalid-request",
                "Request timeout",
            ),
            PayloadTooLarge(_) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "Payload too large",
            ),
            IdempotencyKeyMismatch => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency-key-mismatch",
                "Idempotency-Key reused with a different request",
            ),
            IdempotencyKeyInUse => (
                StatusCode::CONFLICT,
                "idempotency-key-in-use",
                "Idempotency-Key in use",
            ),
            TooManyUnfinished(_) => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate-limited",
                "Too many unfinished operations",
            ),
            StepUnavailable(step) => (StatusCode::SERVICE_UNAVAILABLE, step.slug, step.title),
            // 424 Failed Dependency: final for the browser client and for
            // ordinary HTTP clients (none retries a 4xx but 408, 409, 425
            // and 429), and it says what happened: a step the operation
            // depends on failed.
            StepFailedForGood(_) | OperationNeedsAttention => (
                StatusCode::FAILED_DEPENDENCY,
                "operation-needs-attention",
                "Operation needs attention",
            ),
            Unavailable(_) | OutcomeUnknown(_) | Unfinished(_) | IncompatibleSchema(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "Service unavailable",
            ),
            Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
            ),
        }
    }

    /// The status code this error answers with.
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }
}

/// An RFC 9457 problem document.
///
/// ```
/// use exactly_once::Problem;
/// use http::StatusCode;
///
/// let problem = Problem::new(StatusCode::CONFLICT, "sold-out", "Sold out", "no seats left");
/// let stored = problem.stored();
/// assert_eq!(stored.status, 409);
/// assert_eq!(
///     &stored.body[..],
///     br#"{"type":"/problems/sold-out","title":"Sold out","status":409,"detail":"no seats left"}"#
/// );
/// ```
#[derive(Debug, Serialize)]
pub struct Problem<'a> {
    /// `/problems/<slug>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Short, human, constant per type.
    pub title: &'a str,
    /// The HTTP status.
    pub status: u16,
    /// What happened to this request.
    pub detail: &'a str,
}

impl<'a> Problem<'a> {
    /// A problem of type `/problems/<slug>`.
    pub fn new(status: StatusCode, slug: &str, title: &'a str, detail: &'a str) -> Self {
        Self {
            kind: format!("/problems/{slug}"),
            title,
            status: status.as_u16(),
            detail,
        }
    }

    /// The JSON body.
    pub fn to_bytes(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("a problem always serialises"))
    }

    /// The problem as a recorded answer (an operation's refusals are
    /// recorded and replayed like its successes).
    pub fn stored(&self) -> StoredResponse {
        StoredResponse::new(
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            PROBLEM_JSON,
            self.to_bytes(),
        )
    }

    /// The problem as an HTTP answer (feature `axum`).
    #[cfg(feature = "axum")]
    pub fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (
            status,
            [(header::CONTENT_TYPE, PROBLEM_JSON)],
            self.to_bytes(),
        )
            .into_response()
    }
}

impl Error {
    /// The seconds of the answer's `Retry-After`, when it tells the client
    /// when to try again: the refusals a retry of the same key may get
    /// past.
    fn retry_after(&self) -> Option<u64> {
        match self {
            Error::Unavailable(_)
            | Error::OutcomeUnknown(_)
            | Error::Unfinished(_)
            | Error::StepUnavailable(_)
            | Error::IncompatibleSchema(_)
            | Error::IdempotencyKeyInUse => Some(RETRY_AFTER_SECS),
            Error::TooManyUnfinished(_) => Some(UNFINISHED_RETRY_AFTER_SECS),
            _ => None,
        }
    }

    /// The answer this error gives, with no HTTP types: an
    /// `application/problem+json` document, and `Retry-After` when a retry
    /// of the same key may get past it. What a framework outside axum and
    /// tower sends (see [`Engine::execute`](crate::Engine::execute)).
    pub fn answer(&self) -> StoredResponse {
        let (status, slug, title) = self.parts();
        let detail = self.to_string();
        let mut stored = Problem::new(status, slug, title, &detail).stored();
        if let Some(seconds) = self.retry_after() {
            stored
                .headers
                .push((header::RETRY_AFTER.as_str().to_owned(), seconds.to_string()));
        }
        stored
    }
}

/// The engine's answer (its problem+json, `Retry-After`); a server error
/// also carries itself in the response's extensions, for
/// [`log_server_error`] to log its causes once.
#[cfg(feature = "axum")]
impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = crate::record::Answer {
            response: self.answer(),
            replayed: false,
        }
        .into_http::<axum::body::Body>();
        if status.is_server_error() {
            response.extensions_mut().insert(Arc::new(self));
        }
        response
    }
}

/// An error with its causes, as one line (`a: b: c`), each cause shown
/// once even when an error repeats its source's text.
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = self.0.to_string();
        let mut source = self.0.source();
        while let Some(e) = source {
            let text = e.to_string();
            if !line.contains(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            source = e.source();
        }
        f.write_str(&line)
    }
}

/// Logs a server error once: the engine's error a response carries, with
/// its whole source chain (the body leaves the cause out), or, for a 5xx
/// that carries none (a static files' service), its status alone. Call it
/// from your logging middleware.
#[cfg(feature = "axum")]
pub fn log_server_error(method: &http::Method, path: &str, response: &Response) {
    let status = response.status().as_u16();
    if let Some(error) = response.extensions().get::<Arc<Error>>() {
        let error = error.as_ref();
        if error.nothing_done() {
            tracing::error!(%method, path, status, error = %Chain(error), "request failed; nothing was done");
        } else {
            tracing::error!(%method, path, status, error = %Chain(error), "request failed; its outcome is not known yet");
        }
    } else if response.status().is_server_error() {
        tracing::error!(%method, path, status, "request failed");
    }
}
