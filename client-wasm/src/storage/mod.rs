//! Where operations' records live: `localStorage`, or page memory when
//! `localStorage` is missing, disabled or full.
//!
//! One entry per operation, named `storagePrefix + operation`, holding a
//! [`Record`] in the text format of [`record`].
//! Everything that can go wrong with the browser's storage is absorbed
//! here: reads of garbage give [`Slot::Empty`], and a storage that throws (missing, `SecurityError`,
//! `QuotaExceededError`) makes this client keep its records in memory for
//! the rest of the page's life, with one console warning per page.
//!
//! The backend is `web_sys::Storage` directly rather than gloo-storage:
//! gloo's `LocalStorage::raw()` panics when `localStorage` is unavailable,
//! which is exactly the case that must keep working. Swapping the backend
//! means changing [`Store`] only.

pub(crate) mod record;

use std::cell::Cell;

use wasm_bindgen::{JsCast, JsValue};

pub(crate) use record::{Record, Slot, StoredRequest};

thread_local! {
    /// Records of clients that fell back to memory, by full storage name.
    /// Shared by every client of the page, so a new instance sees the keys
    /// of the old one. A plain list: a page has a handful of operations,
    /// and a map type would cost kilobytes of code.
    static MEMORY: Cell<Vec<(String, String)>> = const { Cell::new(Vec::new()) };
    /// Whether the page has been told about the fallback already.
    static WARNED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` on the page's memory records. (`Cell` rather than `RefCell`:
/// nothing here re-enters, and borrow errors would bring their panic
/// formatting into the module.)
fn with_memory<R>(f: impl FnOnce(&mut Vec<(String, String)>) -> R) -> R {
    MEMORY.with(|cell| {
        let mut memory = cell.take();
        let result = f(&mut memory);
        cell.set(memory);
        result
    })
}

fn memory_get(name: &str) -> Option<String> {
    with_memory(|m| {
        m.iter()
            .find(|(n, _)| n == name)
            .map(|(_, text)| text.clone())
    })
}

fn memory_remove(name: &str) {
    with_memory(|m| m.retain(|(n, _)| n != name));
}

/// The records of one client, under one prefix.
pub(crate) struct Store {
    prefix: String,
    /// `localStorage`, when the page has one. Still read after a fallback:
    /// the keys written before it stay valid.
    local: Option<web_sys::Storage>,
    /// Writes go to memory: `localStorage` refused one.
    in_memory: Cell<bool>,
}

impl Store {
    /// Opens `localStorage` (probing that it accepts writes) or falls back
    /// to memory.
    pub(crate) fn open(prefix: String) -> Store {
        let local = local_storage();
        let mut store = Store {
            prefix,
            local: None,
            in_memory: Cell::new(false),
        };
        match local {
            Ok(storage) => {
                let probe = store.name("\u{0}probe");
                match storage.set_item(&probe, "1") {
                    Ok(()) => {
                        let _ = storage.remove_item(&probe);
                    }
                    Err(e) => store.fall_back(&e),
                }
                store.local = Some(storage);
            }
            Err(e) => store.fall_back(&e),
        }
        store
    }

    /// The storage entry name of an operation.
    fn name(&self, operation: &str) -> String {
        let mut name = String::with_capacity(self.prefix.len() + operation.len());
        name.push_str(&self.prefix);
        name.push_str(operation);
        name
    }

    /// Switches this client's writes to memory and warns, once per page.
    fn fall_back(&self, cause: &JsValue) {
        self.in_memory.set(true);
        if !WARNED.with(|w| w.replace(true)) {
            let mut msg = String::from(
                "IdempotentClient: localStorage is unavailable or full; idempotency keys are kept in memory for this page only (",
            );
            msg.push_str(&crate::js::error_text(cause));
            msg.push(')');
            crate::js::console_warn(&msg);
        }
    }

    /// The raw text of an entry: memory first (it holds what this page wrote
    /// after a fallback), then `localStorage`.
    fn read(&self, name: &str) -> Option<String> {
        if let Some(text) = memory_get(name) {
            return Some(text);
        }
        self.local.as_ref()?.get_item(name).ok().flatten()
    }

    /// What the entry of an operation holds. Expiry is the caller's
    /// business.
    pub(crate) fn get(&self, operation: &str) -> Slot {
        match self.read(&self.name(operation)) {
            Some(text) => Record::decode(&text),
            None => Slot::Empty,
        }
    }

    /// Writes the record of an operation. Never fails: when `localStorage`
    /// refuses the write, this client's records go to memory from now on.
    pub(crate) fn put(&self, operation: &str, record: &Record) {
        let name = self.name(operation);
        let text = record.encode();
        // A memory copy from an earlier fallback would shadow a new write.
        memory_remove(&name);
        if let (Some(storage), false) = (&self.local, self.in_memory.get()) {
            match storage.set_item(&name, &text) {
                Ok(()) => return,
                Err(e) => self.fall_back(&e),
            }
        }
        with_memory(|m| m.push((name, text)));
    }

    /// Forgets an operation, wherever its record is.
    pub(crate) fn remove(&self, operation: &str) {
        let name = self.name(operation);
        memory_remove(&name);
        // Also after a fallback for lack of space: a stale record left in
        // localStorage would come back.
        if let Some(storage) = &self.local {
            let _ = storage.remove_item(&name);
        }
    }

    /// Every record of this version under this prefix, with its operation.
    pub(crate) fn records(&self) -> Vec<(String, Record)> {
        let mut names: Vec<String> =
            with_memory(|m| m.iter().map(|(name, _)| name.clone()).collect());
        if let Some(storage) = &self.local {
            for i in 0..storage.length().unwrap_or(0) {
                if let Ok(Some(name)) = storage.key(i) {
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
        }
        names.retain(|name| name.starts_with(&self.prefix));
        names
            .into_iter()
            .filter_map(|name| match Record::decode(&self.read(&name)?) {
                Slot::Ours(record) => Some((name.strip_prefix(&self.prefix)?.to_owned(), record)),
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

/// `globalThis.localStorage`, or why it cannot be had. Reading the property
/// itself throws where storage is disabled (opaque origins, some privacy
/// settings).
fn local_storage() -> Result<web_sys::Storage, JsValue> {
    let value = js_sys::Reflect::get(&crate::js::global(), &JsValue::from_str("localStorage"))?;
    if value.is_object() {
        Ok(value.unchecked_into())
    } else {
        Err(JsValue::from_str("localStorage is not available"))
    }
}
