//! The times one call of a PostgreSQL store works with.

use super::session::Session;
use crate::store::TimeLimits;
use std::time::Duration;

/// The times one call works with: the process's clock only for the
/// `created` seconds of new rows; every expiry and lease is the database's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    /// Unix milliseconds, this process's clock.
    pub(super) now_ms: i64,
    /// `--key-ttl`, seconds.
    pub(super) ttl_secs: f64,
    /// `--operation-lease`, seconds.
    pub(super) lease_secs: f64,
    /// How long after its start a failing operation is set aside, seconds.
    pub(super) attention_after_secs: f64,
    /// How long a tombstone is kept, seconds.
    pub(super) tombstone_secs: f64,
    /// Where the transactions' settings come from.
    pub(super) session: Session,
}

impl Clock {
    /// The clock of a phase of an operation with its own TTL (`key_ttl`),
    /// when it has one: its records live that long.
    pub(super) fn for_operation(mut self, key_ttl: Option<Duration>) -> Self {
        if let Some(ttl) = key_ttl {
            self.ttl_secs = ttl.as_secs_f64();
        }
        self
    }

    /// A call's clock with the store's lifetimes and session.
    pub(super) fn new(now_ms: i64, lifetimes: &TimeLimits, session: Session) -> Self {
        Self {
            now_ms,
            ttl_secs: lifetimes.key_ttl.as_secs_f64(),
            lease_secs: lifetimes.lease.as_secs_f64(),
            attention_after_secs: lifetimes.attention_after.as_secs_f64(),
            tombstone_secs: lifetimes.tombstone_ttl.as_secs_f64(),
            session,
        }
    }
}
