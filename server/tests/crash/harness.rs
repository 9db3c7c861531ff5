//! What the crash, power-cut and failover harnesses share, loaded by each
//! with `#[path]`: the load's shape, one harness at a time, and the
//! modules (the charges as read back, the knobs, the provider's faults,
//! the senders, the stock reservations and the tally). Each harness uses
//! a part.

#![allow(dead_code)]

pub(crate) mod charges;
pub(crate) mod knobs;
pub(crate) mod provider;
pub(crate) mod sender;
pub(crate) mod stock;
pub(crate) mod tally;

/// Customers sending.
pub(crate) const CALLERS: usize = 4;
/// Operations in flight at once.
pub(crate) const IN_FLIGHT: usize = 16;
/// Senders of each operation, at once.
pub(crate) const SENDERS_PER_OPERATION: usize = 2;

/// Each harness loads the whole machine: they run one after the other.
pub(crate) static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
