//! What the senders saw: every answer by status, the ones the contract
//! rules out, and the requests out to each instance right now.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[derive(Default)]
pub(crate) struct Tally {
    statuses: Mutex<BTreeMap<String, usize>>,
    forbidden: Mutex<Vec<String>>,
    in_flight: Vec<AtomicUsize>,
    attempts: AtomicUsize,
}

impl Tally {
    /// A tally for `instances` server processes.
    pub(crate) fn new(instances: usize) -> Self {
        Self {
            in_flight: (0..instances).map(|_| AtomicUsize::new(0)).collect(),
            ..Self::default()
        }
    }

    /// One more answer (or transport error) of this kind.
    pub(crate) fn count(&self, what: impl Into<String>) {
        *self
            .statuses
            .lock()
            .unwrap()
            .entry(what.into())
            .or_default() += 1;
    }

    /// An answer the contract rules out.
    pub(crate) fn forbid(&self, op: usize, why: String) {
        self.forbidden
            .lock()
            .unwrap()
            .push(format!("op {op}: {why}"));
    }

    /// A request to instance `i` goes out.
    pub(crate) fn sent(&self, i: usize) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        self.in_flight[i].fetch_add(1, Ordering::SeqCst);
    }

    /// A request to instance `i` came back (or failed).
    pub(crate) fn back(&self, i: usize) {
        self.in_flight[i].fetch_sub(1, Ordering::SeqCst);
    }

    /// Requests out to instance `i` now.
    pub(crate) fn in_flight(&self, i: usize) -> usize {
        self.in_flight[i].load(Ordering::SeqCst)
    }

    /// Requests sent in all.
    pub(crate) fn attempts(&self) -> usize {
        self.attempts.load(Ordering::Relaxed)
    }

    /// The answers the contract rules out.
    pub(crate) fn forbidden(&self) -> Vec<String> {
        self.forbidden.lock().unwrap().clone()
    }

    /// Every kind of answer and how many, one line each.
    pub(crate) fn table(&self) -> String {
        let statuses = self.statuses.lock().unwrap();
        let rows: Vec<String> = statuses
            .iter()
            .map(|(status, n)| format!("  {status:>24}  {n}"))
            .collect();
        rows.join("\n")
    }
}
