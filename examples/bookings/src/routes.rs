//! The HTTP API: `POST /bookings` (keyed), `GET /bookings`,
//! `GET /bookings/{id}`, `GET /healthz`, `GET /metrics`.

use crate::db::{BookingRow, Db};
use crate::operation::HoldSeat;
use axum::extract::{FromRequestParts, Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use exactly_once::{Any, Caller, Engine, Error, Problem};
use http::request::Parts;
use http::{header, StatusCode};
use serde::Serialize;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The engine (store, replay cache, metrics, steps).
    pub engine: Engine<Any>,
    /// The same database, for this service's own reads.
    pub db: Db,
}

/// The caller: `Authorization: Bearer TOKEN`, or a 401.
#[derive(Debug, Clone, Copy)]
pub struct Customer(pub Caller);

impl<S: Send + Sync> FromRequestParts<S> for Customer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        match token {
            Some(token) => Ok(Self(Caller::of(token))),
            None => Err(Problem::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Unauthorized",
                "send Authorization: Bearer TOKEN",
            )
            .into_response()),
        }
    }
}

impl From<Customer> for Caller {
    fn from(customer: Customer) -> Self {
        customer.0
    }
}

/// A keyed request of this service.
pub type Keyed = exactly_once::Keyed<Customer>;

/// The router over `state`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/bookings", post(create).get(list))
        .route("/bookings/{id}", get(show))
        .route("/healthz", get(health))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// `POST /bookings {"seat": "12A"}`: books the seat at most once per key.
async fn create(State(state): State<AppState>, keyed: Keyed) -> Response {
    state.engine.run(keyed, HoldSeat::parse).await
}

#[derive(Serialize)]
struct List {
    data: Vec<BookingRow>,
}

/// `GET /bookings`: the caller's bookings, oldest first.
async fn list(State(state): State<AppState>, Customer(caller): Customer) -> Response {
    match state.db.bookings(&caller, None).await {
        Ok(data) => Json(List { data }).into_response(),
        Err(e) => Error::from(e).into_response(),
    }
}

/// `GET /bookings/{id}`: one of the caller's bookings, or a 404.
async fn show(
    State(state): State<AppState>,
    Customer(caller): Customer,
    Path(id): Path<String>,
) -> Response {
    match state.db.bookings(&caller, Some(&id)).await {
        Ok(rows) => match rows.into_iter().next() {
            Some(row) => Json(row).into_response(),
            None => Problem::new(
                StatusCode::NOT_FOUND,
                "not-found",
                "Not found",
                "no such booking of yours",
            )
            .into_response(),
        },
        Err(e) => Error::from(e).into_response(),
    }
}

/// `GET /healthz`: 200 when the database can commit.
async fn health(State(state): State<AppState>) -> Response {
    match state.engine.health().await {
        Ok(()) => (StatusCode::OK, "ok").into_response(),
        Err(e) => Error::from(e).into_response(),
    }
}

/// `GET /metrics`: the engine's counters (requests by outcome, operations
/// resumed by a retry or the completer, …), OpenMetrics text.
async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.engine.metrics().render(),
    )
        .into_response()
}
