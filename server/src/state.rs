//! What every handler can reach: cheap, cloneable handles.

use crate::idempotency::cache::ReplayCache;
use crate::metrics::Metrics;
use crate::provider::Provider;
use crate::store::Store;
use std::ops::Deref;
use std::sync::Arc;

/// Shared application state: one reference-counted pointer, since every
/// request clones it (and a clone of each handle inside would be one
/// atomic increment and decrement each).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// What [`AppState`] points to.
pub struct Shared {
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

impl From<Shared> for AppState {
    fn from(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl axum::extract::FromRef<AppState> for Arc<Metrics> {
    fn from_ref(state: &AppState) -> Self {
        state.metrics.clone()
    }
}
