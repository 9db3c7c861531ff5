//! `GET /inventory/ITEM`.

use crate::domain::ItemId;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{rejection::PathRejection, Path, State};
use axum::Json;
use serde_json::{json, Value};

/// The stock left of one item; 404 for an unknown item.
#[utoipa::path(
    get,
    path = "/inventory/{item}",
    operation_id = "show_inventory",
    tag = "reservations",
    params(("item" = String, Path, description = "An item id, such as `sku-poster`.")),
    responses(crate::openapi::responses::InventoryResponses)
)]
pub async fn show(
    State(state): State<AppState>,
    item: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    // A path that does not even decode (`/inventory/%FF`) names no item.
    let Path(item) = item.map_err(|_| ApiError::NotFound("there is no such item".into()))?;
    let unknown = || ApiError::NotFound(format!("there is no item {item:?}"));
    let id = ItemId::parse(&item).ok_or_else(unknown)?;
    let available = state.db.inventory(&id).await?.ok_or_else(unknown)?;
    Ok(Json(json!({ "item_id": id, "available": available })))
}
