//! Connecting the way libpq does, with its URL parameters, and keeping a
//! connection honest once it is up.
//!
//! - **TLS** (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`): rustls, done
//!   here (the `SSLRequest`, then the handshake) before tokio-postgres
//!   speaks the protocol over the stream. `verify-ca` checks the chain,
//!   `verify-full` the chain and the host's name; `require` with an
//!   explicit `sslrootcert` checks the chain as libpq does. Without
//!   `sslrootcert`, the platform's roots and `SSL_CERT_FILE`'s. Secure by
//!   default: without `sslmode`, a URL with a host that is neither
//!   loopback nor a Unix socket means `verify-full` (libpq's `prefer`
//!   stays for loopback and sockets), and an explicit weaker mode to such
//!   a host is [`Settings::downgrade`], which the store logs as a warning;
//!   `sslrootcert=system` means `verify-full` (as libpq 16), and so does
//!   `verify-ca` without `sslrootcert` (a public CA's chain proves
//!   nothing without the name). `hostaddr` gives a host's address without
//!   a look-up; its name is still the one TLS checks.
//! - **Bounds** (`connect_timeout` per host, `keepalives`,
//!   `keepalives_idle`, `keepalives_interval`, `keepalives_count`,
//!   `tcp_user_timeout`), each with a default that bounds a hung host:
//!   one that accepts TCP (its kernel does, even with every process
//!   stopped) but never answers costs `connect_timeout`, then the next
//!   host of the URL is tried (tokio-postgres's own timeout covers the TCP
//!   connect only). `target_session_attrs` (`any`, `read-write`,
//!   `read-only`, `primary`, `standby`) is checked here too.
//! - **`response_timeout`** (ours; libpq has no client-side bound on a
//!   statement): a connection whose server owes an answer and has sent
//!   nothing for that long is closed, and so is every other connection to
//!   the same host (its machine hangs for all of them). On loopback a
//!   stopped server's kernel still acknowledges every byte, so keepalives
//!   and `tcp_user_timeout` never fire: only this ends the wait. A
//!   statement so ended fails without an SQLSTATE, which the store reads
//!   as "the backend was lost": a COMMIT's outcome is then unknown.
//! - **A synchronous-replication wait that was cancelled** (by
//!   `pg_cancel_backend`, or a role's `statement_timeout`) makes PostgreSQL
//!   answer the COMMIT with success and only a WARNING notice ("canceling
//!   wait for synchronous replication … has already committed locally,
//!   but might not have been replicated to the standby"). The driver sees
//!   the notice before the COMMIT's answer and closes the connection, so
//!   the COMMIT ends as a lost backend ("outcome unknown"), never as a
//!   success the standby may not have. (The notice is matched on its
//!   English text: the server's `lc_messages` must be English.)

pub(crate) use super::sslmode::SslMode;
use super::sslmode::{is_local, ssl_mode};
use super::wire::{Activity, Socket, Tapped, Transport};
use crate::tls::TlsError;
use deadpool_postgres::Connect;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::config::{Host, SslMode as PgSslMode};
use tokio_postgres::{AsyncMessage, Client, NoTls};

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
/// How often a driver looks at its connection's silence.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// A URL parameter that cannot be used; the message names it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ParameterError(String);

