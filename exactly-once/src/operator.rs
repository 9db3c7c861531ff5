//! What an operator does with operations, on any backend and for any
//! application: list the unfinished ones (running, stalled past their
//! lease, set aside for an operator), look one up by its `op` (the short
//! hash the logs print) or by its caller and key, run one now (what the
//! completer would do, also for one set aside), and settle one set aside
//! with a final answer, recorded in the audit table `operator_actions`.
//!
//! The application says what a settlement records and what the service
//! outside holds for an operation ([`Steps::settle`], [`Steps::reconcile`]),
//! or why it will not settle it so ([`Refusal`]);
//! the engine takes the operation, runs that phase under the lease like
//! any other, and writes the audit row in the same transaction.
//!
//! ```no_run
//! # async fn demo(engine: exactly_once::Engine<exactly_once::Sqlite>) -> Result<(), Box<dyn std::error::Error>> {
//! use exactly_once::operator::{Intervention, ListFilter, OperationRef};
//!
//! for op in engine.list_operations(&ListFilter::default()).await? {
//!     println!("{} {} {}", op.operation(), op.state, op.recovery_point);
//! }
//! let which = OperationRef::parse("3fa2c4d5e6f7")?;
//! let retried = engine.retry_operation(&which, &Intervention::by("ada")).await?;
//! # let _ = retried; Ok(()) }
//! ```
//!
//! [`Steps::settle`]: crate::Steps::settle
//! [`Steps::reconcile`]: crate::Steps::reconcile

use crate::backend::Backend;
use crate::caller::Caller;
use crate::engine::Engine;
use crate::error::{Chain, Error};
use crate::faults::NoFaults;
use crate::flow::steps::{self, Ended};
use crate::key::IdempotencyKey;
use crate::operation_id::OperationId;
use crate::record::{Lease, StoredResponse};
pub use crate::store::operator::{
    ActionRecord, Census, Intervention, ListFilter, OperationRecord, OperationState, OperatorTake,
    OutboxCensus, Refusal, Settlement, StateCount, Taken, Takeover,
};
use crate::store::StoreError;
use std::fmt;

/// An operation named by an operator: its `op` (at least the 12 hex
/// digits the logs print, up to the whole 64), or its caller and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperationRef {
    /// The first bytes of the operation's hash.
    Id(Vec<u8>),
    /// The caller (hashed as the application hashes it) and the key.
    Key(Caller, IdempotencyKey),
}

impl OperationRef {
    /// The operation whose hash starts with `op`: 12 to 64 hex digits, an
    /// even number.
    pub fn parse(op: &str) -> Result<Self, OperatorError> {
        let op = op.trim().to_ascii_lowercase();
        if !(12..=64).contains(&op.len()) || op.len() % 2 != 0 {
            return Err(OperatorError::BadId(op));
        }
        hex::decode(&op)
            .map(Self::Id)
            .map_err(|_| OperatorError::BadId(op))
    }
}

impl fmt::Display for OperationRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Id(prefix) => f.write_str(&hex::encode(prefix)),
            Self::Key(caller, key) => write!(
                f,
                "{} (caller {caller}, key {key})",
                OperationId::new(caller, key)
            ),
        }
    }
}

