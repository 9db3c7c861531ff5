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
    idempotency::run(&state, keyed, |body| {
        NewReservation::parse(body)
            .map(Operation::Reserve)
            .map_err(|e| ApiError::InvalidRequest(e.to_string()))
    })
    .await
}
