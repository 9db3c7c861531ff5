//! [`Engine`]: what your handlers and background tasks share: the store,
//! the replay cache, the metrics and your [`Steps`].

use crate::backend::{Backend, Operation};
use crate::cache::ReplayCache;
use crate::caller::Caller;
use crate::error::Error;
use crate::key::IdempotencyKey;
use crate::metrics::Metrics;
use crate::operation_id::OperationId;
use crate::record::Lease;
use crate::store::operator::{Refusal, Settlement};
use crate::store::{Store, StoreError};
use async_trait::async_trait;
use std::sync::Arc;

/// The work outside the database that an operation in phases does between
/// its phases (DBOS calls them steps): a call to a partner's API, a
/// message to another system. An operation's phase that ends with
/// [`PhaseEnd::Stopped`](crate::PhaseEnd::Stopped) names a recovery point and
/// records the state to go on from; the engine then calls [`Steps::step`]
/// with the lease, outside any transaction, and runs the phase it returns
/// in a transaction of its own. A crash anywhere resumes from the last
/// recorded point (a retry of the key, or the completer), so a step may run
/// more than once: make its effect idempotent with
/// [`Lease::downstream_key`], the same for every attempt of one run.
#[async_trait]
pub trait Steps<B: Backend>: Send + Sync + 'static {
    /// Does the work `lease.point` calls for and returns the phase that
    /// records its result. An error leaves the operation at its recovery
    /// point (the lease is given up); return
    /// [`Error::StepUnavailable`] when the outside service gave no final
    /// answer.
    async fn step(&self, lease: &Lease) -> Result<Arc<dyn Operation<B>>, Error>;

    /// The phase that records an operator's `settlement` of the lease's
    /// operation, set aside at `lease.point`: it must finish the operation
    /// ([`PhaseEnd::Finished`](crate::PhaseEnd::Finished)) with the answer its key
    /// replays from then on. Check what the service outside holds first
    /// (unless [`Settlement::unverified`]), and refuse an outcome it
    /// contradicts, saying why ([`Refusal`]). The engine writes
    /// the audit row in the phase's transaction. By default nothing is
    /// settled: such an application's operators retry, or settle with SQL.
    async fn settle(
        &self,
        lease: &Lease,
        settlement: &Settlement,
    ) -> Result<Arc<dyn Operation<B>>, Refusal> {
        let _ = settlement;
        Err(Refusal(format!(
            "this application does not settle operations stopped at {:?}",
            lease.point
        )))
    }

    /// What the service outside holds for the lease's operation, for an
    /// operator to see before settling it (the shop: the provider's charge
    /// under the operation's downstream key). The lease holds nothing
    /// here: only read. `None` (the default): nothing to show.
    async fn reconcile(&self, lease: &Lease) -> Result<Option<serde_json::Value>, Refusal> {
        let _ = lease;
        Ok(None)
    }

    /// Whether this release knows the recovery point `point`: can run its
    /// step. During a rolling deploy a later release may stop operations
    /// at points this one has never heard of; the engine leaves those to a
    /// release that knows them: the completer skips them, and a retry that
    /// lands here is answered 503 (the outcome is not known yet, retry)
    /// without running anything, counting a failure or setting the
    /// operation aside. Every point by default; say which when a release
    /// adds one (and a new shape of a point's state is a new point).
    fn knows(&self, point: &str) -> bool {
        let _ = point;
        true
    }

    /// How long a lease on an operation at `point` lasts while its step
    /// runs (renewed every third of it), when the step at that point needs
    /// another length than the store's `lease`: a slow partner's call
    /// wants a longer one, so that nothing takes it over halfway; a quick
    /// one a shorter one, so that the completer resumes it sooner after a
    /// crash. `None` (the default): the store's.
    fn lease(&self, point: &str) -> Option<std::time::Duration> {
        let _ = point;
        None
    }
}

/// The steps of an application whose operations all finish in one phase.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSteps;

#[async_trait]
impl<B: Backend> Steps<B> for NoSteps {
    async fn step(&self, lease: &Lease) -> Result<Arc<dyn Operation<B>>, Error> {
        Err(Error::internal(format!(
            "an operation stopped at {:?} and this application has no steps",
            lease.point
        )))
    }

    /// None: an operation stopped at a point is another release's.
    fn knows(&self, _point: &str) -> bool {
        false
    }
}

/// A retry answered from its key's record, as the replay hook sees it
/// ([`EngineBuilder::on_replay`](crate::EngineBuilder::on_replay)): for an
/// audit log, or a metric of your own.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Replay<'a> {
    /// Whose key.
    pub caller: &'a Caller,
    /// The key.
    pub key: &'a IdempotencyKey,
    /// The operation (the `op` of the logs).
    pub operation: OperationId,
    /// The status replayed.
    pub status: u16,
}

