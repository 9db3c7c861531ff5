//! The schema rules both backends follow: migrations are numbered, each is
//! applied once and recorded in a ledger, and a release serves only on a
//! database whose schema it can run beside.
//!
//! Two ledgers: the engine's own tables (records, outbox, clock) are
//! recorded in [`ENGINE_LEDGER`], the application's migrations (its own
//! tables, handed to the store's options) in [`APP_LEDGER`]. The
//! application's run first, then the engine's.
//!
//! # Rolling releases: expand and contract
//!
//! During a rolling deploy two releases share one database: the next
//! release's migration job (or its first instance) migrates, and the
//! instances of the release before keep serving until they are replaced,
//! or take over again when the deploy is rolled back. Each [`Migration`]
//! therefore says which earlier releases can run beside it
//! ([`Migration::runs_beside`]), and each ledger records that with the
//! version. A release built for version `L` of a ledger, on a database at
//! version `V`:
//!
//! - `V == L`: serves.
//! - `V > L` (a later release migrated): serves, and `/healthz` stays 200,
//!   if every migration applied after `L` runs beside `L`; otherwise it
//!   refuses to start, and a running one answers 503 naming the first
//!   migration that does not ([`StoreErrorKind::IncompatibleSchema`]).
//! - `V < L` (not migrated yet: a server started without migrating):
//!   refuses, naming the first migration it lacks.
//!
//! An **expand** migration (a new table, a nullable or defaulted column, a
//! new index) runs beside the release before it, and usually beside every
//! older one: [`Migration::expand`]. A **contract** migration (a drop, a
//! rename, a `NOT NULL` without a default, or a change of what existing
//! rows mean) runs beside nothing older: [`Migration::contract`]. A change
//! that would be a contract is made in two releases: the first expands
//! (and writes both shapes), the second, once no instance of the one
//! before runs, contracts.
//!
//! [`StoreErrorKind::IncompatibleSchema`]: super::StoreErrorKind::IncompatibleSchema

use super::error::{Result, StoreError};
pub(crate) use super::placement::Placement;

/// Where the engine records its own migrations.
pub(crate) const ENGINE_LEDGER: &str = "exactly_once_migrations";
/// Where the application's migrations are recorded.
pub(crate) const APP_LEDGER: &str = "schema_migrations";

/// One numbered migration: its SQL, and which earlier releases can run
/// beside a database it was applied to.
///
/// ```
/// use exactly_once::Migration;
///
/// const MIGRATIONS: &[Migration] = &[
///     // The first: nothing older exists.
///     Migration::contract(1, "0001_init", "CREATE TABLE bookings (id TEXT PRIMARY KEY)"),
///     // A new nullable column: the release built for version 1 keeps working.
///     Migration::expand(2, "0002_note", "ALTER TABLE bookings ADD COLUMN note TEXT"),
///     // PostgreSQL: an index built without blocking writes, outside any
///     // transaction (one statement, safe to run again).
///     Migration::expand(
///         3,
///         "0003_by_note",
///         "CREATE INDEX CONCURRENTLY IF NOT EXISTS bookings_by_note ON bookings (note)",
///     )
///     .runs_beside(1)
///     .outside_transaction(),
/// ];
/// assert_eq!(MIGRATIONS.len(), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Its number in its ledger, from 1 up, increasing.
    pub version: i64,
    /// Its name, recorded in the ledger so that an earlier release can
    /// name it (`0004_drop_description`).
    pub name: &'static str,
    /// The SQL, applied once.
    pub sql: &'static str,
    /// The oldest version of its ledger whose code keeps working on a
    /// database with this migration applied: `version - 1` for an
    /// additive migration, lower when older releases survive it too,
    /// `version` when nothing older does.
    pub runs_beside: i64,
    /// Applied on its own, outside any transaction (PostgreSQL's `CREATE
    /// INDEX CONCURRENTLY`, which a transaction refuses): one statement,
    /// written so that it can run again (`IF NOT EXISTS`), and recorded in
    /// the ledger once it succeeded.
    pub outside_transaction: bool,
    /// How the tables it creates are placed when the database is a Citus
    /// coordinator ([`Placement`]); none by default (they stay on the
    /// coordinator).
    pub placements: &'static [Placement],
}

impl Migration {
    /// An additive (expand) migration: a new table, a nullable or
    /// defaulted column, a new index. Code built for the version before
    /// keeps working beside it; say so of older versions too with
    /// [`Migration::runs_beside`].
    pub const fn expand(version: i64, name: &'static str, sql: &'static str) -> Self {
        Self {
            version,
            name,
            sql,
            runs_beside: version - 1,
            outside_transaction: false,
            placements: &[],
        }
    }

