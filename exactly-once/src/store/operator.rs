//! What a store tells of its operations, for an operator's calls
//! ([`crate::operator`]) and the gauges ([`crate::Metrics`]): where each
//! stands, a census by state, an operator's takeover and settlement, and
//! the audit rows they leave. Plain data: the calls that use it live above
//! the store.

use crate::caller::Caller;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::operation_id::OperationId;
use crate::record::{Lease, StoredResponse};
use std::fmt;
use std::time::Duration;

/// Where an operation stands, as an operator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OperationState {
    /// Stopped at a recovery point and held: a request or the completer is
    /// running its next step under a live lease.
    Running,
    /// Stopped at a recovery point and nobody's: its lease ran out (the
    /// holder died, or its step failed and gave the lease up); the next
    /// retry of its key or the completer goes on.
    Stalled,
    /// Set aside for an operator (a dead letter): nothing resumes it, and
    /// its key answers `424 operation-needs-attention` until it is retried
    /// or settled.
    NeedsAttention,
    /// LiveRecord: its answer is recorded and replayed.
    Finished,
    /// Expired: its answer is gone; a tombstone keeps the key's generation.
    Expired,
}

impl OperationState {
    /// The states of an unfinished operation, as `list` shows them.
    pub const UNFINISHED: [Self; 3] = [Self::Running, Self::Stalled, Self::NeedsAttention];

    /// Its name in the CLI, JSON and metrics: `running`, `stalled`,
    /// `needs-attention`, `finished`, `expired`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Stalled => "stalled",
            Self::NeedsAttention => "needs-attention",
            Self::Finished => "finished",
            Self::Expired => "expired",
        }
    }

    /// The state named `name` ([`as_str`](Self::as_str)).
    pub fn parse(name: &str) -> Option<Self> {
        [
            Self::Running,
            Self::Stalled,
            Self::NeedsAttention,
            Self::Finished,
            Self::Expired,
        ]
        .into_iter()
        .find(|state| state.as_str() == name)
    }

    /// Whether the operation is unfinished.
    pub fn is_unfinished(&self) -> bool {
        Self::UNFINISHED.contains(self)
    }
}

impl fmt::Display for OperationState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which unfinished operations [`Engine::list_operations`](crate::Engine::list_operations) lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFilter {
    /// Only these states (empty: every unfinished state).
    pub states: Vec<OperationState>,
    /// Only operations started at least this long ago.
    pub older_than: Duration,
    /// At most this many, oldest first.
    pub limit: u32,
}

impl Default for ListFilter {
    /// Every unfinished operation, up to 1000, oldest first.
    fn default() -> Self {
        Self {
            states: Vec::new(),
            older_than: Duration::ZERO,
            limit: 1000,
        }
    }
}

impl ListFilter {
    /// Whether the filter lets operations in `state` through.
    pub fn admits(&self, state: OperationState) -> bool {
        state.is_unfinished() && (self.states.is_empty() || self.states.contains(&state))
    }
}

/// What the store holds of one operation (its key's record), for an
/// operator. Times are measured by the database's clock, as durations from
/// the moment it was read.
#[derive(Debug, Clone)]
pub struct OperationRecord {
    /// Whose operation.
    pub caller: Caller,
    /// Its key.
    pub key: IdempotencyKey,
    /// The request that started it.
    pub fingerprint: Fingerprint,
    /// Where it stands.
    pub state: OperationState,
    /// The recovery point it stopped at (`finished` or `expired` once it
    /// did).
    pub recovery_point: String,
    /// What resuming it needs (the application's own text), while
    /// unfinished.
    pub resume_state: Option<String>,
    /// The current (or last) lease's token: who holds it.
    pub lease_token: Option<[u8; 16]>,
    /// How long the lease has left (negative: it ran out that long ago);
    /// `None` without one.
    pub lease_left_ms: Option<i64>,
    /// How many times a step failed.
    pub attempts: u32,
    /// The last of those failures.
    pub last_error: Option<String>,
    /// Why it was set aside, while it is.
    pub attention: Option<String>,
    /// Which life of the key it is.
    pub generation: u64,
    /// The answer recorded, once finished.
    pub response: Option<StoredResponse>,
    /// How long ago it started.
    pub age: Duration,
    /// How long its record has left (a finished one; a tombstone's own
    /// time for an expired one). Meaningless while unfinished: such a
    /// record never expires.
    pub expires_in_ms: i64,
}

impl OperationRecord {
    /// The operation: what the logs print as `op` (its first 12 hex
    /// digits).
    pub fn operation(&self) -> OperationId {
        OperationId::new(&self.caller, &self.key)
    }

    /// The downstream key its steps send (see [`Lease::downstream_key`]).
    pub fn downstream_key(&self) -> String {
        self.operation()
            .downstream_key_for(&self.fingerprint, self.generation)
    }

