//! The embedded backend: one SQLite file in WAL mode.
//!
//! - `writer`: one writer thread, group commit, a savepoint per job;
//!   `checkpointer`: the thread that copies the WAL into the file.
//! - `readers`: read connections beside it, for replays and listings.
//! - `schema`: connection settings, migrations, the file's identity
//!   (a missing or replaced file is never silently recreated: 503 until it
//!   is back).
//! - `protocol`: the keyed protocol's SQL (claim, decide, phases under a
//!   lease, the completer's and the sweeper's queries); `outbox`: the
//!   messages' SQL; `queries`: the reads; `operator`: an operator's
//!   listing, takeover and settlement.

//! - `backend`: the [`Sqlite`] type, the engine's schema, error sorting;
//!   `store`: [`SqliteStore`].

mod backend;
mod checkpointer;
mod clock;
mod lease;
pub mod migrations;
mod operator;
mod outbox;
mod protocol;
mod queries;
mod readers;
mod schema;
mod store;
mod writer;

pub use backend::{classify, Sqlite};
pub use store::SqliteStore;
