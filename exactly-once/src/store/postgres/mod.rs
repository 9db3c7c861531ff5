//! The PostgreSQL backend: how the server runs as many instances.
//!
//! Each phase is one transaction on a pooled connection
//! (`protocol::execute`):
//!
//! 1. the key is **claimed** with `INSERT … ON CONFLICT (caller, key) DO
//!    UPDATE … WHERE` the existing record is finished and expired (an
//!    expired record counts as absent). If another transaction (in this
//!    process or another instance) holds the same key, PostgreSQL makes
//!    this statement wait for that transaction's outcome: committed, the
//!    claim finds its record and replays it (or answers 422 for another
//!    request); rolled back, the claim succeeds and the request runs.
//!    Waiting longer than `lock_timeout` answers 409
//!    `idempotency-key-in-use` with `Retry-After`;
//! 2. the business change runs in the same transaction;
//! 3. the response (or the recovery point and a lease) is written into the
//!    claimed record, and the transaction commits (`synchronous_commit=on`
//!    with `--durability full`) before the answer leaves.
//!
//! An operation whose rows and answer are made before the database is
//! touched can skip the transaction: its claim, rows and answer are one
//! statement (`one_statement`), and the requests that
//! arrive together share one, a row each (`batch`: group commit, as
//! SQLite's writer does it). Every expiry and lease is judged by the
//! database's clock (`now()`), so instances with wrong clocks still agree.
//!
//! The files, by concept:
//!
//! - written once for both drivers: `protocol` (the claim and a first
//!   phase), `leases` (later phases under a lease), `records` (reads and
//!   sweeps outside a phase), `outbox`, `operator` (an operator's listing,
//!   takeover and settlement), `schema` (migrations under an advisory
//!   lock), `citus` (placing the tables on a Citus coordinator, and its
//!   router statements), over `statement` (`Exec`, `Statement`, `Driver`),
//!   `value` (the values bound and read), `error` (sorting a driver's
//!   errors), `session` (the settings a transaction runs under),
//!   `server_seen` (the server reached, and its changes) and `clock`;
//! - tokio-postgres (feature `postgres`): `on_tokio` (`PostgresStore`),
//!   `conn` and `sql` (what your statements run on), `one_statement` and
//!   `batch` (one-statement first phases, many to a statement),
//!   `url_params` (libpq's URL parameters), `sslmode`, `connect` (the
//!   connector), `connection_driver` (each connection's bound on a silent
//!   server, and a commit whose wait for the synchronous standby was
//!   cancelled), `tls_verifier`, `wire` (the socket and the tap that sees a
//!   server owe an answer);
//! - sqlx (feature `sqlx`, standalone): `on_sqlx` (`SqlxStore`),
//!   `sqlx_commit` (the same cancelled wait, seen through sqlx) and
//!   `sqlx_timeouts` (a hung primary answered within seconds).

