//! `POST /admin/faults` sets the pending fault; `GET /admin/faults` shows it.

use super::body;
use crate::error::ApiError;
use crate::faults::{FaultRequest, Faults};
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use bytes::Bytes;
use http::StatusCode;

/// Replaces the pending fault (`{"mode": "none"}` clears it): `204`.
pub async fn set(
    State(faults): State<Faults>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let request: FaultRequest = serde_json::from_slice(&body(raw)?)
        .map_err(|e| ApiError::InvalidRequest(format!("not a fault: {e}")))?;
    let pending = request.parse().map_err(ApiError::InvalidRequest)?;
    faults.set(pending);
    tracing::info!(?pending, "fault set");
    Ok(StatusCode::NO_CONTENT)
}

/// The pending fault, as the request that would set it.
pub async fn show(State(faults): State<Faults>) -> Json<FaultRequest> {
    Json(FaultRequest::describe(faults.pending()))
}
