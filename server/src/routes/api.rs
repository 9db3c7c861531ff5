//! The API's routes and their OpenAPI document: the router and
//! `GET /openapi.json` both come from [`api_routes`], so the document lists
//! every route served.

use super::{charges, config, health, inventory, metrics, reservations};
use crate::openapi::{self, responses::DocumentResponses};
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::header;
use std::sync::LazyLock;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The routes of the HTTP API of docs/CONTRACT.md section 3, each with its
/// OpenAPI description: the router and `GET /openapi.json` both come from
/// here, so the document lists every route served.
pub fn api_routes() -> OpenApiRouter<AppState> {
    openapi::router()
        .routes(routes!(charges::create, charges::list))
        .routes(routes!(reservations::create))
        .routes(routes!(inventory::show))
        .routes(routes!(health::healthz))
        .routes(routes!(metrics::handler))
        .routes(routes!(config::show))
        .routes(routes!(serve))
}

/// The document, as a server with `--chaos` (`chaos`) or without serves it.
pub fn document(chaos: bool) -> serde_json::Value {
    openapi::finish(api_routes().into_openapi(), chaos)
}

/// The document of a server with `--chaos`, and of one without.
static DOCUMENTS: LazyLock<[String; 2]> = LazyLock::new(|| {
    [false, true]
        .map(|chaos| serde_json::to_string_pretty(&document(chaos)).expect("it serialises"))
});

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    tag = "operations",
    responses(DocumentResponses)
)]
pub async fn serve(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENTS[usize::from(state.chaos)].as_str(),
    )
        .into_response()
}
