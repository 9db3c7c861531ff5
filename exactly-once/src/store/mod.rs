//! Persistence behind one trait, so the idempotency flow and the tests are
//! the same whatever the database.
//!
//! The contract every backend keeps: [`Store::execute`] claims the key, runs
//! the operation's first phase and writes how it ended **in one
//! transaction**, and returns only once that transaction is durable. A
//! phase ends with the answer (the record is finished) or at a recovery
//! point under a lease ([`Lease`]); [`Store::advance`] runs a later phase in
//! a transaction of its own, only for the lease's holder. A record a
//! backend can see is finished, stopped at a recovery point (its lease
//! says who may go on), or, on backends where a transaction can be
//! observed in flight, reported as [`Execution::InUse`].
//!
//! Beside the records, the outbox: messages written with an operation's
//! phase, claimed and marked by the relay ([`crate::outbox`]).
//!
//! A backend only translates: the verdict on a finished record
//! ([`Record::verdict`](crate::record::Record::verdict)), the stored response's
//! encoding and the schema rules ([`schema`]) are decided once, here and
//! in [`crate::record`]. Each operation is the application's own type that
//! implements [`Operation`] for the backend it runs on: its SQL there.
//!
//! This module names no backend: each backend's module implements
//! [`Store`] for its backend type ([`crate::backend`]).
//!
//! Each call that can end several ways says how in an enum named after it,
//! and no two share one:
//!
//! | call | what it returns | its ends |
//! |---|---|---|
//! | [`Operation::run`] (yours) | [`PhaseEnd`](crate::PhaseEnd) | finished with the answer, or stopped at a recovery point |
//! | [`Store::execute`] | [`Execution`] | ran, stopped, resumed, found, mismatch, in use, needs attention, rolled back |
//! | [`Store::advance`] | [`Advanced`] | finished, stopped, lease lost |
//! | [`Store::step_failed`] | [`AfterFailure`] | released, set aside, not held |
//! | [`Store::operator_take`] | [`Taken`] | a lease, missing, refused |

pub(crate) mod enqueue;
mod error;
pub(crate) mod operator;
mod options;
pub(crate) mod placement;
#[cfg(any(feature = "postgres", feature = "sqlx"))]
pub(crate) mod postgres;
pub(crate) mod schema;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

use crate::backend::{Backend, Operation};
use crate::caller::Caller;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::operation_id::OperationId;
use crate::record::{Lease, Record, StoredResponse};
use crate::store::operator::{
    ActionRecord, Census, ListFilter, OperationRecord, OperatorTake, OutboxCensus, Settlement,
    Taken,
};
use async_trait::async_trait;
#[cfg_attr(
    not(any(feature = "postgres", feature = "sqlx")),
    allow(unreachable_pub)
)]
pub use error::Result;
pub use error::{StoreError, StoreErrorKind};
pub(crate) use options::TimeLimits;
pub use options::{Durability, StoreOptions};
use std::sync::Arc;
use std::time::Duration;

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

/// A finished record that is live, and for how long the database keeps it
/// from now (by the database's clock).
#[derive(Debug, Clone)]
pub struct LiveRecord {
    /// The record.
    pub record: Record,
    /// Its remaining life.
    pub life: Duration,
}

/// What [`Store::execute`] did.
#[derive(Debug)]
pub enum Execution {
    /// The operation ran and finished; its answer was committed with it,
    /// and the record lives `--key-ttl` from (at least) the call.
    Ran(StoredResponse),
    /// The operation's first phase committed and stopped at a recovery
    /// point; the lease is this request's.
    Stopped(Lease),
    /// The key's operation was stopped at a recovery point and abandoned
    /// (its lease ran out): this request has taken it over.
    Resumed(Lease),
    /// The key was already recorded, finished: replay it or refuse.
    Found(LiveRecord),
    /// The key's operation was set aside for an operator (a dead letter):
    /// nothing ran. The reason, for the log.
    NeedsAttention(String),
    /// The key's operation is unfinished and was another request: refuse.
    Mismatch,
    /// Another request holds the key right now (its transaction, or its
    /// operation's lease): nothing ran.
    InUse,
    /// The operation ran and was rolled back on purpose (chaos
    /// `crash-before-commit`): nothing is stored.
    RolledBack,
    /// The operation's first phase stopped at a recovery point while its
    /// caller had [`FirstPhase::max_unfinished`] unfinished operations
    /// already: it was rolled back, nothing is stored. The cap.
    TooManyUnfinished(u32),
}

