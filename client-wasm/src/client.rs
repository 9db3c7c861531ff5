//! The state behind one `IdempotentClient` (its options and its storage)
//! and the key lifecycle that needs no waiting: `keyFor`, `release`,
//! `pendingOperations`. The send loop is in [`crate::send`].
//!
//! `keyFor` and `release` are synchronous, so they cannot wait for the
//! operation's Web Lock as a call does. They keep its guarantee another
//! way: neither ever replaces or deletes a key that a call is sending with
//! (the record's `busy` lease, in any tab), and `keyFor` never replaces a
//! live key at all. A key that two tabs make at the same moment for a new
//! operation is settled by the call that sends it ([`crate::lock`]).

use crate::error::Failure;
use crate::js;
use crate::options::Config;
use crate::storage::{Record, Slot, Store};
use crate::text::{self, concat};
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::Cell;

pub(crate) struct Client {
    pub(crate) config: Config,
    store: Store,
    /// Whether the expired records under the prefix are deleted yet.
    purged: Cell<bool>,
}

impl Client {
    /// Names the storage; touches none of it, so constructing a client
    /// while the page loads costs no storage access.
    pub(crate) fn new(config: Config) -> Client {
        let store = Store::open(&config.prefix);
        Client {
            config,
            store,
            purged: Cell::new(false),
        }
    }

    /// The storage; its first use deletes the expired records under the
    /// prefix.
    pub(crate) fn store(&self) -> &Store {
        if !self.purged.replace(true) {
            self.store.purge_expired(js::now_ms());
        }
        &self.store
    }

    /// The operation's record when its key may be used; `None` when there
    /// is none (or garbage, or an expired key no call is sending with).
    /// Refuses a record of another client version.
    pub(crate) fn live_record(&self, operation: &str, now: u64) -> Result<Option<Record>, Failure> {
        match self.store().get(operation) {
            Slot::Ours(record) if record.is_usable(now) => Ok(Some(record)),
            Slot::Foreign => Err(foreign(operation)),
            _ => Ok(None),
        }
    }

    /// The operation's live record, or a new one, stored.
    pub(crate) fn usable_record(&self, operation: &str, now: u64) -> Result<Record, Failure> {
        if let Some(record) = self.live_record(operation, now)? {
            return Ok(record);
        }
        let record = Record::new(new_key(), now, self.config.key_ttl_ms);
        self.store().put(operation, &record);
        Ok(record)
    }

    /// `keyFor(operation)`.
    pub(crate) fn key_for(&self, operation: &str) -> Result<String, Failure> {
        Ok(self.usable_record(operation, js::now_ms())?.key)
    }

    /// `release(operation)`: forgets the key and the request, unless a call
    /// is sending them right now (then the call would go on with a key that
    /// no longer exists, and a new call could charge again beside it).
    pub(crate) fn release(&self, operation: &str) -> Result<(), Failure> {
        match self.store().get(operation) {
            Slot::Foreign => Err(foreign(operation)),
            Slot::Ours(record) if record.is_busy(js::now_ms()) => {
                let mut msg = concat(&["release: operation "]);
                text::push_quoted(&mut msg, operation);
                msg.push_str(
                    " is being sent right now (in this tab or another); abort that call with \
                     its signal, or release the operation once the call has settled",
                );
                let mut failure = Failure::invalid(msg).of(operation);
                failure.key = Some(record.key);
                Err(failure)
            }
            _ => {
                self.store().remove(operation);
                Ok(())
            }
        }
    }

    /// `pendingOperations()`.
    pub(crate) fn pending(&self) -> Vec<String> {
        let now = js::now_ms();
        self.store()
            .records()
            .into_iter()
            .filter(|(_, record)| record.is_usable(now) && record.is_pending())
            .map(|(operation, _)| operation)
            .collect()
    }
}

/// A fresh idempotency key: a UUID v4 from the browser's CSPRNG
/// (`crypto.getRandomValues`, which unlike `crypto.randomUUID` works on
/// plain http pages too).
fn new_key() -> String {
    let mut bytes = [0; 16];
    for (byte, random) in bytes.iter_mut().zip(js::random_bytes()) {
        *byte = random;
    }
    text::uuid_v4(bytes)
}

/// The refusal to touch a record of another version of the client.
pub(crate) fn foreign(operation: &str) -> Failure {
    let mut msg = String::from("operation ");
    text::push_quoted(&mut msg, operation);
    msg.push_str(
        " is stored by another version of this client (a tab of an older or newer \
         deploy); it is left as it is: reload the page to use it",
    );
    Failure::invalid(msg).of(operation)
}
