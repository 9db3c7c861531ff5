//! The test kit every harness of this workspace starts its processes with:
//! the real `server` binary on port 0, a fresh SQLite file or PostgreSQL
//! database, killed on drop, restartable on the same address, and talked to
//! over HTTP only. Tests never link the server as a library, so reshaping
//! `server/src` cannot break them.
//!
//! # Layout
//!
//! - [`binary`]: where a workspace binary is (`SERVER_BIN`, else next to the
//!   running test in the target folder).
//! - [`process`]: one such binary as a child process: `--listen`, the
//!   `listening on http://ADDR` line, its log file, signals, exit, restart
//!   on the same address, SIGKILL on drop. Generic over the binary: a
//!   wrapper for another one (the payment provider simulator) is a few lines.
//! - [`killed_start`]: a start killed on purpose, a while after its spawn
//!   or as its log shows some text, and what it had got to (starting,
//!   listening, or exited on its own).
//! - [`database`]: a fresh SQLite file, or a fresh PostgreSQL database when
//!   `TEST_POSTGRES_URL` names a server; SQL behind the server's back.
//! - [`server`]: the `server` process with its flags, database and page.
//! - [`psp`]: the payment provider simulator on a fresh ledger: the ledger
//!   read whole, faults for the next charges.
//! - [`maildev`]: MailDev (npm), the SMTP server receipts go to, and the
//!   messages it received.
//! - [`cluster`]: a PostgreSQL cluster of the test's own, to kill
//!   (`pg_ctl stop -m immediate`, SIGKILL of the postmaster) and restart
//!   on the same port and data.
//! - [`patroni`]: etcd and Patroni nodes with `synchronous_mode`, whose
//!   leader's machine can die (SIGKILL to Patroni's group, then the
//!   postmaster's) and be replaced; on a Citus cluster too, a group per
//!   node.
//! - [`citus`]: a Citus coordinator and workers of the test's own, each a
//!   [`cluster`] to kill; a fresh database on any Citus cluster.
//! - [`proxy`]: a TCP proxy between servers and their database that cuts
//!   open connections, refuses new ones or leaves them unanswered.
//! - [`caller`]: one customer's HTTP calls: keyed POSTs, the full charge list.
//! - [`concurrent`]: many requests released at once, their answers read
//!   whole; copies of one keyed request must run once.
//! - [`metrics`]: `GET /metrics` parsed; a missing series is an error.
//! - [`load`]: what the senders of a load saw: answers by kind, and the
//!   ones the contract rules out.
//! - [`lazyfs`]: a FUSE file system that keeps written data in memory
//!   until it is fsynced and drops it on a power cut, then remounts.
//! - [`refusing_smtp`]: a mail server that refuses every recipient for
//!   good, for the outbox's dead letters.
//! - [`clock`]: a process whose wall clock is wrong on purpose (an
//!   `LD_PRELOAD` shim), for the tests of instances that disagree on time.
//! - [`tls`]: a certificate authority of the test's own and a server
//!   certificate it signed (rcgen), for PostgreSQL, the provider and
//!   MailDev over TLS.
//! - `skip`: [`skipped`], for a test that does not apply to this run's
//!   database: counted as skipped, not passed.
//!
//! # Example
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! let server = testkit::Server::builder().chaos().start().await?;
//! let alice = server.caller();
//! let key = testkit::new_key();
//! let body = serde_json::json!({"amount": 100, "currency": "usd"});
//! assert_eq!(alice.post_keyed("/charges", &key, &body).await?.status(), 201);
//! assert_eq!(alice.charges().await?.len(), 1);
//! let executed = server
//!     .metrics()
//!     .await?
//!     .counter("idempotency_requests_total", &[("outcome", "executed")])?;
//! assert_eq!(executed, 1.0);
//! # Ok(())
//! # }
//! ```

pub mod binary;
pub mod caller;
pub mod citus;
pub mod clock;
pub mod cluster;
pub mod concurrent;
pub mod database;
mod first_line;
mod http;
mod keys;
pub mod killed_start;
pub mod lazyfs;
pub mod load;
pub mod maildev;
pub mod metrics;
pub mod patroni;
mod pg_client;
pub mod process;
pub mod proxy;
pub mod psp;
pub mod refusing_smtp;
pub mod server;
mod skip;
pub mod tls;

pub use binary::Binary;
pub use caller::{Auth, Caller};
pub use citus::Citus;
pub use clock::SteppedClock;
pub use cluster::Postgres;
pub use concurrent::{at_once, exactly_one_run, Answer};
pub use database::Database;
pub use keys::{new_key, new_token};
pub use killed_start::{KillAt, KilledStart};
pub use lazyfs::LazyFs;
pub use load::AnswerKinds;
pub use maildev::{Email, MailDev};
pub use metrics::Metrics;
pub use patroni::Patroni;
pub use process::{Launch, Process};
pub use proxy::Proxy;
pub use psp::{Fault, LedgerRow, Psp};
pub use refusing_smtp::RefusingSmtp;
pub use server::{Server, ServerBuilder};
pub use skip::{skipped, SKIPPED};
pub use tls::TestCa;