/// libpq's `target_session_attrs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionAttrs {
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
    pub config: tokio_postgres::Config,
    /// `sslmode`; by default `verify-full` off loopback, `prefer` on
    /// loopback and Unix sockets.
    pub ssl_mode: SslMode,
    /// Whether the URL gave `sslmode` (or `sslrootcert=system`).
    pub ssl_mode_given: bool,
    /// Whether every host is loopback (`localhost`, `127.0.0.0/8`, `::1`)
    /// or a Unix socket, judged by its name.
    pub local: bool,
    /// `sslrootcert`: a PEM file, or `system` for the platform's roots.
    pub root_cert: Option<PathBuf>,
    /// `sslcert` and `sslkey`: a client certificate.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// `connect_timeout`, per host; `None` for 0 (no bound).
    pub connect_timeout: Option<Duration>,
    /// `keepalives` (1 or 0).
    pub keepalives: bool,
    /// `keepalives_idle`.
    pub keepalives_idle: Duration,
    /// `keepalives_interval`.
    pub keepalives_interval: Duration,
    /// `keepalives_count`.
    pub keepalives_count: u32,
    /// `tcp_user_timeout` (milliseconds in the URL); `None` for 0.
    pub tcp_user_timeout: Option<Duration>,
    /// `response_timeout` (ours, seconds); `None` for 0.
    pub response_timeout: Option<Duration>,
    target: SessionAttrs,
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
const OURS: &[&str] = &[
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
/// libpq reads it).
fn decode(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Why no connection could be made; one line naming each host's reason.
#[derive(Debug)]
pub(crate) struct ConnectError(String);

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConnectError {}

/// Hosts that went silent: every connection to a host closes when one of
/// them finds it silent past `response_timeout`; and a host that went
/// silent, or gave no answer within `connect_timeout`, is tried after the
/// others for [`SUSPECT_FOR`] (libpq keeps the URL's order; a hung first
/// host would cost every new connection `connect_timeout` first).
#[derive(Default)]
struct Hosts(Mutex<HashMap<String, HostState>>);

struct HostState {
    silent: watch::Sender<u64>,
    suspect_until: Option<tokio::time::Instant>,
}

/// How long a host that went silent is tried last.
const SUSPECT_FOR: Duration = Duration::from_secs(30);

impl Hosts {
    fn with<T>(&self, host: &str, f: impl FnOnce(&mut HostState) -> T) -> T {
        let mut hosts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let state = hosts.entry(host.to_owned()).or_insert_with(|| HostState {
            silent: watch::channel(0).0,
            suspect_until: None,
        });
        f(state)
    }

    fn silent(&self, host: &str) -> watch::Sender<u64> {
        self.with(host, |h| h.silent.clone())
    }

    fn suspect(&self, host: &str, suspect: bool) {
        let until = suspect.then(|| tokio::time::Instant::now() + SUSPECT_FOR);
        self.with(host, |h| h.suspect_until = until);
    }

    fn is_suspect(&self, host: &str) -> bool {
        self.with(host, |h| {
            h.suspect_until
                .is_some_and(|until| until > tokio::time::Instant::now())
        })
    }
}

/// Makes connections (the pool's, through [`Connect`], and the store's own).
pub(crate) struct Connector {
    settings: Settings,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Where the trusted roots came from, for errors.
    roots: String,
    hosts: Arc<Hosts>,
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector")
            .field("ssl_mode", &self.settings.ssl_mode)
            .finish_non_exhaustive()
    }
}

/// Whether a connection's silence is bounded by `response_timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    /// The pool's connections: bounded.
    Response,
    /// A long statement of the store's own (migrations): not bounded.
    None,
}

