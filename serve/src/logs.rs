//! Structured logs on stderr (`RUST_LOG` filters, `LOG_FORMAT=json` for
//! JSON lines), every URL's password shown as `***`
//! ([`exactly_once::secrets::redact`]). Stdout carries only the
//! `listening on` line.

use exactly_once::secrets::RedactedStderr;
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber with `default_filter` unless `RUST_LOG`
/// says otherwise; a second call is a no-op.
pub fn init(default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| RedactedStderr)
        // Colours only on a terminal and without NO_COLOR: log files stay clean.
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none());
    let _ = if std::env::var("LOG_FORMAT").is_ok_and(|v| v == "json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
