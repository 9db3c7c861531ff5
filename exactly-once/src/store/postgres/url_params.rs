//! libpq's URL parameters as the tokio-postgres store reads them: TLS
//! (`sslmode` and its files), the bounds on a hung host and our
//! `response_timeout` (see [`super::connect`]).

use super::sslmode::SslMode;
use super::sslmode::{is_local, ssl_mode};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;
use tokio_postgres::config::SslMode as PgSslMode;

/// Defaults that bound a hung primary (no request waits more than 10 s):
/// each host gets this long to connect, authenticate and say whether it
/// takes writes.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Idle time before the first keepalive probe.
pub(crate) const DEFAULT_KEEPALIVES_IDLE: Duration = Duration::from_secs(10);
/// Time between probes.
pub(crate) const DEFAULT_KEEPALIVES_INTERVAL: Duration = Duration::from_secs(2);
/// Probes unanswered before the connection is dropped.
pub(crate) const DEFAULT_KEEPALIVES_COUNT: u32 = 3;
/// How long sent data may stay unacknowledged.
pub(crate) const DEFAULT_TCP_USER_TIMEOUT: Duration = Duration::from_secs(9);
/// How long a server that owes an answer may stay silent. Longer than the
/// store's `lock_timeout` (5 s), the longest a healthy server makes a
/// statement of the engine wait.
pub(crate) const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(6);
/// A URL parameter that cannot be used; the message names it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ParameterError(String);

/// libpq's `target_session_attrs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SessionAttrs {
    Any,
    ReadWrite,
    ReadOnly,
    Primary,
    Standby,
}

/// What the URL says about connecting, beyond what tokio-postgres reads.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The URL without the parameters read here, parsed by tokio-postgres
    /// (hosts, ports, user, database, password, `application_name`, …).
    pub(crate) config: tokio_postgres::Config,
    /// `sslmode`; by default `verify-full` off loopback, `prefer` on
    /// loopback and Unix sockets.
    pub(crate) ssl_mode: SslMode,
    /// Whether the URL gave `sslmode` (or `sslrootcert=system`).
    pub(crate) ssl_mode_given: bool,
    /// Whether every host is loopback (`localhost`, `127.0.0.0/8`, `::1`)
    /// or a Unix socket, judged by its name.
    pub(crate) local: bool,
    /// `sslrootcert`: a PEM file, or `system` for the platform's roots.
    pub(crate) root_cert: Option<PathBuf>,
    /// `sslcert` and `sslkey`: a client certificate.
    pub(crate) client_cert: Option<(PathBuf, PathBuf)>,
    /// `connect_timeout`, per host; `None` for 0 (no bound).
    pub(crate) connect_timeout: Option<Duration>,
    /// `keepalives` (1 or 0).
    pub(crate) keepalives: bool,
    /// `keepalives_idle`.
    pub(crate) keepalives_idle: Duration,
    /// `keepalives_interval`.
    pub(crate) keepalives_interval: Duration,
    /// `keepalives_count`.
    pub(crate) keepalives_count: u32,
    /// `tcp_user_timeout` (milliseconds in the URL); `None` for 0.
    pub(crate) tcp_user_timeout: Option<Duration>,
    /// `response_timeout` (ours, seconds); `None` for 0.
    pub(crate) response_timeout: Option<Duration>,
    pub(super) target: SessionAttrs,
}

