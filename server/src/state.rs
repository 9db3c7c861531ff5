//! What every handler can reach: cheap, cloneable handles.

use crate::db::Db;
use crate::metrics::ShopMetrics;
use crate::provider::Provider;
use exactly_once::{Any, Engine, Metrics};
use std::ops::Deref;
use std::sync::Arc;

/// Shared application state: one reference-counted pointer, since every
/// request clones it (and a clone of each handle inside would be one
/// atomic increment and decrement each).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// What [`AppState`] points to.
pub struct Shared {
    /// The idempotency engine: the store, the replay cache, the metrics.
    pub engine: Engine<Any>,
    /// The database, for the shop's own reads.
    pub db: Db,
    /// The shop's own metrics (provider calls, receipts).
    pub shop_metrics: Arc<ShopMetrics>,
    /// Whether `X-Chaos` is honoured.
    pub chaos: bool,
    /// The payment provider charges go through (`--psp-url`), if any.
    pub provider: Option<Arc<Provider>>,
    /// Whether receipts are written to the outbox (`--smtp-url`), and
    /// each caller's allowance of them (`--caller-receipts`).
    pub receipts: crate::operation::receipt::Receipts,
    /// `--caller-rate`'s limiter, unless it is 0.
    pub caller_rate: Option<crate::rate::CallerRate>,
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
        state.engine.metrics().clone()
    }
}
