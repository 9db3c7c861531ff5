//! `GET /config`: what the demo page needs to know about this server.

use crate::openapi::responses::ConfigResponses;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

/// `{"chaos": bool, "provider": bool, "receipts": bool}`: whether the page
/// may offer the chaos panel, charges go through a payment provider, and
/// receipts are e-mailed.
#[utoipa::path(
    get,
    path = "/config",
    operation_id = "config",
    tag = "operations",
    responses(ConfigResponses)
)]
pub async fn show(State(state): State<AppState>) -> Json<Value> {
    Json(json!({
        "chaos": state.chaos,
        "provider": state.provider.is_some(),
        "receipts": state.receipts.enabled(),
    }))
}
