//! libpq's `sslmode`, and which one a URL gets: secure by default.
//! Without `sslmode`, a URL with a host that is neither loopback nor a
//! Unix socket means `verify-full`; loopback and sockets keep libpq's
//! `prefer`. `sslrootcert=system` means `verify-full` and refuses a weaker
//! mode (as libpq 16); `verify-ca` without `sslrootcert` checks the name
//! too (a public CA's chain proves nothing without it).

use tokio_postgres::config::Host;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it, unchecked; else plain.
    Prefer,
    /// TLS, unchecked (checked as `verify-ca` with an explicit `sslrootcert`).
    Require,
    /// TLS, the chain checked against the roots.
    VerifyCa,
    /// TLS, the chain and the host's name checked.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, String> {
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other}: use disable, prefer, require, verify-ca or verify-full"
                ))
            }
        })
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

impl PartialOrd for SslMode {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.rank().cmp(&other.rank()))
    }
}

impl SslMode {
    fn rank(self) -> u8 {
        match self {
            Self::Disable => 0,
            Self::Prefer => 1,
            Self::Require => 2,
            Self::VerifyCa => 3,
            Self::VerifyFull => 4,
        }
    }
}

/// `sslmode` as given, or its default: `verify-full` to a host off
/// loopback, `prefer` on loopback and Unix sockets. `sslrootcert=system`
/// means `verify-full` and refuses a weaker mode, as libpq 16; `verify-ca`
/// with the platform's roots (no `sslrootcert`) checks the name too.
pub(super) fn ssl_mode(
    given: Option<&str>,
    root_cert: Option<&str>,
    local: bool,
) -> Result<SslMode, String> {
    let system = root_cert == Some("system");
    match given.map(SslMode::parse).transpose()? {
        Some(SslMode::VerifyFull) => Ok(SslMode::VerifyFull),
        Some(weak) if system => Err(format!(
            "sslmode={} cannot be used with sslrootcert=system: use sslmode=verify-full \
             (or leave sslmode out)",
            weak.as_str()
        )),
        Some(SslMode::VerifyCa) if root_cert.is_none() => Ok(SslMode::VerifyFull),
        Some(mode) => Ok(mode),
        None if system || !local => Ok(SslMode::VerifyFull),
        None => Ok(SslMode::Prefer),
    }
}

/// Whether a host, by its name, is this machine: a Unix socket,
/// `localhost` or a loopback address.
pub(super) fn is_local(host: &Host) -> bool {
    match host {
        Host::Unix(_) => true,
        Host::Tcp(name) => {
            let name = name.trim_start_matches('[').trim_end_matches(']');
            name.eq_ignore_ascii_case("localhost")
                || name
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
    }
}
