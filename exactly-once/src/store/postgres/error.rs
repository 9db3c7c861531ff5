//! A driver's error, and how the engine sorts it: what a retry may fix
//! (503), what it will not, and a commit whose outcome is unknown.

use crate::store::StoreError;

/// SQLSTATE of a statement that gave up waiting for a lock
/// (`lock_timeout`).
pub(crate) const LOCK_NOT_AVAILABLE: &str = "55P03";

/// A driver's error, as the protocol sorts it ([`classify`]).
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// tokio-postgres's.
    #[cfg(feature = "postgres")]
    #[error(transparent)]
    Tokio(#[from] tokio_postgres::Error),
    /// sqlx's.
    #[cfg(feature = "sqlx")]
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
    /// A value that did not decode or encode.
    #[error("{0}")]
    Value(String),
}

impl DbError {
    /// The server's SQLSTATE (five characters), when the server answered
    /// with one.
    pub fn code(&self) -> Option<String> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Tokio(e) => e.code().map(|state| state.code().to_owned()),
            #[cfg(feature = "sqlx")]
            Self::Sqlx(e) => e
                .as_database_error()
                .and_then(|db| db.code())
                .map(|code| code.into_owned()),
            Self::Value(_) => None,
        }
    }

    /// Whether the statement's connection (its backend) was lost or never
    /// reached: the server said nothing about the statement itself.
    pub fn connection_lost(&self) -> bool {
        match self {
            #[cfg(feature = "postgres")]
            Self::Tokio(e) => e.code().is_none(),
            #[cfg(feature = "sqlx")]
            Self::Sqlx(e) => matches!(
                e,
                sqlx::Error::Io(_)
                    | sqlx::Error::Tls(_)
                    | sqlx::Error::Protocol(_)
                    | sqlx::Error::PoolTimedOut
                    | sqlx::Error::PoolClosed
                    | sqlx::Error::WorkerCrashed
            ),
            Self::Value(_) => false,
        }
    }
}

/// Sorts PostgreSQL errors: what a retry may fix (503) and what it will
/// not. Your reads and operations can use it for theirs.
pub fn classify(e: impl Into<DbError>) -> StoreError {
    let e = e.into();
    let retryable = match e.code() {
        // No SQLSTATE: the connection broke, or the server is gone.
        None => e.connection_lost(),
        // connection exception, insufficient resources, operator
        // intervention (shutdown), transaction rollback (serialisation,
        // deadlock), lock not available.
        Some(state) => {
            matches!(&state[..2], "08" | "53" | "57" | "40")
                || state == LOCK_NOT_AVAILABLE
                || citus_node_unreachable(&e)
                || backend_lost(&e)
        }
    };
    StoreError::sorted(retryable, "PostgreSQL", e)
}

/// Sorts an error of a statement that commits (`COMMIT`, or a statement
/// that commits on its own, `what`). When the backend was lost (no
/// SQLSTATE: the connection broke; class 08, connection exception; class
/// 57, operator intervention), the commit may have happened: a backend
/// killed while its COMMIT waits for a synchronous standby has committed
/// locally and answers 57P01 (a Citus coordinator whose postmaster died
/// says so in words: [`postmaster_died`]). That is outcome unknown. So is a Citus
/// coordinator's word that a worker's connection failed during the commit
/// ([`citus_commit_failed`]): the worker may have committed. Any other
/// error is the server's refusal, and nothing was committed.
pub(crate) fn classify_commit(e: impl Into<DbError>, what: &str) -> StoreError {
    let e = e.into();
    if backend_lost(&e) {
        StoreError::outcome_unknown(format!("the database backend was lost during {what}"))
            .caused_by(e)
    } else if citus_commit_failed(&e) {
        StoreError::outcome_unknown(format!("a Citus worker was lost during {what}")).caused_by(e)
    } else {
        classify(e)
    }
}

/// True when `e` says the statement's backend was lost (see
/// [`classify_commit`]), or is about to be ([`postmaster_died`]).
pub(crate) fn backend_lost(e: &DbError) -> bool {
    match e.code() {
        None => e.connection_lost(),
        Some(state) => {
            matches!(&state[..2], "08" | "57") || postmaster_died(e) || server_panicked(e)
        }
    }
}

/// Whether the server said PANIC: PostgreSQL is crashing, every backend
/// with it, and restarts with crash recovery. Seen when a WAL write fails
/// at a COMMIT ("could not write to log file …: Input/output error", as
/// the disk goes in a power cut): whether the commit record reached the
/// disk is unknown, as with a backend lost.
fn server_panicked(e: &DbError) -> bool {
    match e {
        #[cfg(feature = "postgres")]
        DbError::Tokio(e) => tokio_panicked(e),
        #[cfg(feature = "sqlx")]
        DbError::Sqlx(e) => e
            .as_database_error()
            .and_then(|db| db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
            .is_some_and(|db| db.severity() == sqlx::postgres::PgSeverity::Panic),
        DbError::Value(_) => false,
    }
}

/// [`server_panicked`] on tokio-postgres' own error (group commit's
/// statements have no [`DbError`]).
#[cfg(feature = "postgres")]
pub(crate) fn tokio_panicked(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().and_then(|db| db.parsed_severity())
        == Some(tokio_postgres::error::Severity::Panic)
}

/// Whether `e` is a Citus coordinator's backend finding its own
/// postmaster dead while it waited on a worker (the server crashed or was
/// stopped at once): an internal error with these words, sent just before
/// the backend exits. The database is going away, as with a 57P01; the
/// transaction is lost with it, and a COMMIT waiting then may have
/// reached the worker.
fn postmaster_died(e: &DbError) -> bool {
    server_message(e).is_some_and(|message| message == "postmaster was shut down, exiting")
}

/// `None` when the statement gave up waiting for a lock another
/// transaction holds (`lock_timeout`): the key is in use.
pub(crate) fn in_use_or<T>(result: Result<T, DbError>) -> crate::store::Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => Ok(None),
        Err(e) => Err(classify(e)),
    }
}

/// Whether `e` is Citus saying it could not reach the node that holds the
/// statement's shard (a worker down, or restarting): the store is
/// unavailable for this caller, as a server that is down would be, and the
/// request is answered 503 with `Retry-After`, not 500. Citus reports it
/// as an internal error, with these words.
fn citus_node_unreachable(e: &DbError) -> bool {
    server_message(e).is_some_and(|message| {
        message.starts_with("failure on connection marked as essential")
            || message.starts_with("connection to the remote node")
    })
}

/// A Citus coordinator's COMMIT whose worker connection failed while the
/// worker was committing (`ErrorIfPostCommitFailedShardPlacements`, an
/// internal error with these words): the worker may have committed
/// before it was lost, as a backend lost during COMMIT may have.
fn citus_commit_failed(e: &DbError) -> bool {
    server_message(e).is_some_and(|message| {
        message.starts_with("could not commit transaction for shard")
            || message.starts_with("failure on connection marked as essential")
            || message.starts_with("connection to the remote node")
    })
}

/// The server's own message of `e`, when the server sent one.
fn server_message(e: &DbError) -> Option<String> {
    match e {
        #[cfg(feature = "postgres")]
        DbError::Tokio(e) => e.as_db_error().map(|db| db.message().to_owned()),
        #[cfg(feature = "sqlx")]
        DbError::Sqlx(e) => e.as_database_error().map(|db| db.message().to_owned()),
        DbError::Value(_) => None,
    }
}
