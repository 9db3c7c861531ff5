//! Only with the `bench` feature (`scripts/bench.sh` builds with it):
//! `POST /bench/charges` behind the hidden `--bench-unrecorded` flag writes
//! the same charge through the same store *without* its idempotency record,
//! so the benchmark can print what the record costs as a ratio. Not
//! idempotent; never in a production build.

use crate::domain::NewCharge;
use crate::error::ApiError;
use crate::idempotency::{self, Keyed};
use crate::state::AppState;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use std::sync::Arc;

/// Adds `POST /bench/charges` to `router`.
pub fn route(router: Router<AppState>) -> Router<AppState> {
    tracing::warn!("--bench-unrecorded: POST /bench/charges writes charges WITHOUT idempotency");
    router.route("/bench/charges", post(create_unrecorded))
}

async fn create_unrecorded(
    State(state): State<AppState>,
    keyed: Keyed,
) -> Result<Response, ApiError> {
    let charge =
        NewCharge::parse(&keyed.body).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    let response = state
        .store
        .execute_unrecorded(keyed.request.caller, Arc::new(charge))
        .await?;
    Ok(idempotency::respond(response, false))
}
