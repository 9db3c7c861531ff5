//! The shop's own metrics, registered in the engine's registry so that
//! `GET /metrics` answers both: calls to the payment provider, receipts
//! the SMTP server accepted, and what `/healthz` would answer at the scrape
//! (whether the instance is healthy, and whether its database answers), so
//! that an alert sees both without probing `/healthz` itself.

use exactly_once::StoreErrorKind;
use exactly_once::{Metrics, StoreError};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
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
    healthy: Gauge,
    database_reachable: Gauge,
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
            registry.register(
                "healthy",
                "1 when /healthz answers 200 (the database reachable, migrated for this release, writable), 0 when 503; read at the scrape",
                shop.healthy.clone(),
            );
            registry.register(
                "database_reachable",
                "1 when the database answered the scrape's health check (even to refuse its schema), 0 when it could not be reached or did not answer within 5 s",
                shop.database_reachable.clone(),
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

    /// What the health check said (`None`: no answer in time).
    pub(crate) fn health(&self, checked: Option<&Result<(), StoreError>>) {
        let reachable = match checked {
            None => false,
            Some(Ok(())) => true,
            Some(Err(e)) => !matches!(
                e.kind(),
                StoreErrorKind::Unavailable | StoreErrorKind::OutcomeUnknown
            ),
        };
        self.healthy.set(i64::from(matches!(checked, Some(Ok(())))));
        self.database_reachable.set(i64::from(reachable));
    }
}
