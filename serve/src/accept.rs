//! The accept loop: hyper connections with graceful shutdown, and a
//! [`ConnectionControl`] in every request so a fault (the server's chaos
//! mode, the simulator's `drop-after-charge`) can cut the connection the
//! request came in on. With a [`TlsAcceptor`] ([`serve_tls`]) each
//! connection's handshake runs in its own task, bounded by
//! [`HANDSHAKE_TIMEOUT`].

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

/// How long in-flight requests may take to finish after a shutdown signal.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a client may take over its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A handle on the connection a request came in on. The accept loop puts
/// one in every request's extensions.
#[derive(Debug, Clone, Default)]
pub struct ConnectionControl(Arc<Notify>);

impl ConnectionControl {
    /// Asks the connection's task to drop the connection now, unanswered.
    pub fn drop_connection(&self) {
        self.0.notify_one();
    }

    /// Resolves once [`ConnectionControl::drop_connection`] was called.
    pub async fn dropped(&self) {
        self.0.notified().await;
    }
}

/// Serves `router` on `listener` until `shutdown` resolves, then stops
/// accepting and waits for in-flight requests to finish.
pub async fn serve(listener: TcpListener, router: Router, shutdown: impl Future<Output = ()>) {
    serve_with(listener, router, shutdown, None).await
}

/// [`serve`] over TLS: each connection's handshake first.
pub async fn serve_tls(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
    tls: TlsAcceptor,
) {
    serve_with(listener, router, shutdown, Some(tls)).await
}

async fn serve_with(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
    tls: Option<TlsAcceptor>,
) {
    let builder = Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
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
        match &tls {
            None => {
                tokio::spawn(connection(stream, builder, router, watcher));
            }
            Some(tls) => {
                let handshake = tls.accept(stream);
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                        Ok(Ok(stream)) => connection(stream, builder, router, watcher).await,
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

/// Serves one connection until it ends, the drain ends it, or a request
/// drops it.
async fn connection<S>(
    stream: S,
    builder: Builder<TokioExecutor>,
    router: Router,
    watcher: hyper_util::server::graceful::Watcher,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let control = ConnectionControl::default();
    let in_request = control.clone();
    let service = router.map_request(move |mut request: http::Request<_>| {
        request.extensions_mut().insert(in_request.clone());
        request
    });
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
