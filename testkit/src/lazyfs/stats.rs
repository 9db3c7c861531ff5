//! What the file system counted, and the lock its threads share it by.

use std::sync::{Mutex, MutexGuard};

/// What was synced and dropped so far (every mount added up).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// `fsync` and `fdatasync` calls.
    pub syncs: u64,
    /// Pages copied into backing files by them.
    pub pages_synced: u64,
    /// Power cuts.
    pub cuts: u64,
    /// Pages dropped by cuts (written, never synced).
    pub pages_dropped: u64,
    /// Files that lost pages in a cut.
    pub files_dropped: u64,
    /// `fsync` calls failed on purpose ([`LazyFs::fail_next_fsync`]).
    pub failed_syncs: u64,
}

/// Locks a mutex the file system's threads share; a panicked holder left
/// nothing half-written that matters to a test, so poisoning is ignored.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
