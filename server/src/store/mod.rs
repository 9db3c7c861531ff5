//! Persistence behind one trait, so the idempotency flow and the tests are
//! the same whatever the database.
//!
//! The contract every backend keeps: [`Store::execute`] claims the key, runs
//! the operation and writes the response **in one transaction**, and returns
//! only once that transaction is durable. A record a backend can see is
//! either finished (it has its response) or, on backends where a transaction
//! can be observed in flight, reported as [`Execution::InUse`].

pub mod postgres;
pub mod sqlite;

use crate::domain::{Caller, Charge, ChargeId, Fingerprint, IdempotencyKey, ItemId};
use crate::operation::{Operation, StoredResponse};
use async_trait::async_trait;
use std::time::{SystemTime, UNIX_EPOCH};

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

/// A finished record, as read for a replay.
#[derive(Debug, Clone)]
pub struct Record {
    /// The request that first used the key.
    pub fingerprint: Fingerprint,
    /// What it answered.
    pub response: StoredResponse,
}

/// What [`Store::execute`] did.
#[derive(Debug)]
pub enum Execution {
    /// The operation ran and its record was committed with it.
    Ran(StoredResponse),
    /// The key was already recorded for this request: its stored response.
    Replayed(StoredResponse),
    /// The key was already recorded for another request: nothing ran.
    Mismatch,
    /// Another transaction holds the key right now: nothing ran.
    InUse,
    /// The operation ran and was rolled back on purpose (chaos
    /// `crash-before-commit`): nothing is stored.
    RolledBack,
}

/// Why the store could not answer. Either way nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached, is full, busy or gone: retryable.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// Anything else: a bug or a corrupt database.
    #[error("database error: {0}")]
    Internal(String),
}

/// One page of a caller's charges, newest first.
#[derive(Debug, Clone)]
pub struct ChargePage {
    /// The charges.
    pub data: Vec<Charge>,
    /// Whether older charges remain.
    pub has_more: bool,
}

/// Options of one execution.
#[derive(Debug, Clone, Copy)]
pub struct ExecuteOptions {
    /// Run the operation, then roll it back instead of committing (chaos).
    pub roll_back: bool,
    /// Look up and write the key's record. Only the benchmark's
    /// `--bench-unrecorded` route turns this off, to measure what the
    /// record costs.
    pub record: bool,
}

impl Default for ExecuteOptions {
    fn default() -> Self {
        Self {
            roll_back: false,
            record: true,
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
        operation: Operation,
        options: ExecuteOptions,
    ) -> Result<Execution, StoreError>;

    /// A caller's charges, newest first.
    async fn list_charges(
        &self,
        caller: &Caller,
        limit: u32,
        starting_after: Option<&ChargeId>,
    ) -> Result<ChargePage, StoreError>;

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
