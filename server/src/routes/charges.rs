//! `POST /charges` and `GET /charges`.

use super::{Authenticated, Keyed};
use crate::db::ChargeQuery;
use crate::domain::Charge;
use crate::domain::{ChargeId, NewCharge};
use crate::error::ApiError;
use crate::operation::charge::{RecordCharge, StartCharge};
use crate::state::AppState;
use axum::extract::{rejection::QueryRejection, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use exactly_once::{Any, Operation};
use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

keyed_post! {
    path = "/charges", operation_id = "create_charge", tag = "charges",
    body = NewChargeBody, answers = CreateChargeResponses,
    /// `POST /charges`: creates a charge, at most once per key: in one phase,
    /// or, with a provider, started here and finished around the provider call.
    pub async fn create(State(state): State<AppState>, keyed: Keyed) -> Response {
        let (phased, caller) = (state.provider.is_some(), keyed.request.caller);
        state.engine.run(keyed, |body| {
            let request =
                NewCharge::parse(body).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
            Ok::<_, ApiError>(if phased {
                Box::new(StartCharge { request }) as Box<dyn Operation<Any>>
            } else {
                Box::new(RecordCharge::new(request, &state.receipts, &caller, now_secs()))
            })
        })
        .await
    }
}

/// Unix time in seconds: a charge's `created`.
fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A page of charges, fields in the order the contract shows them.
#[derive(Serialize)]
struct ChargeList<'a> {
    data: &'a [Charge],
    has_more: bool,
}

/// Query of `GET /charges`, read as text so that a bad value is our 400.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// How many charges, at most; default 100.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    limit: Option<String>,
    /// A charge id of this caller: list the charges created before it.
    #[param(pattern = "^ch_[0-9a-fA-F]{32}$")]
    starting_after: Option<String>,
}

/// `GET /charges?limit=N&starting_after=ID`: the caller's charges, newest first.
#[utoipa::path(
    get,
    path = "/charges",
    operation_id = "list_charges",
    tag = "charges",
    params(ListQuery),
    responses(crate::openapi::responses::ListChargesResponses),
    security(("bearer" = []), ("session" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidRequest(e.body_text()))?;
    let limit = match query.limit.as_deref() {
        None => 100,
        Some(raw) => raw
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| {
                ApiError::InvalidRequest("limit must be an integer from 1 to 1000".into())
            })?,
    };
    let starting_after = query
        .starting_after
        .as_deref()
        .map(|raw| {
            ChargeId::parse(raw).ok_or_else(|| {
                ApiError::InvalidRequest(format!("starting_after {raw:?} is not a charge id"))
            })
        })
        .transpose()?;
    let page = state
        .db
        .list_charges(ChargeQuery {
            caller: &caller,
            limit,
            starting_after: starting_after.as_ref(),
        })
        .await?;
    Ok(Json(ChargeList {
        data: &page.data,
        has_more: page.has_more,
    })
    .into_response())
}
