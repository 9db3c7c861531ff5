//! Where operations' records live: `localStorage`, or page memory when
//! `localStorage` is missing, disabled or full.
//!
//! One entry per operation, named `storagePrefix + operation`, holding a
//! [`Record`] in the text format of [`record`]. The entries themselves are
//! kept by `Store` in `js/browser.js` (plain `localStorage` calls, the
//! memory fallback shared by every client of the page, and its one console
//! warning), which never throws; this module reads and writes records
//! through it, and a read of garbage gives [`Slot::Empty`].

use alloc::string::String;
use alloc::vec::Vec;
pub(crate) mod record;

use crate::js;

pub(crate) use record::{Record, Slot, StoredRequest};

/// The records of one client, under one prefix.
pub(crate) struct Store(js::Store);

impl Store {
    /// `localStorage`, or memory where it is missing or disabled (or, from
    /// its first refused write on, full). Reads and writes nothing yet.
    pub(crate) fn open(prefix: &str) -> Store {
        Store(js::Store::new(prefix))
    }

    /// What the entry of an operation holds. Expiry is the caller's
    /// business.
    pub(crate) fn get(&self, operation: &str) -> Slot {
        match self.0.get(operation) {
            Some(text) => Record::decode(&text),
            None => Slot::Empty,
        }
    }

    /// Writes the record of an operation. Never fails: when `localStorage`
    /// refuses the write, this client's records go to memory from now on.
    pub(crate) fn put(&self, operation: &str, record: &Record) {
        self.0.put(operation, &record.encode());
    }

    /// Forgets an operation, wherever its record is.
    pub(crate) fn remove(&self, operation: &str) {
        self.0.remove(operation);
    }

    /// Every record of this version under this prefix, with its operation.
    pub(crate) fn records(&self) -> Vec<(String, Record)> {
        self.0
            .operations()
            .into_iter()
            .filter_map(|operation| match self.get(&operation) {
                Slot::Ours(record) => Some((operation, record)),
                _ => None,
            })
            .collect()
    }

    /// Deletes the records whose keys expired before `now_ms` (unless a
    /// call is still sending with one). Records of other versions stay.
    pub(crate) fn purge_expired(&self, now_ms: u64) {
        for (operation, record) in self.records() {
            if !record.is_usable(now_ms) {
                self.remove(&operation);
            }
        }
    }
}