impl Connector {
    /// Loads what TLS needs (roots, a client certificate): an error names
    /// the file.
    pub(crate) fn new(settings: Settings) -> Result<Self, TlsError> {
        let (tls, roots) = match settings.ssl_mode {
            SslMode::Disable => (None, String::new()),
            mode => {
                let (store, roots) = match settings.root_cert.as_deref() {
                    Some(path) if path.as_os_str() != "system" => (
                        Some(crate::tls::roots_from("sslrootcert", path)?),
                        format!("sslrootcert {}", path.display()),
                    ),
                    // No explicit file: only verify-* needs roots.
                    given if given.is_some() || mode >= SslMode::VerifyCa => (
                        Some(crate::tls::trusted_roots()?),
                        "the platform's roots and SSL_CERT_FILE".to_owned(),
                    ),
                    _ => (None, String::new()),
                };
                let check_chain = store.is_some() && mode >= SslMode::Require;
                let verifier = Verifier {
                    webpki: match (store, check_chain) {
                        (Some(store), true) => Some(
                            WebPkiServerVerifier::builder_with_provider(
                                Arc::new(store),
                                crate::tls::provider(),
                            )
                            .build()
                            .map_err(|e| TlsError::File {
                                what: "trusted roots".into(),
                                path: settings.root_cert.clone().unwrap_or_default(),
                                why: e.to_string(),
                            })?,
                        ),
                        _ => None,
                    },
                    check_name: mode == SslMode::VerifyFull,
                    provider: crate::tls::provider(),
                };
                let builder = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
                    .with_safe_default_protocol_versions()
                    .expect("ring supports the default protocol versions")
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verifier));
                let config = match &settings.client_cert {
                    None => builder.with_no_client_auth(),
                    Some((cert, key)) => builder
                        .with_client_auth_cert(
                            crate::tls::certificates("sslcert", cert)?,
                            crate::tls::private_key("sslkey", key)?,
                        )
                        .map_err(|source| TlsError::Rustls {
                            what: format!(
                                "sslcert {} with sslkey {}",
                                cert.display(),
                                key.display()
                            ),
                            source,
                        })?,
                };
                (Some(Arc::new(config)), roots)
            }
        };
        Ok(Self {
            settings,
            tls,
            roots,
            hosts: Arc::default(),
        })
    }

    /// A connection to the first host of the URL that takes it (each host
    /// bounded by `connect_timeout`), driven by a task of its own.
    pub(crate) async fn connect(
        &self,
        bound: Bound,
    ) -> Result<(Client, JoinHandle<()>), ConnectError> {
        let config = &self.settings.config;
        let addresses = config.get_hostaddrs();
        // `hostaddr` without `host`: the addresses are the hosts.
        let unnamed: Vec<Host> = addresses.iter().map(|a| Host::Tcp(a.to_string())).collect();
        let hosts = match config.get_hosts() {
            [] => &unnamed[..],
            hosts => hosts,
        };
        let ports = config.get_ports();
        if hosts.is_empty() {
            return Err(ConnectError("the PostgreSQL URL names no host".into()));
        }
        if !addresses.is_empty() && addresses.len() != hosts.len() {
            return Err(ConnectError(
                "the PostgreSQL URL names a different number of hosts and hostaddrs".into(),
            ));
        }
        let mut targets: Vec<(&Host, Option<std::net::IpAddr>, u16, String)> =
            (hosts.iter().enumerate())
                .map(|(i, host)| {
                    let port = match ports {
                        [] => 5432,
                        [one] => *one,
                        many => many.get(i).copied().unwrap_or(5432),
                    };
                    let name = match host {
                        Host::Tcp(h) if h.contains(':') => format!("[{h}]:{port}"),
                        Host::Tcp(h) => format!("{h}:{port}"),
                        Host::Unix(path) => format!("{}/.s.PGSQL.{port}", path.display()),
                    };
                    (host, addresses.get(i).copied(), port, name)
                })
                .collect();
        // Hosts that went silent lately go last (a stable sort keeps the
        // URL's order otherwise).
        targets.sort_by_key(|(_, _, _, name)| self.hosts.is_suspect(name));
        let mut failures = Vec::new();
        for (host, address, port, name) in targets {
            let attempt = self.connect_to(host, address, port, &name, bound);
            let result = match self.settings.connect_timeout {
                Some(limit) => match tokio::time::timeout(limit, attempt).await {
                    Ok(result) => result,
                    Err(_) => {
                        self.hosts.suspect(&name, true);
                        Err(format!(
                            "no answer within {} s (connect_timeout)",
                            limit.as_secs_f64()
                        ))
                    }
                },
                None => attempt.await,
            };
            match result {
                Ok(connected) => {
                    self.hosts.suspect(&name, false);
                    return Ok(connected);
                }
                Err(why) => failures.push(format!("{name}: {why}")),
            }
        }
        Err(ConnectError(failures.join("; ")))
    }

    async fn connect_to(
        &self,
        host: &Host,
        address: Option<std::net::IpAddr>,
        port: u16,
        name: &str,
        bound: Bound,
    ) -> Result<(Client, JoinHandle<()>), String> {
        let socket = match host {
            Host::Tcp(h) => Socket::Tcp(self.tcp(h, address, port).await?),
            Host::Unix(path) => Socket::Unix(
                tokio::net::UnixStream::connect(path.join(format!(".s.PGSQL.{port}")))
                    .await
                    .map_err(|e| format!("cannot connect: {e}"))?,
            ),
        };
        let transport = match (&self.tls, host) {
            (Some(tls), Host::Tcp(h)) => match self.start_tls(socket, tls, h, name).await {
                Ok(transport) => transport,
                // As libpq: `prefer` whose TLS attempt failed tries again
                // in clear, on a new connection.
                Err(why) if self.settings.ssl_mode == SslMode::Prefer => {
                    tracing::debug!(host = %name, why, "TLS failed with sslmode=prefer: connecting in clear");
                    Transport::Plain(Socket::Tcp(self.tcp(h, address, port).await?))
                }
                Err(why) => return Err(why),
            },
            // libpq never uses TLS over a Unix socket.
            _ => Transport::Plain(socket),
        };
        let (stream, activity) = Tapped::new(transport);
        let (client, connection) = self
            .settings
            .config
            .connect_raw(stream, NoTls)
            .await
            .map_err(|e| format!("{}", crate::error::Chain(&e)))?;
        let limit = match bound {
            Bound::Response => self.settings.response_timeout,
            Bound::None => None,
        };
        let driver = tokio::spawn(drive(
            connection,
            activity,
            limit,
            self.hosts.clone(),
            name.to_owned(),
        ));
        if let Err(why) = self.check_session(&client).await {
            drop(client);
            return Err(why);
        }
        Ok((client, driver))
    }

    /// TCP with the URL's keepalives and `tcp_user_timeout`, to the
    /// host's `hostaddr`, else to each address of its name in turn.
    async fn tcp(
        &self,
        host: &str,
        address: Option<std::net::IpAddr>,
        port: u16,
    ) -> Result<tokio::net::TcpStream, String> {
        let addresses: Vec<std::net::SocketAddr> = match address {
            Some(ip) => vec![(ip, port).into()],
            None => tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| format!("cannot resolve: {e}"))?
                .collect(),
        };
        let mut last = None;
        for address in addresses {
            match tokio::net::TcpStream::connect(address).await {
                Ok(stream) => {
                    self.tune(&stream)
                        .map_err(|e| format!("cannot set socket options: {e}"))?;
                    return Ok(stream);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) => format!("cannot connect: {e}"),
            None => "the name resolves to no address".to_owned(),
        })
    }

    fn tune(&self, stream: &tokio::net::TcpStream) -> std::io::Result<()> {
        stream.set_nodelay(true)?;
        let socket = socket2::SockRef::from(stream);
        let s = &self.settings;
        if s.keepalives {
            socket.set_tcp_keepalive(
                &socket2::TcpKeepalive::new()
                    .with_time(s.keepalives_idle)
                    .with_interval(s.keepalives_interval)
                    .with_retries(s.keepalives_count),
            )?;
        }
        if let Some(timeout) = s.tcp_user_timeout {
            socket.set_tcp_user_timeout(Some(timeout))?;
        }
        Ok(())
    }

    /// The `SSLRequest`, then the handshake; plain when the server
    /// declines and `sslmode=prefer`.
    async fn start_tls(
        &self,
        mut socket: Socket,
        tls: &Arc<rustls::ClientConfig>,
        host: &str,
        name: &str,
    ) -> Result<Transport, String> {
        const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        let mode = self.settings.ssl_mode;
        socket
            .write_all(&SSL_REQUEST)
            .await
            .map_err(|e| format!("cannot ask for TLS: {e}"))?;
        let mut answer = [0u8; 1];
        socket
            .read_exact(&mut answer)
            .await
            .map_err(|e| format!("no answer to the TLS request: {e}"))?;
        match answer[0] {
            b'S' => {}
            b'N' if mode == SslMode::Prefer => return Ok(Transport::Plain(socket)),
            b'N' => {
                return Err(format!(
                    "the server does not accept TLS (sslmode={})",
                    mode.as_str()
                ))
            }
            other => return Err(format!("unexpected answer {other:#04x} to the TLS request")),
        }
        let server_name = ServerName::try_from(host.to_owned())
            .map_err(|e| format!("{host:?} is not a name TLS can check: {e}"))?;
        let stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(server_name, socket)
            .await
            .map_err(|e| {
                if e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) {
                    format!(
                        "the server's TLS certificate was refused (sslmode={}, trusting {}): {e}",
                        mode.as_str(),
                        self.roots
                    )
                } else {
                    format!("TLS handshake failed: {e} (the certificate of {name})")
                }
            })?;
        Ok(Transport::Tls(Box::new(stream)))
    }

    /// `target_session_attrs`, asked of the new connection.
    async fn check_session(&self, client: &Client) -> Result<(), String> {
        let target = self.settings.target;
        if target == SessionAttrs::Any {
            return Ok(());
        }
        let rows = client
            .simple_query(
                "SELECT pg_is_in_recovery()::text, current_setting('transaction_read_only')",
            )
            .await
            .map_err(|e| format!("cannot ask whether it takes writes: {e}"))?;
        let row = rows
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
                _ => None,
            })
            .ok_or("no answer to whether it takes writes")?;
        let in_recovery = row.get(0) == Some("true");
        let read_only = row.get(1) == Some("on");
        let (fits, why) = match target {
            SessionAttrs::Any => (true, ""),
            SessionAttrs::ReadWrite => (!read_only, "it is read-only"),
            SessionAttrs::ReadOnly => (read_only, "it takes writes"),
            SessionAttrs::Primary => (!in_recovery, "it is a standby"),
            SessionAttrs::Standby => (in_recovery, "it is not a standby"),
        };
        if fits {
            Ok(())
        } else {
            Err(format!("{why} (target_session_attrs)"))
        }
    }
}