    /// The lease holder's name: the token's first 12 hex digits.
    pub fn holder(&self) -> Option<String> {
        self.lease_token.map(|token| hex::encode(&token[..6]))
    }

    /// The operation as a [`Lease`] that holds nothing (a zero token):
    /// what [`Steps::reconcile`](crate::Steps::reconcile) reads.
    pub fn view(&self) -> Lease {
        Lease {
            caller: self.caller,
            key: self.key.clone(),
            token: [0; 16],
            point: self.recovery_point.clone(),
            state: self.resume_state.clone().unwrap_or_default(),
            fingerprint: self.fingerprint,
            generation: self.generation,
        }
    }
}

/// The stored columns of a record, as both backends read them, before
/// they are judged.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "sqlx"))]
pub(crate) struct StoredRecord {
    pub(crate) caller: Vec<u8>,
    pub(crate) key: String,
    pub(crate) fingerprint: Vec<u8>,
    pub(crate) point: String,
    pub(crate) state: Option<String>,
    pub(crate) lease_token: Option<Vec<u8>>,
    pub(crate) lease_left_ms: Option<i64>,
    pub(crate) attempts: i64,
    pub(crate) last_error: Option<String>,
    pub(crate) attention: Option<String>,
    pub(crate) generation: i64,
    pub(crate) status: Option<i64>,
    pub(crate) headers: Option<String>,
    pub(crate) body: Option<Vec<u8>>,
    pub(crate) age_ms: i64,
    pub(crate) expires_in_ms: i64,
}

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "sqlx"))]
impl StoredRecord {
    /// The record, judged; `None` when its caller, key or fingerprint
    /// cannot be read (never written so).
    pub(crate) fn judged(self) -> Option<OperationRecord> {
        use crate::record::{EXPIRED, FINISHED};
        let state = match self.point.as_str() {
            FINISHED => OperationState::Finished,
            EXPIRED => OperationState::Expired,
            _ if self.attention.is_some() => OperationState::NeedsAttention,
            _ if self.lease_left_ms.is_some_and(|left| left > 0) => OperationState::Running,
            _ => OperationState::Stalled,
        };
        let response = self.status.map(|status| {
            StoredResponse::from_stored(
                u16::try_from(status).unwrap_or(0),
                self.headers.as_deref(),
                self.body.unwrap_or_default(),
            )
        });
        Some(OperationRecord {
            caller: Caller::from_bytes(self.caller.as_slice().try_into().ok()?),
            key: IdempotencyKey::parse(self.key.as_bytes()).ok()?,
            fingerprint: Fingerprint::from_bytes(self.fingerprint.as_slice().try_into().ok()?),
            state,
            recovery_point: self.point,
            resume_state: self.state,
            lease_token: self
                .lease_token
                .and_then(|token| token.as_slice().try_into().ok()),
            lease_left_ms: self.lease_left_ms,
            attempts: u32::try_from(self.attempts).unwrap_or(0),
            last_error: self.last_error,
            attention: self.attention,
            generation: self.generation.unsigned_abs(),
            response,
            age: Duration::from_millis(self.age_ms.max(0).unsigned_abs()),
            expires_in_ms: self.expires_in_ms,
        })
    }
}

/// How many operations are unfinished, by state, and how old the oldest
/// of each is: what `/metrics` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Census {
    /// Running, stalled and needing attention, in the order of
    /// [`OperationState::UNFINISHED`].
    pub states: [StateCount; 3],
}

impl Census {
    /// The count of `state` (zero for a finished state).
    pub fn of(&self, state: OperationState) -> StateCount {
        OperationState::UNFINISHED
            .iter()
            .position(|s| *s == state)
            .map(|i| self.states[i])
            .unwrap_or_default()
    }

    /// Adds `count` operations of `state`, the oldest `oldest` old.
    pub fn add(&mut self, state: OperationState, count: u64, oldest: Duration) {
        if let Some(i) = OperationState::UNFINISHED.iter().position(|s| *s == state) {
            let entry = &mut self.states[i];
            entry.count += count;
            entry.oldest = entry.oldest.max(oldest);
        }
    }
}

/// Operations in one state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateCount {
    /// How many.
    pub count: u64,
    /// The age of the oldest (zero when none).
    pub oldest: Duration,
}

/// What the outbox holds: what `/metrics` shows of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutboxCensus {
    /// Messages not yet accepted by their transport.
    pub waiting: u64,
    /// Messages their transport refused for good.
    pub dead: u64,
    /// How long the oldest waiting message has waited (zero when none).
    pub oldest_waiting: Duration,
}

/// Why an operator takes an operation over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    /// To run it now: a stalled operation, or one set aside (which is then
    /// no longer set aside). One that is running is left alone.
    Retry,
    /// To settle it: only one set aside, which stays so until the
    /// settlement commits.
    Settle,
}

