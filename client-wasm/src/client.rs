//! The state behind one `IdempotentClient` (its options and its storage)
//! and the key lifecycle that needs no waiting: `keyFor`, `release`,
//! `clear`, `pendingOperations`, and expiry. The send loop is in
//! `send.rs`, which uses this module (and not the other way round).
//!
//! `keyFor`, `release` and `clear` are synchronous, so they cannot wait
//! for the operation's Web Lock as a call does. They keep its guarantee
//! another way: none ever replaces or deletes a key that a call is sending
//! with (the record's `busy` lease, in any tab), and `keyFor` never
//! replaces a live key at all. A key that two tabs make at the same moment
//! for a new operation is settled by the call that sends it (`lock.rs`).
//!
//! **Expiry.** A record whose key is no longer live (`keyTtlMs` passed, or
//! the device clock is before the moment the key was made) and that no
//! call is sending with is forgotten, unless its request had no final
//! answer: then the operation may have run, and the server may have
//! forgotten the key too, so the record becomes a **tombstone** (told to
//! `onExpired` once, listed by `expiredOperations`). A tombstone is never
//! sent again and its operation never gets a new key (every call, `keyFor`
//! and `resume` of it is refused with `operation-expired`) until the page,
//! having found out whether it ran, `release`s it.

use crate::error::{Code, Failure};
use crate::js;
use crate::options::Config;
use crate::storage::{Entry, Record, Store};
use crate::text::{self, concat};
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::Cell;
use wasm_bindgen::JsValue;

pub(crate) struct Client {
    pub(crate) config: Config,
    store: Store,
    /// Whether the expired records of this client are forgotten yet.
    purged: Cell<bool>,
}

impl Client {
    /// Takes the storage the settings name; touches none of it, so
    /// constructing a client while the page loads costs no storage access.
    pub(crate) fn new(config: Config) -> Client {
        let store = Store::open(&config.settings);
        Client {
            config,
            store,
            purged: Cell::new(false),
        }
    }

    /// The storage; its first use looks at the records of this client
    /// (prefix and scope): of the expired ones, answered ones are
    /// forgotten, unanswered ones become tombstones (`onExpired` told);
    /// answered ones that an earlier version wrote with their request lose
    /// it ([`Record::forget_request`]).
    pub(crate) fn store(&self) -> &Store {
        if !self.purged.replace(true) {
            let now = js::now_ms();
            for (operation, mut record) in self.store.records() {
                if !record.is_usable(now) {
                    self.expire(&operation, record);
                } else if record.answered && record.request.is_some() {
                    record.forget_request(None);
                    self.store.put(&operation, &record);
                }
            }
        }
        &self.store
    }

    /// The storage without the purge, for a call to look at its own
    /// operation first (so that it is the one refused when it expired).
    fn own_entry(&self, operation: &str) -> Entry {
        self.store.get(operation)
    }

    /// A record whose key may no longer be used: forgotten when its request
    /// got a final answer (or it has none). One whose request had none may
    /// have run: with an `onExpired`, the page is told, and the client
    /// forgets it just after (CONTRACT section 4: the page was told, and
    /// finds out whether it ran); without one, it is kept as a tombstone
    /// the page finds in `expiredOperations()`, refused until it
    /// `release`s it. Returns the expired record (the call that found it
    /// is refused either way).
    pub(crate) fn expire(&self, operation: &str, mut record: Record) -> Option<Record> {
        if !record.is_pending() {
            self.store.remove(operation);
            return None;
        }
        if !record.tomb {
            record.tomb = true;
            record.busy_until_ms = None;
            let settings = &self.config.settings;
            if js::has_on_expired(settings) {
                js::expired(settings, operation, &record.encode(), true);
                self.store.remove(operation);
            } else {
                self.store.put(operation, &record);
            }
        }
        Some(record)
    }

    /// The operation's record when its key may be used; `None` when there
    /// is none (or garbage, or an answered record whose key expired,
    /// forgotten). Refuses a record of a later client version or of
    /// another owner under the same name, and a tombstone (an expired
    /// record whose request had no answer): no call, `keyFor` or `resume`
    /// goes on as a new operation as if nothing had happened.
    pub(crate) fn live_record(&self, operation: &str, now: u64) -> Result<Option<Record>, Failure> {
        let found = match self.own_entry(operation) {
            Entry::Ours(record) if record.is_usable(now) => Ok(Some(record)),
            Entry::Ours(record) => match self.expire(operation, record) {
                Some(tomb) => Err(expired(operation, &tomb.key)),
                None => Ok(None),
            },
            Entry::Later(version) => Err(left_alone(operation, Some(version))),
            Entry::Taken => Err(left_alone(operation, None)),
            Entry::Empty => Ok(None),
        };
        self.store();
        found
    }

