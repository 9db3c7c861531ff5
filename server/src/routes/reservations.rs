//! `POST /reservations`.

use crate::domain::NewReservation;
use crate::error::ApiError;
use crate::idempotency::{self, Keyed};
use crate::operation::Operation;
use crate::state::AppState;
use axum::extract::State;
use axum::response::Response;

/// `POST /reservations`: takes stock, at most once per key; not enough
/// stock is a recorded 409 `insufficient-inventory`.
pub async fn create(State(state): State<AppState>, keyed: Keyed) -> Result<Response, ApiError> {
    let reservation =
        NewReservation::parse(&keyed.body).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    idempotency::run(&state, keyed, Operation::Reserve(reservation)).await
}