/// What an operator's call could not do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// Not 12 to 64 hex digits.
    #[error("{0:?} is not an operation: give the `op` of the logs (12 to 64 hex digits), or a caller token and a key")]
    BadId(String),
    /// No record of it.
    #[error("no operation {0} in the database")]
    NotFound(String),
    /// More than one operation starts with those digits.
    #[error("{count} operations start with {op}: give more of its digits")]
    Ambiguous {
        /// The digits given.
        op: String,
        /// How many matched.
        count: usize,
    },
    /// Not in a state the call acts on.
    #[error("operation {op} is {state}: {what}")]
    WrongState {
        /// The operation.
        op: OperationId,
        /// Its state.
        state: OperationState,
        /// What the call needs.
        what: &'static str,
    },
    /// Another holder took the operation meanwhile.
    #[error("operation {0} was taken over by another holder meanwhile; look again")]
    LeaseLost(OperationId),
    /// Stopped at a recovery point this release does not know (a later
    /// release's, during a rolling deploy): nothing ran.
    #[error("operation {op} waits at {point:?}, which this release does not know: retry it with the release that stopped it there")]
    UnknownPoint {
        /// The operation.
        op: OperationId,
        /// Its recovery point.
        point: String,
    },
    /// The application refused the settlement.
    #[error("not settled: {0}")]
    Declined(#[from] Refusal),
    /// The database could not answer.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How [`Engine::retry_operation`] ended.
#[derive(Debug)]
pub enum Retried {
    /// It finished: this answer is recorded and replayed to its key.
    Finished(StoredResponse),
    /// Its step failed again: it waits at its recovery point (stalled), or
    /// was set aside again ([`Error::OperationNeedsAttention`]).
    Failed(Error),
}

impl<B: Backend> Engine<B> {
    /// Unfinished operations, oldest first, as `filter` says.
    pub async fn list_operations(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<OperationRecord>, StoreError> {
        self.0.store.operations(filter).await
    }

    /// The operation `which` names, whatever its state.
    pub async fn find_operation(
        &self,
        which: &OperationRef,
    ) -> Result<OperationRecord, OperatorError> {
        let (caller, key) = match which {
            OperationRef::Key(caller, key) => (*caller, key.clone()),
            OperationRef::Id(prefix) => {
                let mut found = self.0.store.find_operations(prefix).await?;
                match found.len() {
                    0 => return Err(OperatorError::NotFound(which.to_string())),
                    1 => found.remove(0),
                    count => {
                        return Err(OperatorError::Ambiguous {
                            op: which.to_string(),
                            count,
                        })
                    }
                }
            }
        };
        self.0
            .store
            .operation(&caller, &key)
            .await?
            .ok_or_else(|| OperatorError::NotFound(which.to_string()))
    }

    /// Every operator action on `record`'s operation, oldest first.
    pub async fn operator_actions(
        &self,
        record: &OperationRecord,
    ) -> Result<Vec<ActionRecord>, StoreError> {
        self.0.store.actions(&record.operation()).await
    }

    /// What the service outside holds for `record`'s operation, as the
    /// application's [`Steps::reconcile`](crate::Steps::reconcile) tells
    /// it (`None`: nothing to show).
    pub async fn reconcile(
        &self,
        record: &OperationRecord,
    ) -> Result<Option<serde_json::Value>, Refusal> {
        self.0.steps.reconcile(&record.view()).await
    }

    /// Runs the operation `which` names now, as the completer would: takes
    /// it over (a stalled one, or one set aside, which is no longer set
    /// aside from then on; never one running) and runs its steps to the
    /// end, recording the action in the audit table.
    pub async fn retry_operation(
        &self,
        which: &OperationRef,
        by: &Intervention,
    ) -> Result<Retried, OperatorError> {
        let (op, lease) = self.take(which, Takeover::Retry, Some(by)).await?;
        tracing::info!(%op, point = lease.point.as_str(), operator = by.operator.as_str(), "an operator resumes the operation");
        match steps::run_to_end(self, lease, &NoFaults).await {
            Ok(Ended::Finished(response)) => Ok(Retried::Finished(response)),
            Ok(Ended::LeaseLost) => Err(OperatorError::LeaseLost(op)),
            Ok(Ended::NotKnown(point)) => Err(OperatorError::UnknownPoint { op, point }),
            Err(e) => {
                tracing::warn!(%op, error = %Chain(&e), "the operator's retry failed");
                Ok(Retried::Failed(e))
            }
        }
    }

    /// Records `settlement` as the final answer of the operation `which`
    /// names, which must be set aside for an operator: the application's
    /// [`Steps::settle`](crate::Steps::settle) makes the phase that records
    /// it (it may refuse: an outcome the service outside contradicts), and
    /// that phase, the answer and the audit row commit together. From then
    /// on its key replays that answer. The answer.
    pub async fn settle_operation(
        &self,
        which: &OperationRef,
        settlement: &Settlement,
    ) -> Result<StoredResponse, OperatorError> {
        let (op, lease) = self.take(which, Takeover::Settle, None).await?;
        let phase = self.0.steps.settle(&lease, settlement).await?;
        match self.0.store.settle(&lease, phase, settlement).await? {
            Some(response) => {
                tracing::info!(%op, outcome = settlement.outcome.as_str(), status = response.status,
                    operator = settlement.by.operator.as_str(), "an operator settled the operation");
                Ok(response)
            }
            None => Err(OperatorError::LeaseLost(op)),
        }
    }

    /// Finds the operation `which` names and takes it over for `takeover`
    /// (the action written to the audit table when `by` is given).
    async fn take(
        &self,
        which: &OperationRef,
        takeover: Takeover,
        by: Option<&Intervention>,
    ) -> Result<(OperationId, Lease), OperatorError> {
        let record = self.find_operation(which).await?;
        let op = record.operation();
        let take = OperatorTake {
            caller: record.caller,
            key: record.key.clone(),
            takeover,
            by: by.cloned(),
        };
        match self.0.store.operator_take(take).await? {
            Taken::Lease(lease) => Ok((op, lease)),
            Taken::Missing => Err(OperatorError::NotFound(which.to_string())),
            Taken::Refused(state) => Err(OperatorError::WrongState {
                op,
                state,
                what: match takeover {
                    Takeover::Retry => "only a stalled operation, or one set aside, is retried",
                    Takeover::Settle => {
                        "only an operation set aside for an operator is settled \
                         (retry a stalled one)"
                    }
                },
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(feature = "sqlite")]
    use crate::store::operator::matches;

    #[test]
    fn an_operation_is_named_by_at_least_the_digits_the_logs_print() {
        let caller = Caller::of("ada-token-0123456789");
        let key = IdempotencyKey::parse(b"8e03c5a2").unwrap();
        let op = OperationId::new(&caller, &key);
        let OperationRef::Id(prefix) = OperationRef::parse(&op.to_string()).unwrap() else {
            panic!("an id")
        };
        assert!(matches(&prefix, &caller, &key));
        let other = IdempotencyKey::parse(b"8e03c5a3").unwrap();
        assert!(!matches(&prefix, &caller, &other));
        let whole = hex::encode(op.as_bytes()).to_uppercase();
        assert!(OperationRef::parse(&whole).is_ok(), "case does not matter");
        for bad in ["3fa2c4", "3fa2c4d5e6f7a", "zzzzzzzzzzzz", &"ab".repeat(33)] {
            assert!(OperationRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn states_have_one_name_each() {
        for state in [
            OperationState::Running,
            OperationState::Stalled,
            OperationState::NeedsAttention,
            OperationState::Finished,
            OperationState::Expired,
        ] {
            assert_eq!(OperationState::parse(state.as_str()), Some(state));
        }
        let filter = ListFilter {
            states: vec![OperationState::Stalled],
            ..ListFilter::default()
        };
        assert!(filter.admits(OperationState::Stalled));
        assert!(!filter.admits(OperationState::Running));
        assert!(!ListFilter::default().admits(OperationState::Finished));
    }
}
