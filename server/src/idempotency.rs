//! The idempotency flow, top to bottom.
//!
//! 1. **At the edge** ([`Keyed`]): the caller (bearer token or `sid`
//!    cookie), the `Idempotency-Key` (bare or quoted) and the request's
//!    fingerprint (method, path, body as a JSON value) become domain types.
//!    A request refused here (401, 400, 413, 415) stores nothing, so the
//!    same key may be sent again with a corrected request.
//! 2. **Fast path**: a finished record is read without waiting for the
//!    writer. Same fingerprint: the stored response again, byte for byte,
//!    with `Idempotent-Replayed: true`. Another fingerprint: 422.
//! 3. **One transaction** ([`Store::execute`](crate::store::Store::execute)):
//!    the store looks again under its write lock, then claims the key, runs
//!    the business change and records the response together, and answers
//!    once that commit is durable. A concurrent duplicate therefore either
//!    finds the finished record (and replays it) or, on a backend where a
//!    transaction can be seen in flight, gets 409 with `Retry-After`. Never
//!    a second run. A failure anywhere rolls back everything: 503 or 500,
//!    and a retry runs afresh.

use crate::chaos::{Chaos, ConnectionControl};
use crate::domain::{Caller, Fingerprint, IdempotencyKey};
use crate::error::ApiError;
use crate::operation::{Operation, StoredResponse};
use crate::state::AppState;
use crate::store::{ExecuteOptions, Execution, IdempotentRequest};
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::response::Response;
use http::{header, HeaderName, HeaderValue, StatusCode};

/// The largest body a keyed request may carry.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The header that marks a replayed answer.
pub static IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// A keyed JSON request, parsed at the edge.
#[derive(Debug)]
pub struct Keyed {
    /// Caller, key and fingerprint.
    pub request: IdempotentRequest,
    /// The body, parsed as JSON (each route parses it into its own type).
    pub body: serde_json::Value,
    /// What chaos mode should do to it, when enabled and asked for.
    pub chaos: Option<Chaos>,
    /// The connection it came in on, for chaos.
    pub connection: Option<ConnectionControl>,
}

impl FromRequest<AppState> for Keyed {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_headers(req.headers())?;
        let key = IdempotencyKey::from_headers(req.headers())?;
        let chaos = match req.headers().get(Chaos::HEADER) {
            Some(value) if state.chaos => Some(
                value
                    .to_str()
                    .map_err(|_| ApiError::InvalidRequest("X-Chaos is not ASCII".into()))
                    .and_then(|v| Chaos::parse(v).map_err(ApiError::InvalidRequest))?,
            ),
            _ => None,
        };
        if !is_json(req.headers()) {
            return Err(ApiError::UnsupportedMediaType);
        }
        let connection = req.extensions().get::<ConnectionControl>().cloned();
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
            connection,
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
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Runs the request's operation at most once for its key and answers.
///
/// `operation` parses the body into the route's operation. It is called
/// only when the key has no finished record, so a key reused with another
/// request is a 422 even when that request would not parse.
pub async fn run(
    state: &AppState,
    keyed: Keyed,
    operation: impl FnOnce(&serde_json::Value) -> Result<Operation, ApiError>,
) -> Result<Response, ApiError> {
    let Keyed {
        request,
        body,
        chaos,
        connection,
    } = keyed;
    let caller = request.caller;
    let key = request.key.clone();

    if let Some(record) = state.store.lookup(&caller, &key).await? {
        return if record.fingerprint == request.fingerprint {
            state.metrics.replayed();
            tracing::info!(%caller, %key, status = record.response.status, "replayed");
            Ok(respond(record.response, true))
        } else {
            state.metrics.mismatched();
            tracing::info!(%caller, %key, "refused: key reused with another request");
            Err(ApiError::IdempotencyKeyMismatch)
        };
    }

    let operation = operation(&body)?;
    let options = ExecuteOptions {
        roll_back: chaos == Some(Chaos::CrashBeforeCommit),
        ..ExecuteOptions::default()
    };
    match state.store.execute(request, operation, options).await? {
        Execution::Ran(response) => {
            state.metrics.executed();
            tracing::info!(%caller, %key, status = response.status, "executed");
            after_commit(chaos, connection).await?;
            Ok(respond(response, false))
        }
        Execution::Replayed(response) => {
            state.metrics.replayed();
            tracing::info!(%caller, %key, status = response.status, "replayed (waited for the first run)");
            Ok(respond(response, true))
        }
        Execution::Mismatch => {
            state.metrics.mismatched();
            tracing::info!(%caller, %key, "refused: key reused with another request");
            Err(ApiError::IdempotencyKeyMismatch)
        }
        Execution::InUse => {
            state.metrics.in_conflict();
            tracing::info!(%caller, %key, "refused: first request still running");
            Err(ApiError::IdempotencyKeyInUse)
        }
        Execution::RolledBack => {
            tracing::warn!(%caller, %key, "chaos: rolled back before commit, dropping the connection");
            drop_connection(connection).await
        }
    }
}

/// Chaos after a commit: the work is durable, now the answer misbehaves.
async fn after_commit(
    chaos: Option<Chaos>,
    connection: Option<ConnectionControl>,
) -> Result<(), ApiError> {
    match chaos {
        Some(Chaos::DropAfterCommit) => {
            tracing::warn!("chaos: committed, dropping the connection");
            drop_connection(connection).await
        }
        Some(Chaos::DelayAfterCommit(delay)) => {
            tracing::warn!(?delay, "chaos: committed, delaying the answer");
            tokio::time::sleep(delay).await;
            Ok(())
        }
        Some(Chaos::ExitAfterCommit) => {
            tracing::warn!("chaos: committed, exiting with 137");
            std::process::exit(137);
        }
        Some(Chaos::CrashBeforeCommit) | None => Ok(()),
    }
}

/// Cuts the request's connection; the handler never finishes.
async fn drop_connection<T>(connection: Option<ConnectionControl>) -> Result<T, ApiError> {
    match connection {
        Some(connection) => {
            connection.drop_connection();
            std::future::pending().await
        }
        None => Err(ApiError::Internal(
            "chaos asked to drop a connection the server does not manage".into(),
        )),
    }
}

/// Builds the HTTP answer from a stored response.
pub fn respond(stored: StoredResponse, replayed: bool) -> Response {
    let mut response = Response::new(Body::from(stored.body));
    *response.status_mut() =
        StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    for (name, value) in &stored.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            headers.append(name, value);
        }
    }
    if replayed {
        headers.insert(
            IDEMPOTENT_REPLAYED.clone(),
            HeaderValue::from_static("true"),
        );
    }
    response
}
