//! What the senders of a load saw, for the harnesses that keep servers
//! busy while they kill or cut them off: how many answers of each kind
//! (a row per kind, shown as a table at the end of a run), and the answers
//! the contract rules out, each kept with the reason. Shared by senders on
//! many tasks or threads at once.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Answers by kind, and the ones the contract rules out.
#[derive(Debug, Default)]
pub struct AnswerKinds {
    rows: Mutex<BTreeMap<String, usize>>,
    forbidden: Mutex<Vec<String>>,
}

impl AnswerKinds {
    /// One more answer (or transport error) of the kind `row`.
    pub fn count(&self, row: impl Into<String>) {
        *self.rows.lock().unwrap().entry(row.into()).or_default() += 1;
    }

    /// How many answers were of the kind `row`.
    pub fn counted(&self, row: &str) -> usize {
        self.rows.lock().unwrap().get(row).copied().unwrap_or(0)
    }

    /// Keeps an answer the contract rules out: what it was and why not.
    pub fn forbid(&self, why: impl Into<String>) {
        self.forbidden.lock().unwrap().push(why.into());
    }

    /// Everything kept by [`AnswerKinds::forbid`], in order.
    pub fn forbidden(&self) -> Vec<String> {
        self.forbidden.lock().unwrap().clone()
    }

    /// Every kind and how many, one line each, the kinds right-aligned.
    pub fn table(&self) -> String {
        let rows = self.rows.lock().unwrap();
        let width = rows
            .keys()
            .map(|row| row.chars().count())
            .max()
            .unwrap_or(0);
        let lines: Vec<String> = rows
            .iter()
            .map(|(row, n)| format!("  {row:>width$}  {n}"))
            .collect();
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::AnswerKinds;

    #[test]
    fn answers_are_counted_by_kind_and_shown_one_kind_a_line() {
        let kinds = AnswerKinds::default();
        kinds.count("201");
        kinds.count("201");
        kinds.count("503 unavailable");
        assert_eq!(kinds.counted("201"), 2);
        assert_eq!(kinds.counted("409"), 0);
        assert_eq!(kinds.table(), "              201  2\n  503 unavailable  1");
    }

    #[test]
    fn forbidden_answers_are_kept_in_order() {
        let kinds = AnswerKinds::default();
        kinds.forbid("op 1: 500");
        kinds.forbid(String::from("op 2: 409 without Retry-After"));
        assert_eq!(
            kinds.forbidden(),
            ["op 1: 500", "op 2: 409 without Retry-After"]
        );
    }
}