impl Settings {
    /// Reads the parameters of a `postgres://` URL that this module
    /// handles and hands the rest to tokio-postgres.
    pub(crate) fn parse(url: &str) -> Result<Self, ParameterError> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut rest = Vec::new();
        let mut ours: HashMap<String, String> = HashMap::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(key);
            if OURS.contains(&key.as_str()) {
                ours.insert(key, decode(value));
            } else {
                rest.push(pair);
            }
        }
        let rest_url = if rest.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let mut config: tokio_postgres::Config = rest_url
            .parse()
            .map_err(|e| ParameterError(format!("{}", crate::error::Chain(&e))))?;
        // TLS is done here, below tokio-postgres.
        config.ssl_mode(PgSslMode::Disable);
        let get = |name: &str| ours.get(name).map(String::as_str);
        let seconds = |name: &str, default: Duration| -> Result<Option<Duration>, ParameterError> {
            match get(name) {
                None => Ok(Some(default)),
                Some(v) => {
                    let secs: f64 = v
                        .parse()
                        .ok()
                        .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                        .ok_or_else(|| {
                            ParameterError(format!("{name}={v}: not a number of seconds"))
                        })?;
                    Ok((secs > 0.0).then(|| Duration::from_secs_f64(secs)))
                }
            }
        };
        let whole = |name: &str, default: u64| -> Result<u64, ParameterError> {
            match get(name) {
                None => Ok(default),
                Some(v) => v
                    .parse()
                    .map_err(|_| ParameterError(format!("{name}={v}: not a whole number"))),
            }
        };
        let local = config.get_hosts().iter().all(is_local)
            && config.get_hostaddrs().iter().all(|a| a.is_loopback());
        let ssl_mode =
            ssl_mode(get("sslmode"), get("sslrootcert"), local).map_err(ParameterError)?;
        let client_cert = match (get("sslcert"), get("sslkey")) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((PathBuf::from(cert), PathBuf::from(key))),
            _ => {
                return Err(ParameterError(
                    "sslcert and sslkey go together: give both or neither".into(),
                ))
            }
        };
        // libpq: a connect_timeout of 1 is taken as 2.
        let connect_timeout = seconds("connect_timeout", DEFAULT_CONNECT_TIMEOUT)?
            .map(|d| d.max(Duration::from_secs(2)));
        let keepalives = match get("keepalives") {
            None | Some("1") => true,
            Some("0") => false,
            Some(v) => return Err(ParameterError(format!("keepalives={v}: use 1 or 0"))),
        };
        let target = match get("target_session_attrs") {
            None | Some("any") => SessionAttrs::Any,
            Some("read-write") => SessionAttrs::ReadWrite,
            Some("read-only") => SessionAttrs::ReadOnly,
            Some("primary") => SessionAttrs::Primary,
            Some("standby") => SessionAttrs::Standby,
            Some(v) => {
                return Err(ParameterError(format!(
                    "target_session_attrs={v}: use any, read-write, read-only, primary or standby"
                )))
            }
        };
        let tcp_user_timeout = whole(
            "tcp_user_timeout",
            DEFAULT_TCP_USER_TIMEOUT.as_millis() as u64,
        )?;
        Ok(Self {
            config,
            ssl_mode,
            ssl_mode_given: get("sslmode").is_some() || get("sslrootcert") == Some("system"),
            local,
            root_cert: get("sslrootcert").map(PathBuf::from),
            client_cert,
            connect_timeout,
            keepalives,
            keepalives_idle: seconds("keepalives_idle", DEFAULT_KEEPALIVES_IDLE)?
                .unwrap_or(DEFAULT_KEEPALIVES_IDLE),
            keepalives_interval: seconds("keepalives_interval", DEFAULT_KEEPALIVES_INTERVAL)?
                .unwrap_or(DEFAULT_KEEPALIVES_INTERVAL),
            keepalives_count: whole("keepalives_count", DEFAULT_KEEPALIVES_COUNT.into())?
                .try_into()
                .map_err(|_| ParameterError("keepalives_count: too large".into()))?,
            tcp_user_timeout: (tcp_user_timeout > 0)
                .then(|| Duration::from_millis(tcp_user_timeout)),
            response_timeout: seconds("response_timeout", DEFAULT_RESPONSE_TIMEOUT)?,
            target,
        })
    }
}

impl Settings {
    /// The warning an explicit `sslmode` weaker than `verify-full` to a
    /// host off loopback deserves (what it gives up), or `None`.
    pub(crate) fn downgrade(&self) -> Option<String> {
        if self.local || !self.ssl_mode_given {
            return None;
        }
        let gives_up = match self.ssl_mode {
            SslMode::Disable => "data crosses the network in clear",
            SslMode::Prefer => {
                "data crosses the network in clear when TLS fails, and the server is not verified"
            }
            SslMode::Require if self.root_cert.is_some() => {
                "the server's certificate chain is checked but not its name"
            }
            SslMode::Require => "the server is not verified: anyone on the path can pose as it",
            SslMode::VerifyCa => "the server's certificate chain is checked but not its name",
            SslMode::VerifyFull => return None,
        };
        Some(format!(
            "the PostgreSQL URL asks for sslmode={} to a host that is not loopback: {gives_up} \
             (the default there is verify-full)",
            self.ssl_mode.as_str()
        ))
    }
}

/// The parameters read here, not by tokio-postgres.
pub(super) const OURS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "target_session_attrs",
    "response_timeout",
];

