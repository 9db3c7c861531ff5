//! The HTTP endpoints: one module per resource, and the answers for paths
//! and methods nothing serves.

pub mod charges;
pub mod faults;

use crate::error::ApiError;
use crate::faults::Faults;
use crate::ledger::Ledger;
use axum::extract::rejection::BytesRejection;
use axum::extract::FromRef;
use bytes::Bytes;
use http::{Method, StatusCode, Uri};
use std::time::Duration;

/// The largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What the handlers share; cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The ledger's writer.
    pub ledger: Ledger,
    /// The pending fault.
    pub faults: Faults,
    /// `--latency`: added to every charge.
    pub latency: Duration,
}

impl FromRef<AppState> for Faults {
    fn from_ref(state: &AppState) -> Self {
        state.faults.clone()
    }
}

/// Answers a path nothing serves.
pub async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

/// Answers a method a path does not take.
pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// The body of a request, read whatever its `Content-Type` says (so a bare
/// `curl -d` works): over the limit is 413, a broken upload 400.
fn body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(MAX_BODY_BYTES)
        } else {
            ApiError::InvalidRequest(rejection.body_text())
        }
    })
}
