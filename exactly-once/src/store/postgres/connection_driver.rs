//! Each connection's driver: it keeps a connection honest once it is up
//! (a server silent past `response_timeout`, a cancelled wait for the
//! synchronous standby; see [`super::connect`]), the hosts found silent,
//! and the error deadpool is handed when no connection could be made.

use super::wire::{Activity, Tapped, Transport};
use std::collections::HashMap;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_postgres::{AsyncMessage, NoTls};

/// How often a driver looks at its connection's silence.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// Why no connection could be made; one line naming each host's reason.
#[derive(Debug)]
pub(crate) struct ConnectError(pub(super) String);

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
pub(super) struct Hosts(Mutex<HashMap<String, HostState>>);

pub(super) struct HostState {
    silent: watch::Sender<u64>,
    suspect_until: Option<tokio::time::Instant>,
}

/// How long a host that went silent is tried last.
pub(super) const SUSPECT_FOR: Duration = Duration::from_secs(30);

impl Hosts {
    pub(super) fn with<T>(&self, host: &str, f: impl FnOnce(&mut HostState) -> T) -> T {
        let mut hosts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let state = hosts.entry(host.to_owned()).or_insert_with(|| HostState {
            silent: watch::channel(0).0,
            suspect_until: None,
        });
        f(state)
    }

    pub(super) fn silent(&self, host: &str) -> watch::Sender<u64> {
        self.with(host, |h| h.silent.clone())
    }

    pub(super) fn suspect(&self, host: &str, suspect: bool) {
        let until = suspect.then(|| tokio::time::Instant::now() + SUSPECT_FOR);
        self.with(host, |h| h.suspect_until = until);
    }

    pub(super) fn is_suspect(&self, host: &str) -> bool {
        self.with(host, |h| {
            h.suspect_until
                .is_some_and(|until| until > tokio::time::Instant::now())
        })
    }
}

/// deadpool wants a `tokio_postgres::Error`, which has no public
/// constructor: one made by a stream that fails with `e` (it reads
/// "error communicating with the server: " and `e`).
pub(super) async fn as_postgres_error(e: ConnectError) -> tokio_postgres::Error {
    let mut config = tokio_postgres::Config::new();
    config.user("-");
    match config.connect_raw(Failing(Some(e)), NoTls).await {
        Err(e) => e,
        Ok(_) => unreachable!("a failing stream cannot connect"),
    }
}

/// A stream whose first write fails.
pub(super) struct Failing(Option<ConnectError>);

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
    pub(super) fn error(&mut self) -> std::io::Error {
        match self.0.take() {
            Some(e) => std::io::Error::other(e),
            None => std::io::Error::other("connection failed"),
        }
    }
}

/// Drives one connection: its messages, its silence, its host's silence.
/// Returning drops the connection, which fails whatever its client still
/// waits for with no SQLSTATE (the store's "backend lost").
pub(super) async fn drive(
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
pub(super) fn replication_wait_cancelled(notice: &tokio_postgres::error::DbError) -> bool {
    notice.message().contains("synchronous replication")
        || notice
            .detail()
            .is_some_and(|d| d.contains("already committed locally"))
}
