//! The shop's own metrics, registered in the engine's registry so that
//! `GET /metrics` answers both: calls to the payment provider and receipts
//! the SMTP server accepted.

use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use exactly_once::Metrics;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::{counter::Counter, family::Family};
use prometheus_client::registry::Registry;

/// How a provider call ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum ProviderOutcome {
    /// Charged.
    succeeded,
    /// Declined (or refused) by the provider: a final answer, nothing charged.
    declined,
    /// No final answer: unreachable, timed out, 5xx.
    failed,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    outcome: ProviderOutcome,
}

/// The shop's counters.
#[derive(Debug, Default)]
pub struct ShopMetrics {
    provider_calls: Family<ProviderLabels, Counter>,
    receipts_sent: Counter,
    receipts_withheld: Counter,
}

impl ShopMetrics {
    /// The engine's metrics with the shop's registered beside them, each
    /// label value present at zero.
    pub fn registered() -> (Metrics, Self) {
        let shop = Self::default();
        let metrics = Metrics::with(|registry: &mut Registry| {
            registry.register(
                "provider_calls",
                "Calls to the payment provider by outcome: succeeded, declined, failed (no final answer)",
                shop.provider_calls.clone(),
            );
            registry.register(
                "receipts_sent",
                "Receipts the SMTP server accepted",
                shop.receipts_sent.clone(),
            );
            registry.register(
                "receipts_withheld",
                "Receipts not sent because their caller had been sent --caller-receipts this hour",
                shop.receipts_withheld.clone(),
            );
        });
        for outcome in [
            ProviderOutcome::succeeded,
            ProviderOutcome::declined,
            ProviderOutcome::failed,
        ] {
            let _ = shop
                .provider_calls
                .get_or_create(&ProviderLabels { outcome });
        }
        (metrics, shop)
    }

    /// A provider call ended so.
    pub fn provider_call(&self, outcome: ProviderOutcome) {
        self.provider_calls
            .get_or_create(&ProviderLabels { outcome })
            .inc();
    }

    /// The counter of receipts withheld (`--caller-receipts`).
    pub fn receipts_withheld(&self) -> Counter {
        self.receipts_withheld.clone()
    }

    /// The SMTP server accepted a receipt.
    pub fn receipt_sent(&self) {
        self.receipts_sent.inc();
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
pub async fn handler(State(state): State<AppState>) -> Response {
    let metrics = &state.engine.metrics;
    metrics.database_host(state.engine.store.database_host());
    (
        [(
            http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.render(),
    )
        .into_response()
}