impl Connect for Connector {
    fn connect(
        &self,
        _: &tokio_postgres::Config,
    ) -> Pin<
        Box<
            dyn Future<Output = Result<(Client, JoinHandle<()>), tokio_postgres::Error>>
                + Send
                + '_,
        >,
    > {
        Box::pin(async move {
            match Connector::connect(self, Bound::Response).await {
                Ok(connected) => Ok(connected),
                Err(e) => Err(as_postgres_error(e).await),
            }
        })
    }
}

/// deadpool wants a `tokio_postgres::Error`, which has no public
/// constructor: one made by a stream that fails with `e` (it reads
/// "error communicating with the server: " and `e`).
async fn as_postgres_error(e: ConnectError) -> tokio_postgres::Error {
    let mut config = tokio_postgres::Config::new();
    config.user("-");
    match config.connect_raw(Failing(Some(e)), NoTls).await {
        Err(e) => e,
        Ok(_) => unreachable!("a failing stream cannot connect"),
    }
}

/// A stream whose first write fails.
struct Failing(Option<ConnectError>);

impl tokio::io::AsyncRead for Failing {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        _: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Err(self.get_mut().error()))
    }
}

impl tokio::io::AsyncWrite for Failing {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        _: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::Poll::Ready(Err(self.get_mut().error()))
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Err(self.get_mut().error()))
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

