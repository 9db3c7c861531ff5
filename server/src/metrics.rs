//! Prometheus metrics: what the idempotency layer decided, what the
//! sweeper deleted, and how long requests took.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::{text::encode, EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::{counter::Counter, family::Family, histogram::Histogram};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
enum Decision {
    executed,
    replayed,
    conflict,
    mismatch,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    outcome: Decision,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
    status: u16,
}

/// The server's metrics registry.
pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    expired: Counter,
    latency: Family<RouteLabels, Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "idempotency_requests",
            "Keyed requests by what the idempotency layer did: executed, replayed, conflict (409), mismatch (422)",
            decisions.clone(),
        );
        let expired = Counter::default();
        registry.register(
            "idempotency_records_expired",
            "Idempotency records deleted by the sweeper after their TTL",
            expired.clone(),
        );
        let latency = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
            ])
        });
        registry.register(
            "http_request_duration_seconds",
            "Time from request to response head, by route and status",
            latency.clone(),
        );
        for outcome in [
            Decision::executed,
            Decision::replayed,
            Decision::conflict,
            Decision::mismatch,
        ] {
            let _ = decisions.get_or_create(&DecisionLabels { outcome });
        }
        Self {
            registry,
            decisions,
            expired,
            latency,
        }
    }

    fn decided(&self, outcome: Decision) {
        self.decisions
            .get_or_create(&DecisionLabels { outcome })
            .inc();
    }

    /// An operation ran.
    pub fn executed(&self) {
        self.decided(Decision::executed);
    }
    /// A stored response was replayed.
    pub fn replayed(&self) {
        self.decided(Decision::replayed);
    }
    /// A 409: the key was in use.
    pub fn in_conflict(&self) {
        self.decided(Decision::conflict);
    }
    /// A 422: the key was reused with another request.
    pub fn mismatched(&self) {
        self.decided(Decision::mismatch);
    }
    /// The sweeper deleted `n` records.
    pub fn expired(&self, n: u64) {
        self.expired.inc_by(n);
    }

    /// The Prometheus (OpenMetrics) text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

/// `GET /metrics`
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "operations",
    responses(crate::openapi::responses::MetricsResponses)
)]
pub async fn handler(State(metrics): State<Arc<Metrics>>) -> Response {
    (
        [(
            http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.render(),
    )
        .into_response()
}

/// Middleware recording each request's latency by route.
pub async fn track(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "static".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    metrics
        .latency
        .get_or_create(&RouteLabels {
            method,
            route,
            status: response.status().as_u16(),
        })
        .observe(started.elapsed().as_secs_f64());
    response
}