#[cfg(any(feature = "postgres", feature = "sqlx"))]
impl Execution {
    /// What a rolled-back execution answers: [`Execution::RolledBack`] for
    /// one that ran, the refusal itself for one over the cap.
    pub(crate) fn rolled_back(self) -> Self {
        match self {
            refused @ Self::TooManyUnfinished(_) => refused,
            _ => Self::RolledBack,
        }
    }
}

/// What [`Store::step_failed`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// The lease is given up: a retry or the completer goes on.
    Released,
    /// The operation was unfinished too long: it is set aside for an
    /// operator.
    SetAside,
    /// The lease was no longer the holder's: nothing was written.
    NotHeld,
}

/// What [`Store::advance`] did.
#[derive(Debug)]
pub enum Advanced {
    /// The phase finished the operation; its answer is recorded.
    Finished(StoredResponse),
    /// The phase stopped at the next recovery point; the lease goes on.
    Stopped(Lease),
    /// The lease is no longer this holder's (it ran out and another took
    /// over, or the operation finished): nothing was written.
    LeaseLost,
}

/// A message waiting in the outbox, claimed by one relay for a while.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxItem {
    /// The outbox row.
    pub id: i64,
    /// The caller whose operation wrote it: with the id, the row's key on
    /// Citus, where the outbox is sharded by caller. Empty on SQLite, and
    /// for a message written before PostgreSQL recorded it.
    pub caller: Vec<u8>,
    /// How many sends failed before.
    pub attempts: u32,
    /// Which claim of the row this is: only its holder may mark it.
    pub claim: ClaimToken,
    /// The message.
    pub message: Message,
}

/// How sending an outbox message ended, as its relay marks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery<'a> {
    /// The transport accepted the message: it is never sent again.
    Sent,
    /// Sending failed with this error: try again after this long.
    Retry(Duration, &'a str),
    /// The receiver refused the message for good with this error: it is
    /// never sent again, and waits as a dead letter.
    Refused(&'a str),
}

/// Names one claim of an outbox row: the deadline the claim wrote, as the
/// database keeps it (Unix ms on SQLite, microseconds on PostgreSQL). A row
/// is claimed again only once its deadline has passed, and then until a
/// later one, so a holder whose claim ran out never matches the row again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimToken(pub i64);

/// Whether an execution commits or, on purpose, rolls back (chaos).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionEnd {
    /// Commit, and answer once durable.
    Commit,
    /// Run everything, then roll it back: nothing is stored.
    RollBack,
}

/// What [`Store::execute`] runs: a keyed request's operation (or its first
/// phase) in the transaction that claims the key.
#[derive(Debug)]
pub struct FirstPhase<B: Backend> {
    /// The keyed request.
    pub request: IdempotentRequest,
    /// What it runs.
    pub operation: Arc<dyn Operation<B>>,
    /// Whether the transaction commits.
    pub end: TransactionEnd,
    /// How many unfinished operations (stopped at a recovery point, set
    /// aside or not) one caller may have: a first phase that stops while
    /// its caller has that many already is rolled back
    /// ([`Execution::TooManyUnfinished`]). Counted in the transaction that
    /// records the stop; `None`: no cap.
    pub max_unfinished: Option<u32>,
}

#[cfg(all(feature = "sqlite", feature = "postgres"))]
impl<B: Backend> FirstPhase<B> {
    /// The same phase with its operation seen as backend `C`'s (`Any`
    /// hands each phase to the store it holds).
    pub(crate) fn on<C: Backend>(
        self,
        as_c: impl FnOnce(Arc<dyn Operation<B>>) -> Arc<dyn Operation<C>>,
    ) -> FirstPhase<C> {
        FirstPhase {
            request: self.request,
            operation: as_c(self.operation),
            end: self.end,
            max_unfinished: self.max_unfinished,
        }
    }
}

/// A message to send, as the outbox keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Stable and unique: the outbox keeps one message per id (writing it
    /// again is a no-op), and every copy sent carries it (an e-mail's
    /// `Message-ID`, a webhook's event id).
    pub id: String,
    /// Where it goes: an address, a URL, a topic.
    pub to: String,
    /// What it is about: a subject, an event type.
    pub subject: String,
    /// Its content.
    pub body: String,
}

