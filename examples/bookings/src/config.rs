//! The service's flags, each with an environment variable.

use clap::{Parser, Subcommand};
use exactly_once::secrets::SecretUrl;
use std::time::Duration;

/// `bookings --listen ADDR --database URL --partner-url URL …`
#[derive(Debug, Clone, Parser)]
#[command(
    name = "bookings",
    about = "A seat booking service: exactly-once bookings confirmed at a partner",
    mut_args(|arg| arg.global(true))
)]
pub struct Config {
    /// Instead of serving: `migrate`, a deploy's migration job, or
    /// `operations list|show|retry`, an operator's view of unfinished
    /// bookings (the engine's `exactly_once::operator`).
    #[command(subcommand)]
    pub command: Option<Command>,

    /// The address to listen on (port 0 picks one; the address is printed).
    #[arg(long, env = "BOOKINGS_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,

    /// `sqlite://PATH` or `postgres://USER@HOST:PORT/DB`.
    #[arg(
        long,
        global = true,
        env = "BOOKINGS_DATABASE",
        hide_env_values = true,
        default_value = "sqlite://data/bookings.db",
        value_parser = DatabaseUrl::parse
    )]
    pub database: DatabaseUrl,

    /// The partner that confirms seats (`POST /confirmations`).
    #[arg(
        long,
        global = true,
        env = "BOOKINGS_PARTNER_URL",
        hide_env_values = true,
        default_value = "http://127.0.0.1:8090"
    )]
    pub partner_url: SecretUrl,

    /// How long a partner call may take before it counts as no answer.
    #[arg(long, env = "BOOKINGS_PARTNER_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub partner_timeout: Duration,

    /// How often the completer looks for abandoned bookings.
    #[arg(long, env = "BOOKINGS_COMPLETE_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub complete_interval: Duration,

    /// How long a held booking is its request's before a retry or the
    /// completer may take it over.
    #[arg(long, env = "BOOKINGS_OPERATION_LEASE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub operation_lease: Duration,

    /// `full`: answers leave once the commit is on disk; `relaxed`: once
    /// it is in the operating system (survives a process kill, not a power
    /// cut).
    #[arg(long, env = "BOOKINGS_DURABILITY", default_value = "full")]
    pub durability: Durability,

    /// Start without migrating: the database must already be at a schema
    /// this release serves on (`bookings migrate` ran first).
    #[arg(long, env = "BOOKINGS_NO_MIGRATE", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_migrate: bool,
}

/// What the binary does instead of serving.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Apply the database's migrations and exit (a deploy's migration
    /// job): 0 once the database is at a schema this release serves on.
    Migrate,
    /// An operator's view of the bookings.
    #[command(subcommand)]
    Operations(crate::operations::Operations),
}

/// Where the bookings are kept: the engine's `sqlite://PATH` or
/// `postgres://…`.
pub use exactly_once::DatabaseUrl;

/// When an answer may leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    /// After the commit is on disk.
    Full,
    /// After the commit is in the operating system.
    Relaxed,
}

impl From<Durability> for exactly_once::Durability {
    fn from(d: Durability) -> Self {
        match d {
            Durability::Full => Self::Full,
            Durability::Relaxed => Self::Relaxed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls() {
        assert_eq!(
            DatabaseUrl::parse("sqlite://data/b.db"),
            Ok(DatabaseUrl::Sqlite("data/b.db".into()))
        );
        assert_eq!(
            DatabaseUrl::parse("postgres://u@h:5432/d"),
            Ok(DatabaseUrl::Postgres("postgres://u@h:5432/d".into()))
        );
        assert!(DatabaseUrl::parse("sqlite://").is_err());
        assert!(DatabaseUrl::parse("mysql://x").is_err());
    }

    #[test]
    fn migrate_takes_the_service_s_flags() {
        let c =
            Config::try_parse_from(["bookings", "migrate", "--database", "sqlite://b.db"]).unwrap();
        assert_eq!(c.command, Some(Command::Migrate));
        assert_eq!(c.database, DatabaseUrl::Sqlite("b.db".into()));
        let c = Config::try_parse_from(["bookings", "--no-migrate"]).unwrap();
        assert!(c.no_migrate && c.command.is_none());
    }
}
