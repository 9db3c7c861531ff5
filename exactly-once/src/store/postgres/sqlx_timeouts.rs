//! How long the engine on sqlx waits: for a connection of the
//! application's pool, and for the server's answers. sqlx bounds neither
//! (its pool waits 30 s by default; a statement waits for as long as TCP
//! keeps a silent connection), so a hung primary would hold requests.

use std::time::Duration;

/// How long a request waits for one of the pool's connections (sqlx's own
/// default is 30 s); as the store's own pool on tokio-postgres.
pub(super) const POOL_WAIT: Duration = Duration::from_secs(3);
/// How long a statement of the engine's, a phase of your operation (its
/// statements together) and a COMMIT may wait for the server: a hung
/// primary (stopped, its connections open and silent) is answered 503
/// within seconds, not left to TCP. As tokio-postgres's
/// `response_timeout` (6 s), longer than `lock_timeout` (5 s), the
/// longest a healthy server makes a statement of the engine wait.
pub(super) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(6);

/// `work` within [`RESPONSE_TIMEOUT`]; past it, the error a broken
/// connection gives (sorted as one: 503, or an unknown outcome for a
/// COMMIT).
pub(super) async fn answered<T>(
    work: impl std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
) -> std::result::Result<T, sqlx::Error> {
    tokio::time::timeout(RESPONSE_TIMEOUT, work)
        .await
        .unwrap_or_else(|_| Err(silent_server()))
}

/// The error of a server that owed an answer for [`RESPONSE_TIMEOUT`].
pub(super) fn silent_server() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("the server owed an answer for {RESPONSE_TIMEOUT:?}"),
    ))
}
