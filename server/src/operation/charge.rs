//! The answers of `POST /charges`.

use crate::domain::Charge;
use crate::idempotency::record::StoredResponse;
use http::StatusCode;

/// `201` with the charge.
pub fn created(charge: &Charge) -> StoredResponse {
    StoredResponse::new(
        StatusCode::CREATED,
        "application/json",
        serde_json::to_vec(charge).expect("a charge always serialises"),
    )
}
