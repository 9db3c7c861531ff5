//! `POST /v1/charges` (charge once per key) and `GET /v1/charges` (the
//! ledger, newest first).

use super::{body, AppState};
use crate::domain::{Answer, ChargeId, ChargeParams, IdempotencyKey};
use crate::error::ApiError;
use crate::ledger::{ChargeOutcome, LedgerEntry};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The header that marks a stored answer sent again.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
/// The default and largest page sizes of the ledger.
const DEFAULT_LIMIT: u32 = 100;
const MAX_LIMIT: u32 = 1000;

/// Creates a charge, or replays the key's stored answer. Logs one line.
pub async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    let result = charge(&state, &headers, raw).await;
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let ms = started.elapsed().as_millis();
    match result {
        Ok((answer, replayed)) => {
            let outcome = match answer.status {
                201 => "succeeded",
                402 => "declined",
                _ => "stored",
            };
            tracing::info!(key, outcome, replayed, status = answer.status, ms, "charge");
            respond(answer, replayed)
        }
        Err(e) => {
            let status = e.status().as_u16();
            tracing::info!(
                key,
                outcome = e.code(),
                replayed = false,
                status,
                ms,
                "charge"
            );
            e.into_response()
        }
    }
}

/// Parse, wait `--latency` (holding nothing), then one ledger transaction.
async fn charge(
    state: &AppState,
    headers: &HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<(Answer, bool), ApiError> {
    let key = IdempotencyKey::from_headers(headers)?;
    let params = ChargeParams::parse(&body(raw)?)?;
    if !state.latency.is_zero() {
        tokio::time::sleep(state.latency).await;
    }
    match state.ledger.charge(key.clone(), params).await? {
        ChargeOutcome::Answered { answer, replayed } => Ok((answer, replayed)),
        ChargeOutcome::Mismatch => Err(ApiError::IdempotencyMismatch(key)),
    }
}

fn respond(answer: Answer, replayed: bool) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        answer.body,
    )
        .into_response();
    if replayed {
        response
            .headers_mut()
            .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    response
}

/// The query of `GET /v1/charges`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// 1 to 1000, default 100.
    limit: Option<u32>,
    /// A charge id: list the charges created before it.
    starting_after: Option<String>,
}

/// A page of the ledger.
#[derive(Debug, Serialize)]
pub struct ChargeList {
    /// Always `"list"`.
    object: &'static str,
    /// The charges, newest first.
    data: Vec<LedgerEntry>,
    /// Whether older charges follow.
    has_more: bool,
}

/// Lists the ledger (succeeded charges only), newest first.
pub async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<ChargeList>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidRequest(e.body_text()))?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!(
            "limit must be 1 to {MAX_LIMIT}"
        )));
    }
    let starting_after = query
        .starting_after
        .as_deref()
        .map(ChargeId::parse)
        .transpose()
        .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    let page = state.ledger.list(limit, starting_after).await?;
    Ok(Json(ChargeList {
        object: "list",
        data: page.data,
        has_more: page.has_more,
    }))
}
