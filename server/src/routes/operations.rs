//! `GET /operations`, only with `--chaos`: the unfinished operations as
//! `server operations list --json` shows them (at most 50, oldest first),
//! for the demo page's operator panel. Not part of the API: it names
//! every caller's operations (their hashes and keys, never a token), which
//! only a demo may show to anyone who asks.

use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::StatusCode;

/// The unfinished operations, as JSON; 503 when the database cannot say.
pub async fn list(State(state): State<AppState>) -> Response {
    let ttl = state.engine.key_ttl();
    match crate::operations::unfinished_json(&state.engine, ttl).await {
        Ok(list) => Json(list).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e).into_response(),
    }
}
