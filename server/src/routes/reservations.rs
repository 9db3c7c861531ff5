//! `POST /reservations`.

use super::Keyed;
use crate::domain::NewReservation;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::response::Response;

keyed_post! {
    path = "/reservations", operation_id = "create_reservation", tag = "reservations",
    body = NewReservationBody, answers = CreateReservationResponses,
    /// `POST /reservations`: takes stock, at most once per key; not enough
    /// stock is a recorded 409 `insufficient-inventory`.
    pub async fn create(State(state): State<AppState>, keyed: Keyed) -> Response {
        state.engine.run(keyed, |body| {
            NewReservation::parse(body).map_err(|e| ApiError::InvalidRequest(e.to_string()))
        })
        .await
    }
}