    /// A migration nothing older runs beside (contract): a drop, a rename,
    /// a `NOT NULL` without a default, a change of what existing rows
    /// mean; and a ledger's first migration. Releases built for an earlier
    /// version refuse a database it was applied to.
    pub const fn contract(version: i64, name: &'static str, sql: &'static str) -> Self {
        Self {
            version,
            name,
            sql,
            runs_beside: version,
            outside_transaction: false,
            placements: &[],
        }
    }

    /// Code built for `version` of this ledger and later keeps working
    /// beside this migration (an expand migration that older releases
    /// survive too: `runs_beside(0)` for any).
    pub const fn runs_beside(mut self, version: i64) -> Self {
        self.runs_beside = version;
        self
    }

    /// On a Citus coordinator, places the tables this migration creates:
    /// `Migration::expand(…).places(&[Placement::by_caller("charges",
    /// "caller"), Placement::reference("stock")])` (docs/CITUS.md). Applied
    /// after every migration, each time the store migrates, to tables not
    /// yet placed.
    pub const fn places(mut self, placements: &'static [Placement]) -> Self {
        self.placements = placements;
        self
    }

    /// Applies this migration on its own, outside any transaction (see
    /// [`Migration::outside_transaction`](Self#structfield.outside_transaction)).
    pub const fn outside_transaction(mut self) -> Self {
        self.outside_transaction = true;
        self
    }
}

/// One backend's migrations for one ledger, in order, versions increasing
/// from 1.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Migrations(pub &'static [Migration]);

/// What a ledger records of a migration applied after the version a
/// release was built for: what that release judges it by.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(feature = "sqlite"), allow(unreachable_pub))]
pub struct Applied {
    /// Its version.
    pub version: i64,
    /// The oldest version whose code runs beside it; `None` when the
    /// ledger does not say (a row written before ledgers recorded it),
    /// which counts as nothing older.
    pub runs_beside: Option<i64>,
    /// Its name, when the ledger records one.
    pub name: Option<String>,
}

impl Applied {
    /// `version 4 (0004_drop_description)`, or `version 4`.
    fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("version {} ({name})", self.version),
            None => format!("version {}", self.version),
        }
    }
}

/// How a release stands with a database's ledger it can serve on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// The ledger is at the release's own latest version.
    Current,
    /// A later release migrated further, and each later migration runs
    /// beside this release: the version found.
    Ahead(i64),
}

impl Migrations {
    /// The version this server needs.
    pub(crate) fn latest(&self) -> i64 {
        self.0.last().map_or(0, |m| m.version)
    }

    /// The migrations a database at `current` still needs, in order.
    pub(crate) fn after(&self, current: i64) -> impl Iterator<Item = &'static Migration> + '_ {
        self.0.iter().filter(move |m| m.version > current)
    }

    /// Whether a release built for these migrations can serve on a
    /// database whose `ledger` is at version `found`, with `later` the
    /// ledger's rows above [`Migrations::latest`] (empty unless `found`
    /// is above it). An error names the migration that stands in the way:
    /// the first later one that does not run beside this release, or the
    /// first of this release's own that is not applied.
    pub(crate) fn check_in(&self, ledger: &str, found: i64, later: &[Applied]) -> Result<Fit> {
        let latest = self.latest();
        if found == latest {
            return Ok(Fit::Current);
        }
        if found < latest {
            let missing = self
                .after(found)
                .next()
                .map_or_else(String::new, |m| format!(" from {} ({})", m.version, m.name));
            return Err(StoreError::incompatible_schema(format!(
                "the database's {ledger} is at version {found} and this release needs version \
                 {latest}: the migrations{missing} on are not applied (migrate the database first)"
            )));
        }
        if let Some(blocking) = later
            .iter()
            .find(|m| m.version > latest && m.runs_beside.unwrap_or(m.version) > latest)
        {
            let beside = match blocking.runs_beside {
                Some(v) if v < blocking.version => {
                    format!("it runs beside releases built for version {v} and later")
                }
                _ => "it runs beside no release built for an earlier version".to_owned(),
            };
            return Err(StoreError::incompatible_schema(format!(
                "the database's {ledger} has {} applied, which this release (built for version \
                 {latest}) cannot run beside: {beside}",
                blocking.label()
            )));
        }
        Ok(Fit::Ahead(found))
    }
}

