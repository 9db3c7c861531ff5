//! The schema rules both backends follow: migrations are numbered, each is
//! applied once and recorded in a ledger, and a server refuses to write to
//! a database whose schema is not the one it was built for.
//!
//! Two ledgers: the engine's own tables (records, outbox, clock) are
//! recorded in [`ENGINE_LEDGER`], the application's migrations (its own
//! tables, handed to the store's options) in [`APP_LEDGER`]. The
//! application's run first, then the engine's, each in a transaction.

use super::StoreError;
use crate::store::Result;

/// Where the engine records its own migrations.
pub const ENGINE_LEDGER: &str = "exactly_once_migrations";
/// Where the application's migrations are recorded.
pub const APP_LEDGER: &str = "schema_migrations";

/// One backend's migrations, in order: `(version, SQL)`, versions
/// increasing from 1.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migrations(pub &'static [(i64, &'static str)]);

impl Migrations {
    /// The version this server needs.
    pub fn latest(&self) -> i64 {
        self.0.last().map_or(0, |(version, _)| *version)
    }

    /// The migrations a database at `current` still needs, in order.
    pub fn after(&self, current: i64) -> impl Iterator<Item = (i64, &'static str)> + '_ {
        self.0
            .iter()
            .filter(move |(version, _)| *version > current)
            .copied()
    }

    /// Ok when a database at `found` is the schema this server needs.
    pub fn check(&self, found: i64) -> Result<()> {
        self.check_in(APP_LEDGER, found)
    }

    /// Ok when a database whose `ledger` records `found` is the schema
    /// this server needs.
    pub fn check_in(&self, ledger: &str, found: i64) -> Result<()> {
        let latest = self.latest();
        if found == latest {
            Ok(())
        } else if ledger == APP_LEDGER {
            Err(StoreError::unavailable(format!(
                "the database is at schema version {found}, this server needs {latest}"
            )))
        } else {
            Err(StoreError::unavailable(format!(
                "the database's {ledger} is at version {found}, this server needs {latest}"
            )))
        }
    }
}

/// The statement that reads the version a ledger records (0 for none).
pub fn version_query(ledger: &str) -> String {
    format!("SELECT coalesce(max(version), 0) FROM {ledger}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: Migrations = Migrations(&[(1, "one"), (2, "two")]);

    #[test]
    fn pending_migrations_follow_the_current_version() {
        assert_eq!(TWO.latest(), 2);
        assert_eq!(TWO.after(0).map(|(v, _)| v).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(TWO.after(1).map(|(v, _)| v).collect::<Vec<_>>(), [2]);
        assert_eq!(TWO.after(2).count(), 0);
    }

    #[test]
    fn only_the_latest_schema_is_accepted() {
        assert!(TWO.check(2).is_ok());
        for found in [0, 1, 3] {
            let e = TWO.check(found).unwrap_err();
            assert!(e.is_unavailable());
            assert!(e.to_string().contains(&format!("version {found}")), "{e}");
        }
    }
}
