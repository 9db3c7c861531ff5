//! Helpers this repository's own crates (the demo shop, the provider
//! simulator, their shared server plumbing) take from the engine so that
//! all follow one rule. Not part of the engine's API: hidden from its
//! documentation and changed without notice; an application has no use
//! for them.

#![doc(hidden)]

#[cfg(feature = "axum")]
pub use crate::error::log_server_error;
pub use crate::error::{BoxError, Chain, PROBLEM_JSON};
pub use crate::key::{key_text, single, BadKey, Repeated, MAX_KEY_LEN};
/// The numbered migrations of a SQLite file: the engine's runner.
#[cfg(feature = "sqlite")]
pub use crate::store::sqlite::migrations;
/// Deleting expired records in batches, every interval.
pub mod sweep {
    pub use crate::sweeper::every;
}
#[cfg(feature = "tls")]
pub use crate::tls::server_config;
