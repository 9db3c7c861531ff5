//! `GET /inventory/ITEM`.

use crate::domain::ItemId;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

/// The stock left of one item; 404 for an unknown item.
pub async fn show(
    State(state): State<AppState>,
    Path(item): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let unknown = || ApiError::NotFound(format!("there is no item {item:?}"));
    let id = ItemId::parse(&item).ok_or_else(unknown)?;
    let available = state.store.inventory(&id).await?.ok_or_else(unknown)?;
    Ok(Json(json!({ "item_id": id, "available": available })))
}