impl Takeover {
    /// Whether an operation in `state` may be taken over for this.
    pub(crate) fn takes(self, state: OperationState) -> bool {
        match self {
            Self::Retry => matches!(
                state,
                OperationState::Stalled | OperationState::NeedsAttention
            ),
            Self::Settle => state == OperationState::NeedsAttention,
        }
    }
}

/// What `Store::operator_take` is asked: whose operation, why, and who
/// acts (for the audit table; `None` writes no row).
#[derive(Debug, Clone)]
pub struct OperatorTake {
    pub(crate) caller: Caller,
    pub(crate) key: IdempotencyKey,
    pub(crate) takeover: Takeover,
    pub(crate) by: Option<Intervention>,
}

impl OperatorTake {
    /// The lease a takeover gives: a new `token` on the operation as it
    /// stood.
    pub(crate) fn lease(
        &self,
        token: [u8; 16],
        point: String,
        state: Option<String>,
        fingerprint: Fingerprint,
        generation: i64,
    ) -> Lease {
        Lease {
            caller: self.caller,
            key: self.key.clone(),
            token,
            point,
            state: state.unwrap_or_default(),
            fingerprint,
            generation: generation.unsigned_abs(),
        }
    }
}

/// An audit row's own part: what an operator did to whose operation.
pub(crate) struct Audit<'a> {
    pub(crate) caller: &'a Caller,
    pub(crate) key: &'a IdempotencyKey,
    pub(crate) action: &'static str,
    pub(crate) outcome: Option<&'a str>,
    pub(crate) status: Option<u16>,
    pub(crate) by: &'a Intervention,
}

impl<'a> Audit<'a> {
    /// An operator's takeover, to retry the operation.
    pub(crate) fn retry(take: &'a OperatorTake, by: &'a Intervention) -> Self {
        Self {
            caller: &take.caller,
            key: &take.key,
            action: "retry",
            outcome: None,
            status: None,
            by,
        }
    }

    /// An operator's settlement, answered with `status`.
    pub(crate) fn settle(lease: &'a Lease, settlement: &'a Settlement, status: u16) -> Self {
        Self {
            caller: &lease.caller,
            key: &lease.key,
            action: "settle",
            outcome: Some(&settlement.outcome),
            status: Some(status),
            by: &settlement.by,
        }
    }
}

/// What `Store::operator_take` did.
#[derive(Debug)]
pub enum Taken {
    /// The operator holds the operation now.
    Lease(Lease),
    /// No record of the key.
    Missing,
    /// The operation is not in a state this takeover takes (finished,
    /// expired; running, for a retry; not set aside, for a settlement).
    Refused(OperationState),
}

/// Who acts on an operation, and why: written to the audit table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intervention {
    /// Who: a person's name (`$USER` by default in the shop's CLI), as
    /// they give it.
    pub operator: String,
    /// Why, in their words.
    pub reason: Option<String>,
    /// The operating-system account that ran the action (the process's
    /// real user), recorded beside `operator`, which is free text.
    pub os_user: Option<String>,
}

impl Intervention {
    /// An action by `operator`, with no reason given.
    pub fn by(operator: impl Into<String>) -> Self {
        Self {
            operator: operator.into(),
            reason: None,
            os_user: None,
        }
    }
}

/// An operator's final answer for an operation set aside: which outcome
/// (a name the application's [`Steps::settle`](crate::Steps::settle)
/// knows, such as the shop's `charged` and `not-charged`), why, and by
/// whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// The application's name of what happened.
    pub outcome: String,
    /// Who settles, and why (the reason is required).
    pub by: Intervention,
    /// What the operator found outside (a provider's charge id, say), when
    /// the application needs it.
    pub reference: Option<String>,
    /// Settle on the operator's word alone, without checking the service
    /// outside (it cannot be reached, or has forgotten the operation).
    pub unverified: bool,
}

/// One row of the audit table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRecord {
    /// When, Unix ms (wall clock).
    pub at_ms: i64,
    /// `retry` or `settle`.
    pub action: String,
    /// The settlement's outcome.
    pub outcome: Option<String>,
    /// The status of the answer a settlement recorded.
    pub status: Option<u16>,
    /// The operator's reason.
    pub reason: Option<String>,
    /// Who, as they named themselves.
    pub operator: String,
    /// The operating-system account that ran it (`None` in rows written
    /// before it was recorded).
    pub os_user: Option<String>,
}

/// Whether `caller` and `key` are the operation whose hash starts with
/// `prefix` (SQLite's search; PostgreSQL's is in SQL).
#[cfg(feature = "sqlite")]
pub(crate) fn matches(prefix: &[u8], caller: &Caller, key: &IdempotencyKey) -> bool {
    OperationId::new(caller, key).as_bytes().starts_with(prefix)
}

/// Why an application will not settle an operation as asked, or cannot
/// show what the service outside holds for it: for the operator, who may
/// then settle otherwise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);
