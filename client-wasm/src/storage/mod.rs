//! Where operations' records live: `localStorage`, or page memory when
//! `localStorage` is missing, disabled or full.
//!
//! One entry per operation and owner: `storagePrefix + operation` for the
//! scope `""` (the name the first release used), `storagePrefix + scope +
//! "|" + operation` for another scope; it holds a [`Record`] in the text
//! format of [`record`], which names its owner. The entries themselves
//! are kept by `Store` in `js/browser.js` (plain `localStorage` calls, the
//! memory fallback shared by every client of the page, and its one console
//! warning), which never throws; this module reads and writes records
//! through it, and only ever uses the records its owner check accepts
//! ([`Store::get`]): a read of garbage gives [`Slot::Empty`].

use alloc::string::String;
use alloc::vec::Vec;
pub(crate) mod record;

use crate::js;

pub(crate) use record::{Record, Slot as Entry, StoredRequest};

/// The records of one client: one prefix, one scope.
pub(crate) struct Store {
    entries: js::Store,
}

impl Store {
    /// `localStorage`, or memory where it is missing or disabled (or, from
    /// its first refused write on, full), as the client's settings name
    /// it (prefix and scope). Reads and writes nothing yet.
    pub(crate) fn open(settings: &js::Settings) -> Store {
        Store {
            entries: settings.store(),
        }
    }

    /// What the entry of an operation holds for this client (its owner
    /// checked by `Store.get` in `js/browser.js`). Expiry is the caller's
    /// business.
    pub(crate) fn get(&self, operation: &str) -> Entry {
        match self.entries.get(operation) {
            Some(text) => Record::decode(&text),
            None => Entry::Empty,
        }
    }

    /// Writes the record of an operation (as the current version, owned by
    /// this client): key, request and lease in one entry, in one write.
    /// Never fails: when `localStorage` refuses the write, this client's
    /// records go to memory from now on ([`Store::persistent`]).
    pub(crate) fn put(&self, operation: &str, record: &Record) {
        self.entries.put(operation, &record.encode());
    }

    /// Forgets an operation, wherever its record is.
    pub(crate) fn remove(&self, operation: &str) {
        self.entries.remove(operation);
    }

    /// `true` while records go to `localStorage`; `false` once they are
    /// kept in page memory, which a reload loses.
    pub(crate) fn persistent(&self) -> bool {
        self.entries.persistent()
    }

    /// Every record of this client (this prefix and scope), with its
    /// operation. Entries of other owners, of later versions and garbage
    /// are left out.
    pub(crate) fn records(&self) -> Vec<(String, Record)> {
        self.entries
            .operations()
            .into_iter()
            .filter_map(|operation| match self.get(&operation) {
                Entry::Ours(record) => Some((operation, record)),
                _ => None,
            })
            .collect()
    }
}
