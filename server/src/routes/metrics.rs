//! `GET /metrics`: the engine's and the shop's metrics, in the OpenMetrics
//! text format.

use crate::openapi::responses::MetricsResponses;
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// How long a scrape waits for the health check before it counts the
/// database as not answering (under Prometheus' default 10 s scrape
/// timeout).
const HEALTH_WITHIN: Duration = Duration::from_secs(5);

/// `GET /metrics`
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "operations",
    responses(MetricsResponses)
)]
pub async fn handler(State(state): State<AppState>) -> Response {
    let metrics = state.engine.metrics();
    let checked = tokio::time::timeout(HEALTH_WITHIN, state.engine.health()).await;
    state.shop_metrics.health(checked.as_ref().ok());
    metrics.database_host(state.engine.database_host());
    (
        [(
            http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.render(),
    )
        .into_response()
}
