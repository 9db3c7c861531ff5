//! [`StoreOptions`]: how every store opens (SQLite, PostgreSQL, sqlx), one
//! type with a setter per setting.

use crate::store::schema::{Migration, Migrations};
use std::time::Duration;

/// When an answer may leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// After the commit is on disk (SQLite `synchronous=FULL`, PostgreSQL
    /// `synchronous_commit=on`).
    #[default]
    Full,
    /// After the commit is in the operating system (SQLite
    /// `synchronous=NORMAL`, PostgreSQL `synchronous_commit=off`): survives
    /// a process kill, not a power loss. For benchmarks and tests.
    Relaxed,
}

/// How a store opens, whichever the database: your migrations, whether to
/// apply them, durability and how long each thing the store keeps lives.
/// The database itself is the store's `open` argument (a file, a URL, your
/// pool).
///
/// ```
/// use exactly_once::{Durability, StoreOptions};
/// use std::time::Duration;
///
/// let options = StoreOptions::new()
///     .key_ttl(Duration::from_secs(3600))
///     .durability(Durability::Full);
/// ```
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub(crate) durability: Durability,
    pub(crate) migrations: Migrations,
    pub(crate) migrate: bool,
    pub(crate) application_name: String,
    pub(crate) limits: TimeLimits,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl StoreOptions {
    /// Full durability, a 24-hour key TTL, a 30-second lease, operations
    /// set aside after 12 hours of failures, tombstones and sent messages
    /// kept a week, migrations applied, none of yours.
    pub fn new() -> Self {
        Self {
            durability: Durability::Full,
            migrations: Migrations::default(),
            migrate: true,
            application_name: "exactly-once".to_owned(),
            limits: TimeLimits::default(),
        }
    }

    /// Your migrations, from version 1 up, each applied once (each
    /// [`Migration`] says which earlier releases can run beside it), before
    /// the engine's and recorded in `schema_migrations`.
    pub fn migrations(mut self, migrations: &'static [Migration]) -> Self {
        self.migrations = Migrations(migrations);
        self
    }

    /// Whether opening the store applies the migrations the database
    /// still needs (yes by default; on SQLite it also creates the file).
    /// `false`: it only checks that this release can serve on the schema
    /// it finds, and refuses one that is behind it (a deploy whose
    /// migration job migrates first).
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// When an answer may leave ([`Durability::Full`] by default).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// How long a key's record lives (24 hours by default).
    pub fn key_ttl(mut self, key_ttl: Duration) -> Self {
        self.limits.key_ttl = key_ttl;
        self
    }

    /// How long a stopped operation is its holder's before a retry or
    /// the completer may take it over (30 seconds by default). The holder
    /// renews it while its step runs, every third of it, so a step may
    /// take longer.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.limits.lease = lease;
        self
    }

    /// How long after its start an operation whose step keeps failing
    /// is still retried; past that, its next failure sets it aside for
    /// an operator (12 hours by default). Keep it below how long the
    /// services your steps call keep their idempotency keys (Stripe:
    /// 24 hours): a step retried after they forgot its key could do
    /// the work twice.
    pub fn attention_after(mut self, after: Duration) -> Self {
        self.limits.attention_after = after;
        self
    }

    /// How long an expired record's tombstone (the key's generation) is
    /// kept (7 days by default). Keep it at least as long as the
    /// services your steps call keep their idempotency keys.
    pub fn tombstone_ttl(mut self, ttl: Duration) -> Self {
        self.limits.tombstone_ttl = ttl;
        self
    }

    /// How long a sent outbox message is kept before the sweeper
    /// deletes it (7 days by default).
    pub fn outbox_retention(mut self, retention: Duration) -> Self {
        self.limits.outbox_retention = retention;
        self
    }

    /// How PostgreSQL connections the store opens from a URL name
    /// themselves to the server (`pg_stat_activity.application_name`;
    /// `exactly-once` by default). Not used on SQLite, nor on a pool of
    /// yours.
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = name.into();
        self
    }
}

/// How long each thing a store keeps may live or be held, on the
/// database's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeLimits {
    /// A key's record, from its answer.
    pub(crate) key_ttl: Duration,
    /// A stopped operation's lease, renewed while its step runs.
    pub(crate) lease: Duration,
    /// How long after its start a failing operation is retried before it
    /// is set aside for an operator.
    pub(crate) attention_after: Duration,
    /// An expired record's tombstone (the key's generation).
    pub(crate) tombstone_ttl: Duration,
    /// A sent outbox message.
    pub(crate) outbox_retention: Duration,
}

impl Default for TimeLimits {
    fn default() -> Self {
        const HOUR: u64 = 3600;
        Self {
            key_ttl: Duration::from_secs(24 * HOUR),
            lease: Duration::from_secs(30),
            attention_after: Duration::from_secs(12 * HOUR),
            tombstone_ttl: Duration::from_secs(7 * 24 * HOUR),
            outbox_retention: Duration::from_secs(7 * 24 * HOUR),
        }
    }
}
