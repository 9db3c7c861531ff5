//! What every handler can reach: cheap, cloneable handles.

use crate::idempotency::cache::ReplayCache;
use crate::metrics::Metrics;
use crate::provider::Provider;
use crate::store::Store;
use std::sync::Arc;

/// Shared application state.
#[derive(Clone)]
pub struct AppState {
    /// The database.
    pub store: Arc<dyn Store>,
    /// Counters and histograms for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Whether `X-Chaos` is honoured.
    pub chaos: bool,
    /// The payment provider charges go through (`--psp-url`), if any.
    pub provider: Option<Arc<Provider>>,
    /// Whether receipts are written to the outbox (`--smtp-url`).
    pub receipts: bool,
    /// Finished records recently seen, answered from memory.
    pub cache: Arc<ReplayCache>,
}

impl axum::extract::FromRef<AppState> for Arc<Metrics> {
    fn from_ref(state: &AppState) -> Self {
        state.metrics.clone()
    }
}