/// Logs, at a store's start, each ledger that a later release migrated
/// ahead of this one (each later migration runs beside this release).
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "sqlx"))]
pub(crate) fn report(fits: &[(&'static str, Fit)]) {
    for (ledger, fit) in fits {
        if let Fit::Ahead(version) = fit {
            tracing::info!(
                ledger,
                version,
                "the database was migrated by a later release; each later migration runs beside \
                 this one, which serves"
            );
        }
    }
}

/// The statement that reads the version a ledger records (0 for none).
#[cfg_attr(not(feature = "sqlite"), allow(unreachable_pub))]
pub fn version_query(ledger: &str) -> String {
    format!("SELECT coalesce(max(version), 0) FROM {ledger}")
}

/// The columns a ledger table has, for a new one; an older ledger gains
/// `runs_beside` and `name` when it is next migrated.
pub(crate) fn ledger_columns(integer: &str) -> String {
    format!(
        "version {integer} PRIMARY KEY, applied_at {integer} NOT NULL, \
         runs_beside {integer}, name TEXT"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: Migrations = Migrations(&[
        Migration::contract(1, "0001_one", "one"),
        Migration::expand(2, "0002_two", "two"),
    ]);

    fn applied(version: i64, runs_beside: Option<i64>) -> Applied {
        Applied {
            version,
            runs_beside,
            name: Some(format!("000{version}_later")),
        }
    }

    #[test]
    fn pending_migrations_follow_the_current_version() {
        assert_eq!(TWO.latest(), 2);
        let after = |v| TWO.after(v).map(|m| m.version).collect::<Vec<_>>();
        assert_eq!(after(0), [1, 2]);
        assert_eq!(after(1), [2]);
        assert!(after(2).is_empty());
    }

    #[test]
    fn expand_runs_beside_the_version_before_and_contract_beside_none() {
        let expand = Migration::expand(4, "0004_x", "");
        assert_eq!(expand.runs_beside, 3);
        assert!(!expand.outside_transaction);
        assert_eq!(expand.runs_beside(1).runs_beside, 1);
        assert_eq!(Migration::contract(4, "0004_x", "").runs_beside, 4);
        assert!(expand.outside_transaction().outside_transaction);
    }

    #[test]
    fn the_release_s_own_version_fits() {
        assert_eq!(TWO.check_in(APP_LEDGER, 2, &[]).unwrap(), Fit::Current);
    }

    #[test]
    fn a_database_behind_the_release_is_refused_naming_what_it_lacks() {
        for found in [0, 1] {
            let e = TWO.check_in(APP_LEDGER, found, &[]).unwrap_err();
            assert!(e.is_unavailable());
            assert_eq!(e.kind(), crate::store::StoreErrorKind::IncompatibleSchema);
            let text = e.to_string();
            assert!(text.contains(&format!("at version {found}")), "{text}");
            assert!(text.contains(APP_LEDGER), "{text}");
        }
        let text = TWO.check_in(APP_LEDGER, 1, &[]).unwrap_err().to_string();
        assert!(text.contains("from 2 (0002_two)"), "{text}");
    }

    #[test]
    fn later_migrations_that_run_beside_the_release_keep_it_serving() {
        let later = [applied(3, Some(2)), applied(4, Some(0))];
        assert_eq!(
            TWO.check_in(ENGINE_LEDGER, 4, &later).unwrap(),
            Fit::Ahead(4)
        );
    }

    #[test]
    fn a_later_contract_migration_is_refused_by_name() {
        let later = [
            applied(3, Some(2)),
            applied(4, Some(4)),
            applied(5, Some(2)),
        ];
        let text = TWO.check_in(APP_LEDGER, 5, &later).unwrap_err().to_string();
        assert!(text.contains("version 4 (0004_later)"), "{text}");
        assert!(text.contains("built for version 2"), "{text}");
        assert!(text.contains("beside no release"), "{text}");
    }

    #[test]
    fn a_later_migration_that_needs_a_newer_release_is_refused_by_name() {
        let later = [applied(3, Some(2)), applied(4, Some(3))];
        let text = TWO.check_in(APP_LEDGER, 4, &later).unwrap_err().to_string();
        assert!(text.contains("version 4 (0004_later)"), "{text}");
        assert!(text.contains("built for version 3 and later"), "{text}");
    }

    #[test]
    fn a_later_row_that_does_not_say_runs_beside_nothing_older() {
        let later = [Applied {
            version: 3,
            runs_beside: None,
            name: None,
        }];
        let text = TWO.check_in(APP_LEDGER, 3, &later).unwrap_err().to_string();
        assert!(text.contains("has version 3 applied"), "{text}");
    }
}