/// A database holding idempotency records beside the business tables, on
/// the backend `B`: [`SqliteStore`](crate::SqliteStore) is a
/// `Store<Sqlite>`, [`PostgresStore`](crate::PostgresStore) a
/// `Store<Postgres>`. Applications use a store through their
/// [`Engine`](crate::Engine); they do not implement one.
#[async_trait]
pub trait Store<B: Backend>: Send + Sync + 'static {
    /// A finished, unexpired record of `key` for `caller`, read without
    /// waiting for writers.
    async fn lookup(&self, caller: &Caller, key: &IdempotencyKey) -> Result<Option<LiveRecord>>;

    /// The request fingerprint of `key`'s operation while it is unfinished
    /// (stopped at a recovery point), read without waiting for writers:
    /// what a request under the key that cannot even be parsed is
    /// measured against.
    async fn unfinished(
        &self,
        caller: &Caller,
        key: &IdempotencyKey,
    ) -> Result<Option<Fingerprint>>;

    /// Changes whenever the store may have lost records behind a cache's
    /// back (a SQLite file replaced on disk; on PostgreSQL, the server it
    /// writes to changed: a failover); copies of another epoch are not
    /// served.
    fn epoch(&self) -> u64 {
        0
    }

    /// How long a new record lives.
    fn key_ttl(&self) -> Duration;

    /// How long a lease lasts before it must be renewed.
    fn lease(&self) -> Duration;

    /// Claims the key, runs the operation's first phase and records how it
    /// ended in one transaction; answers once the transaction is durable.
    /// A key whose operation stopped and was abandoned is taken over
    /// instead ([`Execution::Resumed`]).
    async fn execute(&self, phase: FirstPhase<B>) -> Result<Execution>;

    /// Runs the next phase of the lease's operation in a transaction of its
    /// own, if the lease is still its holder's, and records how it ended.
    async fn advance(&self, lease: &Lease, phase: Arc<dyn Operation<B>>) -> Result<Advanced>;

    /// Extends the lease to `length` from now, while its holder's step
    /// runs; false (and nothing written) when it is no longer the holder's.
    async fn renew(&self, lease: &Lease, length: Duration) -> Result<bool>;

    /// Gives the lease up at once and counts nothing: its holder will not
    /// run the step (a recovery point its release does not know), and a
    /// release that knows it may take the operation over now. False when
    /// the lease was no longer the holder's.
    async fn release(&self, lease: &Lease) -> Result<bool>;

    /// A step of the lease's operation failed with `error`: counted and
    /// kept as the operation's last error, and the lease given up at once
    /// so that a retry may go on. An operation started longer ago than the
    /// store's `attention_after` is set aside instead.
    async fn step_failed(&self, lease: &Lease, error: &str) -> Result<AfterFailure>;

    /// The lease's operation cannot finish by retrying: it is set aside for
    /// an operator with `reason` (its recovery point and state kept), and
    /// nothing resumes it. False when the lease was no longer the holder's.
    async fn set_aside(&self, lease: &Lease, reason: &str) -> Result<bool>;

    /// How many operations are set aside for an operator.
    async fn needing_attention(&self) -> Result<u64>;

    /// Up to `limit` operations stopped at a recovery point whose lease ran
    /// out, each with its point: what the completer resumes. Those stopped
    /// at one of the points in `skip` (points the calling release does not
    /// know, left to a release that does) are not listed, so that they
    /// never hide the others.
    async fn abandoned(&self, limit: u32, skip: &[String]) -> Result<Vec<Abandoned>>;

    /// Takes over an abandoned operation (its lease ran out); `None` when it
    /// is held or finished meanwhile.
    async fn take_over(&self, caller: &Caller, key: &IdempotencyKey) -> Result<Option<Lease>>;

    /// Turns at most `limit` finished records that expired by now into
    /// tombstones (the key's generation, kept for the store's
    /// `tombstone_ttl`); returns how many. It also deletes as many
    /// tombstones past their own time, and sent outbox messages older than
    /// the store's `outbox_retention`. (A record stopped at a recovery
    /// point is kept until its operation finishes, whatever its age.)
    async fn sweep(&self, limit: u32) -> Result<u64>;

    /// Up to `limit` messages due for sending, each claimed for `claim` so
    /// that no other relay sends it meanwhile.
    async fn due_messages(&self, limit: u32, claim: Duration) -> Result<Vec<OutboxItem>>;

    /// Marks how sending the message ended ([`Delivery`]). False when the
    /// item's claim is no longer the row's (it ran out and another relay
    /// claimed the message): nothing was written.
    async fn message_settled(&self, item: &OutboxItem, delivery: Delivery<'_>) -> Result<bool>;

    /// How many messages wait to be sent.
    async fn messages_waiting(&self) -> Result<u64>;

    /// How many messages the receiver refused for good.
    async fn messages_dead(&self) -> Result<u64>;

    /// Ok when the database is reachable, migrated and writable.
    async fn health(&self) -> Result<()>;

    /// Unfinished operations (running, stalled past their lease, set
    /// aside) as `filter` says, oldest first: an operator's listing, read
    /// through the index of unfinished records alone.
    async fn operations(&self, filter: &ListFilter) -> Result<Vec<OperationRecord>>;

    /// The record of `key` for `caller`, whatever its state.
    async fn operation(
        &self,
        caller: &Caller,
        key: &IdempotencyKey,
    ) -> Result<Option<OperationRecord>>;

    /// The keys whose operation's hash ([`OperationId`]) starts with
    /// `prefix`: among the unfinished operations if any matches, else
    /// among every record (a scan of the table: an operator's call, never
    /// a request's).
    async fn find_operations(&self, prefix: &[u8]) -> Result<Vec<(Caller, IdempotencyKey)>>;

    /// Unfinished operations by state, with the age of the oldest of each.
    async fn census(&self) -> Result<Census>;

    /// What the outbox holds: waiting, refused for good, the oldest wait.
    async fn outbox_census(&self) -> Result<OutboxCensus>;

    /// Takes an operation over for an operator, as `take` says: a new
    /// lease on it, and for [`Takeover::Retry`](operator::Takeover::Retry)
    /// its set-aside mark cleared. With an intervention, the action is
    /// written to the audit table (`operator_actions`) in the same
    /// transaction.
    async fn operator_take(&self, take: OperatorTake) -> Result<Taken>;

    /// An operator's settlement, in one transaction, if the lease is still
    /// its holder's: runs `phase` (which must finish the operation),
    /// records its answer, clears the set-aside mark and writes
    /// `settlement` to the audit table. `None` when the lease was lost.
    async fn settle(
        &self,
        lease: &Lease,
        phase: Arc<dyn Operation<B>>,
        settlement: &Settlement,
    ) -> Result<Option<StoredResponse>>;

    /// The audit table's rows of `operation`, oldest first.
    async fn actions(&self, operation: &OperationId) -> Result<Vec<ActionRecord>>;

    /// The `host:port` of the database server this instance writes to,
    /// when the database is a server: on PostgreSQL the one its newest
    /// connection (or health check) reached, the new primary after a
    /// failover. `None` on SQLite.
    fn database_host(&self) -> Option<String> {
        None
    }
}

