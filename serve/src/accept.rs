//! The accept loop: hyper connections with graceful shutdown, and a
//! [`ConnectionControl`] in every request so a fault (the server's chaos
//! mode, the simulator's `drop-after-charge`) can cut the connection the
//! request came in on. With a [`TlsAcceptor`] ([`serve_tls`]) each
//! connection's handshake runs in its own task, bounded by
//! [`HANDSHAKE_TIMEOUT`]. Every connection is held to [`Limits`]: its
//! requests' headers in time, its idle time bounded, and at most
//! `max_connections` open at once (past it, new ones wait in the listen
//! backlog; the requests running are not touched).

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::watch::{InFlight, Limits, Watched};

/// How long in-flight requests may take to finish after a shutdown signal.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How often, at most, the listener says that its connections are full.
const FULL_WARNING_EVERY: Duration = Duration::from_secs(60);
/// How long a client may take over its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A handle on the connection a request came in on. The accept loop puts
/// one in every request's extensions.
#[derive(Debug, Clone, Default)]
pub struct ConnectionControl {
    drop: Arc<Notify>,
    peer: Option<SocketAddr>,
}

impl ConnectionControl {
    /// Asks the connection's task to drop the connection now, unanswered.
    pub fn drop_connection(&self) {
        self.drop.notify_one();
    }

    /// Resolves once [`ConnectionControl::drop_connection`] was called.
    pub async fn dropped(&self) {
        self.drop.notified().await;
    }

    /// The client's address, as the connection was accepted from.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }
}

/// Serves `router` on `listener` until `shutdown` resolves, then stops
/// accepting and waits for in-flight requests to finish; every connection
/// held to the contract's [`Limits`].
pub async fn serve(listener: TcpListener, router: Router, shutdown: impl Future<Output = ()>) {
    serve_with(listener, router, shutdown, None, Limits::default()).await
}

/// [`serve`], every connection held to `limits`.
pub async fn serve_with_limits(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
) {
    serve_with(listener, router, shutdown, None, limits).await
}

/// [`serve`] over TLS: each connection's handshake first.
pub async fn serve_tls(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
    tls: TlsAcceptor,
) {
    serve_with(listener, router, shutdown, Some(tls), Limits::default()).await
}

async fn serve_with(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
    tls: Option<TlsAcceptor>,
    limits: Limits,
) {
    let builder = Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    crate::fds::make_room_for(limits.max_connections);
    let mut said_full: Option<tokio::time::Instant> = None;
    tokio::pin!(shutdown);
    loop {
        // A connection is accepted only with a place of its own: past the
        // cap, new ones wait in the kernel's backlog.
        let place = match open.clone().try_acquire_owned() {
            Ok(place) => place,
            Err(_) => {
                // Once a minute at most: under a flood this is every accept.
                if said_full.is_none_or(|at| at.elapsed() > FULL_WARNING_EVERY) {
                    said_full = Some(tokio::time::Instant::now());
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "every connection place is taken: new connections wait until one closes"
                    );
                }
                tokio::select! {
                    place = open.clone().acquire_owned() => place.expect("the semaphore is never closed"),
                    () = &mut shutdown => break,
                }
            }
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off, go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let (builder, router, watcher) = (builder.clone(), router.clone(), graceful.watcher());
        let held = Held {
            limits,
            peer,
            _place: place,
        };
        match &tls {
            None => {
                tokio::spawn(connection(stream, builder, router, watcher, held));
            }
            Some(tls) => {
                let handshake = tls.accept(stream);
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                        Ok(Ok(stream)) => connection(stream, builder, router, watcher, held).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                });
            }
        }
    }
    drop(listener);
    tracing::info!("shutting down: draining in-flight requests");
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not finish within {DRAIN_TIMEOUT:?}");
    }
}

/// What a connection holds while it is open: its place among
/// `max_connections`, and the limits it is held to.
struct Held {
    limits: Limits,
    peer: SocketAddr,
    _place: OwnedSemaphorePermit,
}

/// Serves one connection until it ends, the drain ends it, a request
/// drops it, or its client overstays the [`Limits`].
async fn connection<S>(
    stream: S,
    builder: Builder<TokioExecutor>,
    router: Router,
    watcher: hyper_util::server::graceful::Watcher,
    held: Held,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let control = ConnectionControl {
        drop: Arc::default(),
        peer: Some(held.peer),
    };
    let in_request = control.clone();
    let in_flight = Arc::new(InFlight::default());
    let handling = in_flight.clone();
    let service = router
        .map_request(move |mut request: http::Request<_>| {
            request.extensions_mut().insert(in_request.clone());
            request
        })
        .map_future(move |answer| {
            let handling = handling.enter();
            async move {
                let answer = answer.await;
                drop(handling);
                answer
            }
        });
    let stream = Watched::new(stream, in_flight, held.limits);
    let connection = builder
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
        .into_owned();
    let connection = watcher.watch(connection);
    tokio::select! {
        result = connection => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        // Dropping the connection future closes the socket unanswered.
        () = control.dropped() => tracing::debug!("connection dropped on purpose"),
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
