//! Command-line flags, each also read from a `PSP_*` environment variable
//! (flags win). The names differ from the checkout server's (`LISTEN`,
//! `DATABASE_URL`) so the demo can start both from one shell.

use crate::domain::PaymentMethod;
use clap::Parser;
use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

/// The longest `--latency` accepted.
const MAX_LATENCY: Duration = Duration::from_secs(600);

/// The simulator's configuration; `--help` opens with the crate's
/// description and ends with the API in brief.
#[derive(Debug, Clone, Parser)]
#[command(version, about, after_help = api_summary())]
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
        hide_env_values = true,
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

    /// Serve over TLS with this PEM certificate chain (with `--tls-key`).
    #[arg(long, env = "PSP_TLS_CERT", value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The PEM private key of `--tls-cert`.
    #[arg(long, env = "PSP_TLS_KEY", value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// What `--help` says after the flags: the endpoints, and the test cards
/// from the card list itself, so a card added is a card shown.
fn api_summary() -> String {
    let mut text = String::from(
        "API (docs/PSP.md):\n  \
         POST /v1/charges    charges a test card, once per Idempotency-Key\n  \
         GET  /v1/charges    the ledger, newest first\n  \
         POST /admin/faults  the next charges fail, charge and drop the answer, wait, \
         or find the provider down\n\n\
         Test cards:\n",
    );
    for card in PaymentMethod::ALL {
        let _ = match card.decline() {
            None => writeln!(text, "  {:<41}succeeds", card.as_str()),
            Some(d) => writeln!(text, "  {:<41}declined ({})", card.as_str(), d.decline_code),
        };
    }
    text
}

fn parse_database(raw: &str) -> Result<PathBuf, String> {
    match raw.strip_prefix("sqlite://") {
        Some("") => Err("sqlite:// needs a path, e.g. sqlite://data/psp.db".into()),
        Some(path) => Ok(PathBuf::from(path)),
        None => Err(format!(
            "{:?} is not sqlite://PATH",
            exactly_once::secrets::Redacted(raw)
        )),
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
        let tls: Config = parse(&["--tls-cert", "/c.pem", "--tls-key", "/k.pem"]).unwrap();
        assert_eq!(tls.tls_cert, Some(PathBuf::from("/c.pem")));
        assert_eq!(tls.tls_key, Some(PathBuf::from("/k.pem")));
    }

    #[test]
    fn help_ends_with_the_endpoints_and_every_test_card() {
        use clap::CommandFactory;
        let help = Config::command().render_long_help().to_string();
        for line in [
            "POST /v1/charges",
            "GET  /v1/charges",
            "POST /admin/faults",
            "pm_card_visa                             succeeds",
            "pm_card_chargeDeclinedInsufficientFunds  declined (insufficient_funds)",
        ] {
            assert!(help.contains(line), "{line:?} is missing from:\n{help}");
        }
        for card in PaymentMethod::ALL {
            assert!(help.contains(card.as_str()), "{card} is missing");
        }
    }

    #[test]
    fn bad_flags_are_refused() {
        assert_refused::<Config>(&[
            &["--latency", "soon"],
            &["--latency", "11m"],
            &["--database", "postgres://x"],
            &["--database", "sqlite://"],
            &["--tls-cert", "/c.pem"],
            &["--tls-key", "/k.pem"],
            &["--no-such-flag"],
        ]);
    }
}