/// An operation stopped at a recovery point whose lease ran out
/// ([`Store::abandoned`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abandoned {
    /// Whose.
    pub caller: Caller,
    /// Its key.
    pub key: IdempotencyKey,
    /// Where it stopped.
    pub point: String,
}

/// Callers and keys from records' stored ones; a row that does not hold
/// one (never written so) is skipped.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "sqlx"))]
pub(crate) fn stored_keys<C: AsRef<[u8]>, K: AsRef<str>>(
    rows: impl IntoIterator<Item = (C, K)>,
) -> Vec<(Caller, IdempotencyKey)> {
    rows.into_iter()
        .filter_map(|(caller, key)| {
            let caller = Caller::from_bytes(caller.as_ref().try_into().ok()?);
            let key = IdempotencyKey::parse(key.as_ref().as_bytes()).ok()?;
            Some((caller, key))
        })
        .collect()
}

/// The operations the completer may resume, from records' stored callers,
/// keys and points; a row that does not hold a caller or a key (never
/// written so) is skipped.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "sqlx"))]
pub(crate) fn stored_abandoned<C: AsRef<[u8]>, K: AsRef<str>>(
    rows: impl IntoIterator<Item = (C, K, String)>,
) -> Vec<Abandoned> {
    rows.into_iter()
        .filter_map(|(caller, key, point)| {
            let caller = Caller::from_bytes(caller.as_ref().try_into().ok()?);
            let key = IdempotencyKey::parse(key.as_ref().as_bytes()).ok()?;
            Some(Abandoned { caller, key, point })
        })
        .collect()
}

/// Unix time in milliseconds.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "sqlx"))]
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A duration in milliseconds as the stores keep it (saturating).
#[cfg(feature = "sqlite")]
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
