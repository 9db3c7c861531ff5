//! Which database a service was pointed at, read from its URL: what an
//! application on [`Any`](crate::Any) parses its `--database` flag into
//! before it opens the store the URL names.

use crate::secrets::Redacted;
use std::path::PathBuf;

/// A database named by URL: `sqlite://PATH` or `postgres://…` (also
/// `postgresql://…`). Its `Debug`, and a parse error, show a password as
/// `***`.
///
/// ```
/// use exactly_once::DatabaseUrl;
///
/// let url = DatabaseUrl::parse("sqlite://data/shop.db").unwrap();
/// assert_eq!(url, DatabaseUrl::Sqlite("data/shop.db".into()));
/// let url = DatabaseUrl::parse("postgres://app:secret@db/shop").unwrap();
/// assert!(!format!("{url:?}").contains("secret"));
/// assert!(DatabaseUrl::parse("mysql://db/shop").is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// An embedded SQLite file (created with its folder if missing).
    Sqlite(PathBuf),
    /// A PostgreSQL database, the whole URL.
    Postgres(String),
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            Self::Postgres(url) => f.debug_tuple("Postgres").field(&Redacted(url)).finish(),
        }
    }
}

impl DatabaseUrl {
    /// Parses `sqlite://PATH` or `postgres://…` / `postgresql://…`; the
    /// error says what it expected (a clap `value_parser`).
    pub fn parse(raw: &str) -> Result<Self, String> {
        if let Some(path) = raw.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err("sqlite:// needs a path, e.g. sqlite://data/shop.db".into());
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
            return Ok(Self::Postgres(raw.to_owned()));
        }
        Err(format!(
            "{:?} is neither sqlite://PATH nor postgres://...",
            Redacted(raw)
        ))
    }
}
