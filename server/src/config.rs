//! Command-line flags, each also read from its environment variable
//! (flags win), as docs/CONTRACT.md section 2 fixes them.

use clap::{Parser, ValueEnum};
use http::HeaderValue;
use std::path::PathBuf;
use std::time::Duration;

/// The server's configuration.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "server",
    version,
    about = "Exactly-once checkout API: every POST carries an Idempotency-Key, recorded in the same transaction as the charge."
)]
pub struct Config {
    /// Address to bind; port 0 picks a free port (printed as `listening on http://ADDR`).
    #[arg(
        long,
        env = "LISTEN",
        default_value = "127.0.0.1:3000",
        value_name = "ADDR"
    )]
    pub listen: String,

    /// `sqlite://PATH` (created with its folder if missing) or `postgres://...`.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "sqlite://data/shop.db",
        value_name = "URL",
        value_parser = DatabaseUrl::parse
    )]
    pub database: DatabaseUrl,

    /// How long a key's record is kept after its creation (`2s`, `15m`, `24h`, `7d`).
    #[arg(long, env = "KEY_TTL", default_value = "24h", value_name = "DUR", value_parser = positive_duration)]
    pub key_ttl: Duration,

    /// How often expired records are deleted.
    #[arg(long, env = "SWEEP_INTERVAL", default_value = "60s", value_name = "DUR", value_parser = positive_duration)]
    pub sweep_interval: Duration,

    /// Static files served at `/`.
    #[arg(
        long = "www",
        env = "WWW_DIR",
        default_value = "www",
        value_name = "DIR"
    )]
    pub www_dir: PathBuf,

    /// Origins allowed to call the API from another page (repeat the flag,
    /// or a comma list in the environment variable).
    #[arg(
        long = "cors-origin",
        env = "CORS_ORIGINS",
        value_name = "ORIGIN",
        value_delimiter = ',',
        value_parser = parse_origin
    )]
    pub cors_origins: Vec<HeaderValue>,

    /// `full`: answer only once the commit is on disk; `relaxed`: survives a
    /// process kill, not a power loss (benchmarks and tests only).
    #[arg(long, env = "DURABILITY", default_value = "full", value_name = "MODE")]
    pub durability: Durability,

    /// How long a client may take to send a request body before the
    /// request is refused with 408 (a slow body holds no writer slot).
    #[arg(long, env = "BODY_TIMEOUT", default_value = "10s", value_name = "DUR", value_parser = positive_duration)]
    pub body_timeout: Duration,

    /// Honour the `X-Chaos` request header (demo and tests only).
    #[arg(long, env = "CHAOS")]
    pub chaos: bool,
}

/// When an answer may leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Durability {
    /// After the commit is on disk (`synchronous=FULL`).
    Full,
    /// After the commit is in the OS (`synchronous=NORMAL`).
    Relaxed,
}

/// Which database to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// An embedded SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL server.
    Postgres(String),
}

impl DatabaseUrl {
    /// Parses `sqlite://PATH` or `postgres://…` / `postgresql://…`.
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
            "{raw:?} is neither sqlite://PATH nor postgres://..."
        ))
    }
}

fn positive_duration(raw: &str) -> Result<Duration, String> {
    match humantime::parse_duration(raw) {
        Ok(d) if d.is_zero() => Err("must be longer than zero".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(format!("{e} (examples: 2s, 15m, 24h, 7d)")),
    }
}

fn parse_origin(raw: &str) -> Result<HeaderValue, String> {
    let raw = raw.trim();
    let rest = raw
        .strip_prefix("http://")
        .or_else(|| raw.strip_prefix("https://"))
        .ok_or_else(|| format!("{raw:?} is not an origin such as http://localhost:8080"))?;
    if rest.is_empty() || rest.contains('/') {
        return Err(format!(
            "{raw:?} is not an origin such as http://localhost:8080 (no path)"
        ));
    }
    HeaderValue::from_str(raw).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        Config::try_parse_from(std::iter::once("server").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_follow_the_contract() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.listen, "127.0.0.1:3000");
        assert_eq!(c.database, DatabaseUrl::Sqlite("data/shop.db".into()));
        assert_eq!(c.key_ttl, Duration::from_secs(24 * 3600));
        assert_eq!(c.sweep_interval, Duration::from_secs(60));
        assert_eq!(c.www_dir, PathBuf::from("www"));
        assert!(c.cors_origins.is_empty());
        assert_eq!(c.durability, Durability::Full);
        assert!(!c.chaos);
    }

    #[test]
    fn flags_parse_durations_origins_and_modes() {
        let c = parse(&[
            "--key-ttl",
            "7d",
            "--sweep-interval",
            "2s",
            "--cors-origin",
            "http://a:1",
            "--cors-origin",
            "https://b.example",
            "--durability",
            "relaxed",
            "--chaos",
            "--database",
            "sqlite:///tmp/x/shop.db",
        ])
        .unwrap();
        assert_eq!(c.key_ttl, Duration::from_secs(7 * 86400));
        assert_eq!(c.sweep_interval, Duration::from_secs(2));
        assert_eq!(c.cors_origins.len(), 2);
        assert_eq!(c.durability, Durability::Relaxed);
        assert!(c.chaos);
        assert_eq!(c.database, DatabaseUrl::Sqlite("/tmp/x/shop.db".into()));
    }

    #[test]
    fn bad_flags_are_refused() {
        for args in [
            &["--key-ttl", "soon"][..],
            &["--key-ttl", "0s"],
            &["--durability", "maybe"],
            &["--database", "mysql://x"],
            &["--database", "sqlite://"],
            &["--cors-origin", "localhost:8080"],
            &["--cors-origin", "http://a/path"],
            &["--no-such-flag"],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
    }
}
