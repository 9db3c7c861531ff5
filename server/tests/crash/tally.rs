//! What the senders saw: every answer by kind, the ones the contract
//! rules out, and the requests out to each instance right now.

use std::sync::atomic::{AtomicUsize, Ordering};
use testkit::AnswerKinds;

#[derive(Default)]
pub(crate) struct Tally {
    /// Every answer (or transport error) by kind, and the ones the
    /// contract rules out.
    pub(crate) kinds: AnswerKinds,
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

    /// An answer to operation `op` that the contract rules out.
    pub(crate) fn forbid(&self, op: usize, why: String) {
        self.kinds.forbid(format!("op {op}: {why}"));
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

    /// Fails the test when any answer was one the contract rules out,
    /// showing the first ten.
    pub(crate) fn assert_nothing_forbidden(&self) {
        let forbidden = self.kinds.forbidden();
        assert!(
            forbidden.is_empty(),
            "{} answers the contract rules out, first ones:\n{}",
            forbidden.len(),
            forbidden[..forbidden.len().min(10)].join("\n")
        );
    }
}
