//! Command-line flags, each also read from a `PSP_*` environment variable
//! (flags win). The names differ from the checkout server's (`LISTEN`,
//! `DATABASE_URL`) so the demo can start both from one shell.

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

/// The longest `--latency` accepted.
const MAX_LATENCY: Duration = Duration::from_secs(600);

/// The simulator's configuration; `--help` opens with the crate's description.
#[derive(Debug, Clone, Parser)]
#[command(version, about)]
pub struct Config {
    /// Address to bind; port 0 picks a free port (printed as `listening on http://ADDR`).
    #[arg(
        long,
        env = "PSP_LISTEN",
        default_value = "127.0.0.1:3001",
        value_name = "ADDR"
    )]
    pub listen: String,

    /// `sqlite://PATH`: the simulator's own database (created with its folder if missing).
    #[arg(
        long,
        env = "PSP_DATABASE_URL",
        default_value = "sqlite://data/psp.db",
        value_name = "URL",
        value_parser = parse_database
    )]
    pub database: PathBuf,

    /// Added to every charge before it runs (`0s`, `200ms`, `2s`).
    #[arg(
        long,
        env = "PSP_LATENCY",
        default_value = "0s",
        value_name = "DUR",
        value_parser = parse_latency
    )]
    pub latency: Duration,
}

fn parse_database(raw: &str) -> Result<PathBuf, String> {
    match raw.strip_prefix("sqlite://") {
        Some("") => Err("sqlite:// needs a path, e.g. sqlite://data/psp.db".into()),
        Some(path) => Ok(PathBuf::from(path)),
        None => Err(format!("{raw:?} is not sqlite://PATH")),
    }
}

fn parse_latency(raw: &str) -> Result<Duration, String> {
    match humantime::parse_duration(raw) {
        Ok(d) if d > MAX_LATENCY => Err(format!(
            "at most {}",
            humantime::format_duration(MAX_LATENCY)
        )),
        Ok(d) => Ok(d),
        Err(e) => Err(format!("{e} (examples: 0s, 200ms, 2s)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serve::flags::{assert_refused, parse};

    #[test]
    fn defaults_are_the_documented_ones() {
        // Only meaningful where the PSP_* variables are unset.
        if std::env::vars().any(|(name, _)| name.starts_with("PSP_")) {
            return;
        }
        let c: Config = parse(&[]).unwrap();
        assert_eq!(c.listen, "127.0.0.1:3001");
        assert_eq!(c.database, PathBuf::from("data/psp.db"));
        assert_eq!(c.latency, Duration::ZERO);
    }

    #[test]
    fn flags_parse_addresses_paths_and_durations() {
        let c: Config = parse(&[
            "--listen",
            "127.0.0.1:0",
            "--database",
            "sqlite:///tmp/x/psp.db",
            "--latency",
            "200ms",
        ])
        .unwrap();
        assert_eq!(c.listen, "127.0.0.1:0");
        assert_eq!(c.database, PathBuf::from("/tmp/x/psp.db"));
        assert_eq!(c.latency, Duration::from_millis(200));
    }

    #[test]
    fn bad_flags_are_refused() {
        assert_refused::<Config>(&[
            &["--latency", "soon"],
            &["--latency", "11m"],
            &["--database", "postgres://x"],
            &["--database", "sqlite://"],
            &["--no-such-flag"],
        ]);
    }
}