impl Failing {
    fn error(&mut self) -> std::io::Error {
        match self.0.take() {
            Some(e) => std::io::Error::other(e),
            None => std::io::Error::other("connection failed"),
        }
    }
}

/// Drives one connection: its messages, its silence, its host's silence.
/// Returning drops the connection, which fails whatever its client still
/// waits for with no SQLSTATE (the store's "backend lost").
async fn drive(
    mut connection: tokio_postgres::Connection<Tapped<Transport>, tokio_postgres::tls::NoTlsStream>,
    activity: Arc<Activity>,
    limit: Option<Duration>,
    hosts: Arc<Hosts>,
    host: String,
) {
    let silent = hosts.silent(&host);
    let mut others = silent.subscribe();
    others.borrow_and_update();
    let mut watch = tokio::time::interval(WATCH_EVERY);
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            message = std::future::poll_fn(|cx| connection.poll_message(cx)) => match message {
                None => return,
                Some(Err(e)) => {
                    tracing::debug!(%host, error = %e, "PostgreSQL connection ended");
                    return;
                }
                Some(Ok(AsyncMessage::Notice(notice))) if replication_wait_cancelled(&notice) => {
                    tracing::warn!(
                        %host,
                        notice = %notice.message(),
                        "a commit's wait for the synchronous standby was cancelled: closing its \
                         connection, so that its outcome is unknown rather than a success the \
                         standby may not have"
                    );
                    return;
                }
                Some(Ok(AsyncMessage::Notice(notice))) => {
                    tracing::debug!(%host, severity = %notice.severity(), notice = %notice.message(), "PostgreSQL notice");
                }
                Some(Ok(_)) => {}
            },
            _ = watch.tick(), if limit.is_some() => {
                let limit = limit.expect("checked");
                if let Some(silence) = activity.silent_for().filter(|s| *s >= limit) {
                    tracing::warn!(
                        %host,
                        silent_ms = silence.as_millis() as u64,
                        "PostgreSQL owes an answer and has said nothing for response_timeout: \
                         closing every connection to it"
                    );
                    hosts.suspect(&host, true);
                    silent.send_modify(|generation| *generation += 1);
                    return;
                }
            }
            changed = others.changed() => {
                if changed.is_err() {
                    // Never: the connector keeps every sender.
                    std::future::pending::<()>().await;
                }
                tracing::debug!(%host, "another connection found this host silent: closing");
                return;
            }
        }
    }
}

/// The WARNING of a cancelled wait for synchronous replication (the
/// transaction committed locally only).
fn replication_wait_cancelled(notice: &tokio_postgres::error::DbError) -> bool {
    notice.message().contains("synchronous replication")
        || notice
            .detail()
            .is_some_and(|d| d.contains("already committed locally"))
}

/// Checks the server's certificate as `sslmode` says: nothing (`prefer`,
/// `require`), the chain (`verify-ca`), or the chain and the name
/// (`verify-full`); handshake signatures always.
#[derive(Debug)]
struct Verifier {
    webpki: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(webpki) = &self.webpki else {
            return Ok(ServerCertVerified::assertion());
        };
        // webpki checks the chain first, then the name: a wrong name
        // means the chain was good.
        match webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
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
