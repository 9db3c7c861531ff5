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

use super::sslmode::SslMode;
use super::wire::{Socket, Tapped, Transport};
use crate::tls::TlsError;
use deadpool_postgres::Connect;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::ServerName;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio_postgres::config::Host;
use tokio_postgres::{Client, NoTls};

use super::connection_driver::ConnectError;
use super::connection_driver::{as_postgres_error, drive, Hosts};
use super::tls_verifier::Verifier;
use super::url_params::SessionAttrs;
use super::url_params::Settings;

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
