//! One `enqueue` for every backend: a message written to the outbox from
//! inside an operation's phase, in the transaction the phase was given.
//! Each driver's transaction says how ([`Enqueue`], sealed): at once on
//! SQLite, a future on PostgreSQL.

use crate::backend::RunContext;
use crate::store::Message;

/// A transaction an operation writes in, and how a message is written
/// there: `&rusqlite::Connection` (the result at once), a tokio-postgres
/// `&Transaction` and sqlx's `&mut PgConnection` (a future). Sealed: the
/// drivers are this crate's.
pub trait Enqueue<'a>: sealed::Sealed {
    /// What writing returns: as the backend's operations return
    /// (`rusqlite::Result<()>` on SQLite), or a future of a `Result<()>`.
    type Written;

    /// Writes `message` in this transaction (see [`enqueue`]).
    fn enqueue(self, message: &'a Message, at: &RunContext<'_>) -> Self::Written;
}

pub(crate) mod sealed {
    /// Only this crate's drivers write messages.
    pub trait Sealed {}
}

/// Writes `message` to the outbox from inside an operation's phase, in its
/// transaction `tx`, due at once: it is sent if and only if the phase
/// commits. A second message with the same [`Message::id`] is never
/// written. On SQLite `enqueue(conn, &message, at)?`; on PostgreSQL and
/// sqlx `enqueue(tx, &message, at).await?`.
pub fn enqueue<'a, T: Enqueue<'a>>(tx: T, message: &'a Message, at: &RunContext<'_>) -> T::Written {
    tx.enqueue(message, at)
}
