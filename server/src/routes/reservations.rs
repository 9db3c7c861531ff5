//! `POST /reservations`.

use crate::domain::NewReservation;
use crate::error::ApiError;
use crate::idempotency::{self, Keyed};
use crate::state::AppState;
use axum::extract::State;
use axum::response::Response;
use std::sync::Arc;

keyed_post! {
    path = "/reservations", operation_id = "create_reservation", tag = "reservations",
    body = NewReservationBody, answers = CreateReservationResponses,
    /// `POST /reservations`: takes stock, at most once per key; not enough
    /// stock is a recorded 409 `insufficient-inventory`.
    pub async fn create(State(state): State<AppState>, keyed: Keyed) -> Result<Response, ApiError> {
        idempotency::run(&state, keyed, |body| match NewReservation::parse(body) {
            Ok(reservation) => Ok(Arc::new(reservation)),
            Err(e) => Err(ApiError::InvalidRequest(e.to_string())),
        })
        .await
    }
}
