//! The state behind one `IdempotentClient` (its options and its storage)
//! and the key lifecycle that needs no waiting: `keyFor`, `release`,
//! `clear`, `pendingOperations`, and expiry. The send loop is in
//! [`crate::send`].
//!
//! `keyFor`, `release` and `clear` are synchronous, so they cannot wait
//! for the operation's Web Lock as a call does. They keep its guarantee
//! another way: none ever replaces or deletes a key that a call is sending
//! with (the record's `busy` lease, in any tab), and `keyFor` never
//! replaces a live key at all. A key that two tabs make at the same moment
//! for a new operation is settled by the call that sends it
//! ([`crate::lock`]).
//!
//! **Expiry.** A record whose key is no longer live (`keyTtlMs` passed, or
//! the device clock is before the moment the key was made) and that no
//! call is sending with is forgotten; if its request had no final answer,
//! `onExpired` is told first, and the client never sends it again: the
//! server may have forgotten the key too.

use crate::error::Failure;
use crate::js;
use crate::options::Config;
use crate::storage::{Entry, Record, Store};
use crate::text::{self, concat};
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::Cell;

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

    /// The storage; its first use forgets the expired records of this
    /// client (prefix and scope), telling `onExpired` of the unanswered
    /// ones.
    pub(crate) fn store(&self) -> &Store {
        if !self.purged.replace(true) {
            let now = js::now_ms();
            for (operation, record) in self.store.records() {
                if !record.is_usable(now) {
                    self.expire(&operation, &record);
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

    /// Forgets an expired record, telling `onExpired` first when its
    /// request got no final answer. Returns whether it did.
    fn expire(&self, operation: &str, record: &Record) -> bool {
        self.store.remove(operation);
        let unanswered = record.is_pending();
        if unanswered {
            js::expired(&self.config.settings, operation, &record.encode());
        }
        unanswered
    }

    /// The operation's record when its key may be used; `None` when there
    /// is none (or garbage, or an expired key no call is sending with,
    /// forgotten). Refuses a record of a later client version or of
    /// another owner under the same name, and an expired record whose
    /// request had no answer, when `refuse_expired`: the call that finds
    /// it must not go on as a new operation as if nothing had happened.
    pub(crate) fn live_record(
        &self,
        operation: &str,
        now: u64,
        refuse_expired: bool,
    ) -> Result<Option<Record>, Failure> {
        let found = match self.own_entry(operation) {
            Entry::Ours(record) if record.is_usable(now) => Ok(Some(record)),
            Entry::Ours(record) => {
                if self.expire(operation, &record) && refuse_expired {
                    Err(expired(operation, &record.key))
                } else {
                    Ok(None)
                }
            }
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
        if let Some(record) = self.live_record(operation, now, false)? {
            return Ok(record.key);
        }
        let record = Record::new(new_key(), now, self.config.key_ttl_ms());
        self.store().put(operation, &record);
        Ok(record.key)
    }

    /// `release(operation)`: forgets the key and the request, unless a call
    /// is sending them right now (then the call would go on with a key that
    /// no longer exists, and a new call could charge again beside it).
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
            .filter(|(operation, record)| {
                if record.is_usable(now) {
                    record.is_pending()
                } else {
                    self.expire(operation, record);
                    false
                }
            })
            .map(|(operation, _)| operation)
            .collect()
    }
}

/// A fresh idempotency key: a UUID v4 from the browser's CSPRNG
/// (`crypto.getRandomValues`, which unlike `crypto.randomUUID` works on
/// plain http pages too).
pub(crate) fn new_key() -> String {
    let mut bytes = [0; 16];
    for (byte, random) in bytes.iter_mut().zip(js::random_bytes()) {
        *byte = random;
    }
    text::uuid_v4(bytes)
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
    Failure::invalid(msg).of(operation)
}

/// The refusal of a call that finds its operation expired with no final
/// answer (`onExpired` was told).
pub(crate) fn expired(operation: &str, key: &str) -> Failure {
    let mut msg = about("", operation);
    msg.push_str(" expired unanswered and may have run: not sent again (see onExpired)");
    let mut failure = Failure::invalid(msg).of(operation);
    failure.key = Some(key.into());
    failure
}

/// The refusal of `release` or `clear` while a call is sending.
fn busy(what: &str, operation: &str, record: Record) -> Failure {
    let mut msg = about(&concat(&[what, ": "]), operation);
    msg.push_str(" is being sent right now");
    let mut failure = Failure::invalid(msg).of(operation);
    failure.key = Some(record.key);
    failure
}
