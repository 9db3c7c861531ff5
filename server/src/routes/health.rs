//! `GET /healthz`.

use crate::error::ApiError;
use crate::openapi::responses::HealthResponses;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

/// 200 once the database is reachable, migrated and writable, with the
/// database server it wrote to (PostgreSQL); 503 otherwise. A database a
/// later release migrated is healthy while each later migration runs
/// beside this release; otherwise the 503's detail names the migration.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses(HealthResponses))]
pub async fn healthz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let engine = &state.engine;
    engine.health().await?;
    Ok(Json(
        json!({ "status": "ok", "database_host": engine.database_host() }),
    ))
}
