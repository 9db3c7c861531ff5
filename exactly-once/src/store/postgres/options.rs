//! Where and how a PostgreSQL store connects, and the settings its
//! transactions run under.

use crate::store::schema::Migrations;
use crate::store::{Durability, Lifetimes};
use std::time::Duration;

/// How long a request waits for another transaction holding its key (or
/// a stock row) before answering 409 / 503.
pub(crate) const LOCK_TIMEOUT: &str = "5s";

/// Where and how to connect. Its `Debug` shows the URL's password as
/// `***`.
#[derive(Clone)]
pub struct PostgresOptions {
    /// `postgres://user:password@host:port/database`, with libpq's TLS
    /// (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`) and timeout
    /// parameters and our `response_timeout` (`connect`).
    pub url: String,
    /// `synchronous_commit=on` or `off`.
    pub durability: Durability,
    /// How long a key's record lives.
    pub key_ttl: Duration,
    /// How long a stopped operation is its holder's.
    pub lease: Duration,
    /// Your own tables' migrations, applied before the engine's (under the
    /// same advisory lock) and recorded in `schema_migrations`.
    pub migrations: Migrations,
    /// How the connections name themselves to the server
    /// (`pg_stat_activity.application_name`); `exactly-once` by default.
    pub application_name: String,
    /// How long after its start a failing operation is set aside (12
    /// hours by default).
    pub attention_after: Duration,
    /// How long an expired record's tombstone is kept (7 days by default).
    pub tombstone_ttl: Duration,
    /// How long a sent outbox message is kept (7 days by default).
    pub outbox_retention: Duration,
    /// Whether opening applies the migrations the database still needs;
    /// `false`: the database must be at a schema this release can serve
    /// on ([`schema`](crate::store::schema)).
    pub migrate: bool,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("url", &crate::secrets::Redacted(&self.url))
            .field("durability", &self.durability)
            .field("key_ttl", &self.key_ttl)
            .field("lease", &self.lease)
            .field("migrations", &self.migrations)
            .field("application_name", &self.application_name)
            .field("attention_after", &self.attention_after)
            .field("tombstone_ttl", &self.tombstone_ttl)
            .field("outbox_retention", &self.outbox_retention)
            .field("migrate", &self.migrate)
            .finish()
    }
}

impl PostgresOptions {
    /// The database at `url`, with the defaults (full durability, a
    /// 24-hour TTL, a 30-second lease) and no migrations of yours.
    pub fn new(url: impl Into<String>) -> Self {
        let defaults = Lifetimes::default();
        Self {
            url: url.into(),
            durability: Durability::Full,
            key_ttl: defaults.key_ttl,
            lease: defaults.lease,
            migrations: Migrations::default(),
            application_name: "exactly-once".to_owned(),
            attention_after: defaults.attention_after,
            tombstone_ttl: defaults.tombstone_ttl,
            outbox_retention: defaults.outbox_retention,
            migrate: true,
        }
    }

    store_option_setters!();

    /// How the connections name themselves to the server.
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = name.into();
        self
    }
}