/// The [`Store`] of a PostgreSQL driver: the calls given, and every call
/// that is a statement or two on a connection of the pool, the same on
/// every driver (each store has `conn()`, a pooled [`Conn`],
/// `lifetimes` and `citus`).
macro_rules! store_on_a_pool {
    (impl Store<$backend:ty> for $store:ty { $($calls:tt)* }) => {
        #[async_trait::async_trait]
        impl $crate::store::Store<$backend> for $store {
            $($calls)*

            async fn lookup(
                &self,
                caller: &$crate::caller::Caller,
                key: &$crate::key::IdempotencyKey,
            ) -> $crate::store::Result<Option<$crate::store::LiveRecord>> {
                records::lookup(&self.conn().await?, caller, key).await
            }

            async fn unfinished(
                &self,
                caller: &$crate::caller::Caller,
                key: &$crate::key::IdempotencyKey,
            ) -> $crate::store::Result<Option<$crate::fingerprint::Fingerprint>> {
                records::unfinished(&self.conn().await?, caller, key).await
            }

            fn key_ttl(&self) -> std::time::Duration {
                self.lifetimes.key_ttl
            }

            fn lease(&self) -> std::time::Duration {
                self.lifetimes.lease
            }

            async fn renew(
                &self,
                lease: &$crate::record::Lease,
                length: std::time::Duration,
            ) -> $crate::store::Result<bool> {
                leases::renew(&self.conn().await?, lease, length.as_secs_f64()).await
            }

            async fn release(&self, lease: &$crate::record::Lease) -> $crate::store::Result<bool> {
                leases::release(&self.conn().await?, lease).await
            }

            async fn step_failed(
                &self,
                lease: &$crate::record::Lease,
                error: &str,
            ) -> $crate::store::Result<$crate::store::AfterFailure> {
                let conn = self.conn().await?;
                let on_citus = self.citus.ask(&conn).await?;
                leases::step_failed(&conn, lease, error, self.clock(), on_citus).await
            }

            async fn set_aside(
                &self,
                lease: &$crate::record::Lease,
                reason: &str,
            ) -> $crate::store::Result<bool> {
                leases::set_aside(&self.conn().await?, lease, reason).await
            }

            async fn needing_attention(&self) -> $crate::store::Result<u64> {
                records::needing_attention(&self.conn().await?).await
            }

            async fn abandoned(
                &self,
                limit: u32,
                skip: &[String],
            ) -> $crate::store::Result<Vec<$crate::store::Abandoned>> {
                records::abandoned(&self.conn().await?, limit, skip).await
            }

            async fn take_over(
                &self,
                caller: &$crate::caller::Caller,
                key: &$crate::key::IdempotencyKey,
            ) -> $crate::store::Result<Option<$crate::record::Lease>> {
                let lease_secs = self.clock().lease_secs;
                protocol::take_over(&self.conn().await?, caller, key, lease_secs).await
            }

            async fn sweep(&self, limit: u32) -> $crate::store::Result<u64> {
                let (clock, retention) = (self.clock(), self.lifetimes.outbox_retention);
                let conn = self.conn().await?;
                let on_citus = self.citus.ask(&conn).await?;
                records::sweep(&conn, clock, limit, retention, on_citus).await
            }

            async fn due_messages(
                &self,
                limit: u32,
                claim: std::time::Duration,
            ) -> $crate::store::Result<Vec<$crate::store::OutboxItem>> {
                let conn = self.conn().await?;
                let on_citus = self.citus.ask(&conn).await?;
                outbox::claim(&conn, limit, claim, on_citus).await
            }

            async fn message_settled(
                &self,
                item: &$crate::store::OutboxItem,
                delivery: $crate::store::Delivery<'_>,
            ) -> $crate::store::Result<bool> {
                outbox::settle(&self.conn().await?, item, delivery).await
            }

            async fn messages_waiting(&self) -> $crate::store::Result<u64> {
                outbox::waiting(&self.conn().await?).await
            }

            async fn messages_dead(&self) -> $crate::store::Result<u64> {
                outbox::dead(&self.conn().await?).await
            }

            async fn operations(
                &self,
                filter: &$crate::operator::ListFilter,
            ) -> $crate::store::Result<Vec<$crate::operator::OperationRecord>> {
                operator::operations(&self.conn().await?, filter).await
            }

            async fn operation(
                &self,
                caller: &$crate::caller::Caller,
                key: &$crate::key::IdempotencyKey,
            ) -> $crate::store::Result<Option<$crate::operator::OperationRecord>> {
                operator::operation(&self.conn().await?, caller, key).await
            }

            async fn find_operations(
                &self,
                prefix: &[u8],
            ) -> $crate::store::Result<Vec<($crate::caller::Caller, $crate::key::IdempotencyKey)>> {
                operator::find(&self.conn().await?, prefix).await
            }

            async fn census(&self) -> $crate::store::Result<$crate::operator::Census> {
                operator::census(&self.conn().await?).await
            }

            async fn outbox_census(&self) -> $crate::store::Result<$crate::operator::OutboxCensus> {
                operator::outbox_census(&self.conn().await?).await
            }

            async fn actions(
                &self,
                operation: &$crate::operation_id::OperationId,
            ) -> $crate::store::Result<Vec<$crate::operator::ActionRecord>> {
                operator::actions(&self.conn().await?, operation).await
            }
        }
    };
}

#[cfg(feature = "postgres")]
mod batch;
mod citus;
mod clock;
#[cfg(feature = "postgres")]
mod conn;
#[cfg(feature = "postgres")]
pub(crate) mod connect;
#[cfg(feature = "postgres")]
mod connection_driver;
mod error;
mod leases;
#[cfg(feature = "sqlx")]
pub(crate) mod on_sqlx;
#[cfg(feature = "postgres")]
mod on_tokio;
#[cfg(feature = "postgres")]
mod one_statement;
mod operator;
mod outbox;
mod protocol;
mod records;
mod schema;
mod server_seen;
mod session;
#[cfg(feature = "postgres")]
mod sql;
#[cfg(feature = "sqlx")]
mod sqlx_commit;
#[cfg(feature = "sqlx")]
mod sqlx_timeouts;
#[cfg(feature = "postgres")]
mod sslmode;
mod statement;
#[cfg(feature = "postgres")]
mod tls_verifier;
#[cfg(feature = "postgres")]
mod url_params;
mod value;
#[cfg(feature = "postgres")]
mod wire;

#[cfg(feature = "postgres")]
pub use conn::{Conn, Index, Param, PgRow};
#[cfg(feature = "postgres")]
pub use deadpool_postgres::Transaction;
pub use error::{classify, DbError};
#[cfg(feature = "postgres")]
pub use on_tokio::{Postgres, PostgresStore};
#[cfg(feature = "postgres")]
pub use one_statement::{Insert, OneStatement, Shape, Values};
#[cfg(feature = "postgres")]
pub use sql::Sql;