    /// `keyFor(operation)`: the live key, or a new one, stored.
    pub(crate) fn key_for(&self, operation: &str) -> Result<String, Failure> {
        let now = js::now_ms();
        if let Some(record) = self.live_record(operation, now)? {
            return Ok(record.key);
        }
        let record = Record::new(js::new_key(), now, self.config.key_ttl_ms());
        self.store().put(operation, &record);
        Ok(record.key)
    }

    /// `release(operation)`: forgets the key and the request (a tombstone's
    /// too: the page's acknowledgement), unless a call is sending them right
    /// now (then the call would go on with a key that no longer exists, and
    /// a new call could charge again beside it).
    pub(crate) fn release(&self, operation: &str) -> Result<(), Failure> {
        match self.store().get(operation) {
            Entry::Later(version) => Err(left_alone(operation, Some(version))),
            Entry::Taken => Err(left_alone(operation, None)),
            Entry::Ours(record) if record.is_busy(js::now_ms()) => {
                Err(busy("release", operation, record))
            }
            _ => {
                self.store().remove(operation);
                Ok(())
            }
        }
    }

    /// `clear()`: forgets every record of this client (prefix and scope),
    /// or none while one of them is being sent. Returns how many.
    pub(crate) fn clear(&self) -> Result<u32, Failure> {
        let now = js::now_ms();
        let records = self.store().records();
        for (operation, record) in &records {
            if record.is_busy(now) {
                return Err(busy("clear", operation, record.clone()));
            }
        }
        for (operation, _) in &records {
            self.store().remove(operation);
        }
        Ok(records.len() as u32)
    }

    /// `pendingOperations()`.
    pub(crate) fn pending(&self) -> Vec<String> {
        let now = js::now_ms();
        self.store()
            .records()
            .into_iter()
            .filter_map(|(operation, record)| {
                if !record.is_usable(now) {
                    self.expire(&operation, record);
                    None
                } else {
                    record.is_pending().then_some(operation)
                }
            })
            .collect()
    }

    /// `expiredOperations()`: the tombstones, as `onExpired` is told them.
    pub(crate) fn expired(&self) -> Vec<JsValue> {
        let now = js::now_ms();
        self.store()
            .records()
            .into_iter()
            .filter(|(_, record)| !record.is_usable(now))
            .filter_map(|(operation, record)| {
                let tomb = self.expire(&operation, record)?;
                Some(js::expired(
                    &self.config.settings,
                    &operation,
                    &tomb.encode(),
                    false,
                ))
            })
            .collect()
    }

    /// `abortAll()`: aborts every call of this client, clearing the leases
    /// of those that held their operation, so that `clear()` can follow at
    /// once. Returns how many calls it aborted.
    pub(crate) fn abort_all(&self) -> u32 {
        let operations = js::abort_all(&self.config.settings);
        for operation in &operations {
            if let Entry::Ours(mut record) = self.store.get(operation) {
                record.busy_until_ms = None;
                self.store.put(operation, &record);
            }
        }
        operations.len() as u32
    }
}

/// `msg` followed by `operation "NAME"`.
fn about(msg: &str, operation: &str) -> String {
    let mut out = concat(&[msg, "operation "]);
    text::push_quoted(&mut out, operation);
    out
}

/// The refusal to touch a record of a later version of the client (its
/// version), or of another prefix or scope under the same entry name.
pub(crate) fn left_alone(operation: &str, version: Option<u64>) -> Failure {
    let mut msg = about("", operation);
    msg.push_str(" is stored by another client (");
    match version {
        Some(version) => {
            msg.push_str("a newer one, record format version ");
            text::push_u64(&mut msg, version);
        }
        None => msg.push_str("another prefix or scope"),
    }
    msg.push_str("): left as it is");
    Failure::new(Code::ForeignRecord, msg).of(operation)
}

/// The refusal of a tombstone: an operation whose key expired with no
/// final answer (`onExpired` was told).
pub(crate) fn expired(operation: &str, key: &str) -> Failure {
    let mut msg = about("", operation);
    msg.push_str(
        " expired unanswered and may have run: find out, then release it (see expiredOperations)",
    );
    Failure::new(Code::OperationExpired, msg)
        .of(operation)
        .keyed(key)
}

/// The refusal of `release` or `clear` while a call is sending.
fn busy(what: &str, operation: &str, record: Record) -> Failure {
    let mut msg = about(&concat(&[what, ": "]), operation);
    msg.push_str(" is being sent right now");
    Failure::new(Code::OperationBusy, msg)
        .of(operation)
        .keyed(&record.key)
}
