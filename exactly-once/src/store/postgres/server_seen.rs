//! The database server a store's connections reach, and its changes: a
//! failover's new primary is a new epoch of the store.

/// The server (`host:port`) this instance's connections reach, as each new
/// connection (and each health check) finds it, and how many times it
/// changed: a new primary after a failover. An asynchronous standby
/// promoted in its place may lack records a copy in memory still holds
/// (the replay cache), so a change is a new epoch of the store, and copies
/// of the last are not served: the database decides again.
#[derive(Debug, Default)]
pub(crate) struct ServerSeen {
    current: std::sync::Mutex<Option<String>>,
    changes: std::sync::atomic::AtomicU64,
}

impl ServerSeen {
    /// A connection (or a health check) reached `address`.
    pub(crate) fn reached(&self, address: Option<String>) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.is_some() && address.is_some() && *current != address {
            self.changes
                .fetch_add(1, std::sync::atomic::Ordering::Release);
            tracing::warn!(was = ?*current, now = ?address, "the database server changed (a failover?): copies of records in memory are no longer served");
        }
        *current = address;
    }

    /// The server reached last.
    pub(crate) fn current(&self) -> Option<String> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many times it changed.
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(std::sync::atomic::Ordering::Acquire)
    }
}