/// Percent-decoding of a URL query's key or value (`+` stays `+`, as
/// libpq reads it; a `%` not followed by two hex digits stays as it is).
pub(super) fn decode(raw: &str) -> String {
    percent_encoding::percent_decode_str(raw)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_parameters_are_read_here_and_the_rest_goes_to_tokio_postgres() {
        let s = Settings::parse(
            "postgres://u@h1:1,h2:2/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem\
             &connect_timeout=4&keepalives_idle=7&keepalives_interval=3&keepalives_count=5\
             &tcp_user_timeout=2500&target_session_attrs=read-write&response_timeout=1.5\
             &application_name=shop",
        )
        .unwrap();
        assert_eq!(s.ssl_mode, SslMode::VerifyFull);
        assert_eq!(s.root_cert, Some(PathBuf::from("/tmp/ca.pem")));
        assert_eq!(s.connect_timeout, Some(Duration::from_secs(4)));
        assert_eq!(s.keepalives_idle, Duration::from_secs(7));
        assert_eq!(s.keepalives_interval, Duration::from_secs(3));
        assert_eq!(s.keepalives_count, 5);
        assert_eq!(s.tcp_user_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(s.response_timeout, Some(Duration::from_millis(1500)));
        assert_eq!(s.target, SessionAttrs::ReadWrite);
        assert_eq!(s.config.get_hosts().len(), 2);
        assert_eq!(s.config.get_application_name(), Some("shop"));
    }

    #[test]
    fn defaults_bound_a_hung_host() {
        let s = Settings::parse("postgres://u@localhost/db").unwrap();
        assert_eq!(s.ssl_mode, SslMode::Prefer);
        assert_eq!(s.connect_timeout, Some(DEFAULT_CONNECT_TIMEOUT));
        assert_eq!(s.response_timeout, Some(DEFAULT_RESPONSE_TIMEOUT));
        assert_eq!(s.tcp_user_timeout, Some(DEFAULT_TCP_USER_TIMEOUT));
        assert!(s.keepalives);
        assert_eq!(
            Settings::parse("postgres://u@h/db?connect_timeout=1")
                .unwrap()
                .connect_timeout,
            Some(Duration::from_secs(2)),
            "libpq's minimum"
        );
        let off =
            Settings::parse("postgres://u@h/db?connect_timeout=0&response_timeout=0").unwrap();
        assert_eq!((off.connect_timeout, off.response_timeout), (None, None));
    }

    #[test]
    fn off_loopback_the_default_is_verify_full_and_a_weaker_mode_is_a_downgrade() {
        let mode = |url: &str| Settings::parse(url).map(|s| (s.ssl_mode, s.downgrade().is_some()));
        for (url, expected) in [
            ("postgres://u@db.example/db", (SslMode::VerifyFull, false)),
            (
                "postgres://u@db.example/db?hostaddr=127.0.0.1",
                (SslMode::VerifyFull, false),
            ),
            (
                "postgres://u@127.0.0.1,db.example/db",
                (SslMode::VerifyFull, false),
            ),
            ("postgres://u@localhost/db", (SslMode::Prefer, false)),
            ("postgres://u@127.0.0.2:5433/db", (SslMode::Prefer, false)),
            ("postgres://u@[::1]/db", (SslMode::Prefer, false)),
            ("postgres://u@%2Ftmp/db", (SslMode::Prefer, false)),
            (
                "postgres://u@localhost/db?sslmode=disable",
                (SslMode::Disable, false),
            ),
            (
                "postgres://u@db.example/db?sslmode=disable",
                (SslMode::Disable, true),
            ),
            (
                "postgres://u@db.example/db?sslmode=prefer",
                (SslMode::Prefer, true),
            ),
            (
                "postgres://u@db.example/db?sslmode=require",
                (SslMode::Require, true),
            ),
            (
                "postgres://u@db.example/db?sslmode=verify-ca",
                (SslMode::VerifyFull, false),
            ),
            (
                "postgres://u@db.example/db?sslmode=verify-ca&sslrootcert=%2Fca.pem",
                (SslMode::VerifyCa, true),
            ),
            (
                "postgres://u@localhost/db?sslrootcert=system",
                (SslMode::VerifyFull, false),
            ),
            (
                "postgres://u@db.example/db?sslmode=verify-full&sslrootcert=system",
                (SslMode::VerifyFull, false),
            ),
        ] {
            assert_eq!(mode(url).unwrap(), expected, "{url}");
        }
        let weak = Settings::parse("postgres://u@db.example/db?sslmode=require&sslrootcert=system")
            .unwrap_err()
            .to_string();
        assert!(weak.contains("sslrootcert=system"), "{weak}");
        let line = Settings::parse("postgres://u@db.example/db?sslmode=disable")
            .unwrap()
            .downgrade()
            .unwrap();
        assert!(
            line.contains("sslmode=disable") && line.contains("in clear"),
            "{line}"
        );
    }

    #[test]
    fn a_bad_parameter_is_named() {
        for (url, named) in [
            ("postgres://u@h/db?sslmode=allow", "sslmode=allow"),
            (
                "postgres://u@h/db?connect_timeout=soon",
                "connect_timeout=soon",
            ),
            (
                "postgres://u@h/db?keepalives_count=-1",
                "keepalives_count=-1",
            ),
            ("postgres://u@h/db?sslcert=/c.pem", "sslcert and sslkey"),
            (
                "postgres://u@h/db?target_session_attrs=x",
                "target_session_attrs=x",
            ),
            ("postgres://u@h/db?no_such_option=1", "no_such_option"),
        ] {
            let e = Settings::parse(url).unwrap_err().to_string();
            assert!(e.contains(named), "{url}: {e}");
        }
    }

    #[test]
    fn percent_decoding_reads_paths() {
        assert_eq!(decode("%2Fa%20b%zz%4"), "/a b%zz%4");
    }
}
