//! Persistence behind one trait, so the idempotency flow and the tests are
//! the same whatever the database.
//!
//! The contract every backend keeps: [`Store::execute`] claims the key, runs
//! the operation and writes the response **in one transaction**, and returns
//! only once that transaction is durable. A record a backend can see is
//! either finished (it has its response) or, on backends where a transaction
//! can be observed in flight, reported as [`Execution::InUse`].
//!
//! A backend only translates: the verdict on a finished record
//! ([`Record::verdict`]), the stored response's encoding, the paging rules
//! ([`ChargeQuery`]) and the schema rules ([`schema`]) are decided once, here
//! and in [`crate::idempotency::record`]. Each business operation is a
//! domain request that implements [`Operation`]: its SQL lives in
//! `sqlite/operations.rs` and `postgres/operations.rs`, its answers in
//! [`crate::operation`].

pub mod postgres;
pub mod schema;
pub mod sqlite;

use crate::domain::{Caller, Charge, ChargeId, Fingerprint, IdempotencyKey, ItemId};
use crate::idempotency::record::{Record, StoredResponse, Verdict};
use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A keyed request, parsed at the edge.
#[derive(Debug, Clone)]
pub struct IdempotentRequest {
    /// Whose key.
    pub caller: Caller,
    /// The key.
    pub key: IdempotencyKey,
    /// What the request was.
    pub fingerprint: Fingerprint,
}

/// A business operation an idempotency key protects: a domain request that
/// each backend knows how to run inside the transaction that records its
/// key. Adding an operation means implementing both backends' `Run` (the
/// compiler insists), not a match arm in every store.
pub trait Operation: sqlite::Run + postgres::Run + fmt::Debug + Send + Sync + 'static {}

impl<T> Operation for T where T: sqlite::Run + postgres::Run + fmt::Debug + Send + Sync + 'static {}

/// What an operation sees of the request running it.
#[derive(Debug, Clone, Copy)]
pub struct RunContext<'a> {
    /// Whose operation.
    pub caller: &'a Caller,
    /// The transaction's time, Unix milliseconds.
    pub now_ms: i64,
}

/// What [`Store::execute`] did.
#[derive(Debug)]
pub enum Execution {
    /// The operation ran and its record was committed with it.
    Ran(StoredResponse),
    /// The key was already recorded, finished: replay it or refuse.
    Found(Verdict),
    /// Another transaction holds the key right now: nothing ran.
    InUse,
    /// The operation ran and was rolled back on purpose (chaos
    /// `crash-before-commit`): nothing is stored.
    RolledBack,
}

/// Whether an execution commits or, on purpose, rolls back (chaos).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Commit, and answer once durable.
    Commit,
    /// Run everything, then roll it back: nothing is stored.
    RollBack,
}

/// Why the store could not answer. Either way nothing was written.
///
/// It keeps the driver's error as its [`source`](std::error::Error::source),
/// so the log shows the whole chain; cloning shares it (a batch answers
/// every request of a failed commit with the same error).
#[derive(Debug, Clone)]
pub struct StoreError {
    kind: StoreErrorKind,
    context: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

/// Whether a retry may succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// The database cannot be reached, is full, busy or gone: retryable (503).
    Unavailable,
    /// Anything else: a bug or a corrupt database (500).
    Internal,
}

impl StoreError {
    /// A retryable failure.
    pub fn unavailable(context: impl Into<String>) -> Self {
        Self {
            kind: StoreErrorKind::Unavailable,
            context: context.into(),
            source: None,
        }
    }

    /// A failure a retry will not fix.
    pub fn internal(context: impl Into<String>) -> Self {
        Self {
            kind: StoreErrorKind::Internal,
            context: context.into(),
            source: None,
        }
    }

    /// The same error, caused by `source`.
    pub fn caused_by(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// Retryable or not.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// True for [`StoreErrorKind::Unavailable`].
    pub fn is_unavailable(&self) -> bool {
        self.kind == StoreErrorKind::Unavailable
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            StoreErrorKind::Unavailable => write!(f, "database unavailable: {}", self.context),
            StoreErrorKind::Internal => write!(f, "database error: {}", self.context),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// One page of a caller's charges, newest first.
#[derive(Debug, Clone)]
pub struct ChargePage {
    /// The charges.
    pub data: Vec<Charge>,
    /// Whether older charges remain.
    pub has_more: bool,
}

/// Which page of a caller's charges to read: the paging rules both
/// backends follow.
#[derive(Debug, Clone, Copy)]
pub struct ChargeQuery<'a> {
    /// Whose charges.
    pub caller: &'a Caller,
    /// At most this many charges (1 to 1000).
    pub limit: u32,
    /// Only charges older than this one.
    pub starting_after: Option<&'a ChargeId>,
}

impl ChargeQuery<'_> {
    /// Ids are `ch_` + hex compared as bytes, so `"ch_~"` sorts after every
    /// id: the first page reads "ids below it".
    pub fn before(&self) -> &str {
        self.starting_after.map_or("ch_~", |id| id.as_ref())
    }

    /// Rows to ask for: one more than the page, to learn `has_more`.
    pub fn rows(&self) -> i64 {
        i64::from(self.limit) + 1
    }

    /// The page of `rows`, newest first as read.
    pub fn page(&self, mut rows: Vec<Charge>) -> ChargePage {
        let has_more = rows.len() > self.limit as usize;
        rows.truncate(self.limit as usize);
        ChargePage {
            data: rows,
            has_more,
        }
    }
}

/// A database holding idempotency records beside the business tables.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// A finished, unexpired record of `key` for `caller`, read without
    /// waiting for writers (the replay fast path).
    async fn lookup(
        &self,
        caller: &Caller,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError>;

    /// Claims the key, runs the operation and records its response in one
    /// transaction; answers once the transaction is durable.
    async fn execute(
        &self,
        request: IdempotentRequest,
        operation: Arc<dyn Operation>,
        finish: Finish,
    ) -> Result<Execution, StoreError>;

    /// A page of a caller's charges, newest first.
    async fn list_charges(&self, query: ChargeQuery<'_>) -> Result<ChargePage, StoreError>;

    /// The stock left of an item, `None` if there is no such item.
    async fn inventory(&self, item: &ItemId) -> Result<Option<i64>, StoreError>;

    /// Deletes at most `limit` records that expired by now; returns how many.
    async fn sweep(&self, limit: u32) -> Result<u64, StoreError>;

    /// Ok when the database is reachable, migrated and writable.
    async fn health(&self) -> Result<(), StoreError>;
}

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A duration in milliseconds as the stores keep it (saturating).
pub fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