/// The engine on the backend `B` ([`Sqlite`](crate::Sqlite),
/// [`Postgres`](crate::Postgres), [`Any`](crate::Any)): cheap to clone (one
/// reference count), shared by every handler and task. Put it in your
/// state and give axum a [`FromRef`](axum::extract::FromRef) to it. It runs
/// the operations that implement [`Operation<B>`](crate::Operation).
///
/// ```no_run
/// # async fn demo() -> Result<(), exactly_once::StoreError> {
/// use exactly_once::{Engine, SqliteStore, StoreOptions};
///
/// let store = SqliteStore::open("data/app.db", StoreOptions::new())?;
/// let engine = Engine::new(store);
/// tokio::spawn(engine.sweeper(std::time::Duration::from_secs(60)));
/// # Ok(()) }
/// ```
pub struct Engine<B: Backend>(pub(crate) Arc<Inner<B>>);

impl<B: Backend> Clone for Engine<B> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

/// What an [`Engine`] points to.
pub(crate) struct Inner<B: Backend> {
    /// The database.
    pub(crate) store: Arc<dyn Store<B>>,
    /// Counters and histograms for `/metrics`.
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) cache: ReplayCache,
    pub(crate) steps: Arc<dyn Steps<B>>,
    pub(crate) on_replay: Option<OnReplay>,
    pub(crate) max_unfinished: Option<u32>,
}

/// The hook called on each replay.
pub(crate) type OnReplay = Box<dyn Fn(&Replay<'_>) + Send + Sync>;

impl<B: Backend> Engine<B> {
    /// An engine over `store`, with fresh metrics and no steps.
    pub fn new(store: impl Store<B>) -> Self {
        Self::builder(Arc::new(store)).build()
    }

    /// Ok when the database is reachable, migrated and writable: a
    /// readiness probe's answer.
    pub async fn health(&self) -> Result<(), StoreError> {
        self.0.store.health().await
    }

    /// The engine's counters and histograms, for `/metrics`.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.0.metrics
    }

    /// How long a new record lives, unless its operation says otherwise
    /// ([`StoreOptions::key_ttl`](crate::StoreOptions::key_ttl)).
    pub fn key_ttl(&self) -> std::time::Duration {
        self.0.store.key_ttl()
    }

    /// The `host:port` of the database server this instance writes to,
    /// when the database is a server: on PostgreSQL the one its newest
    /// connection (or health check) reached, the new primary after a
    /// failover. `None` on SQLite.
    pub fn database_host(&self) -> Option<String> {
        self.0.store.database_host()
    }

    /// An engine to configure, over a store you keep a handle to (for your
    /// own reads: [`SqliteStore::read`](crate::SqliteStore::read),
    /// [`PostgresStore::pool`](crate::PostgresStore::pool)).
    pub fn builder(store: Arc<impl Store<B>>) -> EngineBuilder<B> {
        EngineBuilder {
            store,
            metrics: None,
            steps: Arc::new(NoSteps),
            on_replay: None,
            max_unfinished: None,
        }
    }
}

/// Configures an [`Engine`].
pub struct EngineBuilder<B: Backend> {
    store: Arc<dyn Store<B>>,
    metrics: Option<Arc<Metrics>>,
    steps: Arc<dyn Steps<B>>,
    on_replay: Option<OnReplay>,
    max_unfinished: Option<u32>,
}

impl<B: Backend> EngineBuilder<B> {
    /// At most `cap` unfinished operations (stopped at a recovery point,
    /// set aside or not) per caller: a new key whose first phase stops
    /// while its caller has `cap` already is rolled back and refused, 429
    /// `rate-limited` with `Retry-After` ([`Error::TooManyUnfinished`]),
    /// so one caller cannot fill the database with operations that never
    /// expire. Counted in the transaction that records the stop, through
    /// an index of unfinished operations by caller, under a per-caller
    /// lock on PostgreSQL (instances on one database share the cap); a
    /// one-phase operation costs nothing. `0`: no cap (the default).
    pub fn max_unfinished_per_caller(mut self, cap: u32) -> Self {
        self.max_unfinished = (cap > 0).then_some(cap);
        self
    }

    /// The steps of your operations in phases.
    pub fn steps(mut self, steps: impl Steps<B>) -> Self {
        self.steps = Arc::new(steps);
        self
    }

    /// Metrics you made (with your own registered beside the engine's).
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Calls `hook` on each retry answered from its key's record (not on a
    /// 422): for an audit log of replays, or a metric of your own. It runs
    /// on the request's task before the answer leaves: keep it short.
    ///
    /// ```
    /// # fn demo(store: exactly_once::SqliteStore) {
    /// let engine = exactly_once::Engine::builder(std::sync::Arc::new(store))
    ///     .on_replay(|replay| tracing::info!(op = %replay.operation, status = replay.status, "replayed"))
    ///     .build();
    /// # }
    /// ```
    pub fn on_replay(mut self, hook: impl Fn(&Replay<'_>) + Send + Sync + 'static) -> Self {
        self.on_replay = Some(Box::new(hook));
        self
    }

    /// The engine.
    pub fn build(self) -> Engine<B> {
        Engine(Arc::new(Inner {
            store: self.store,
            metrics: self.metrics.unwrap_or_default(),
            cache: ReplayCache::default(),
            steps: self.steps,
            on_replay: self.on_replay,
            max_unfinished: self.max_unfinished,
        }))
    }
}
