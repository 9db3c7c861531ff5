//! Builds the simulator from its configuration: the ledger, the router,
//! the bound listener. Tests and the binary start it the same way.

use crate::config::Config;
use crate::faults::{self, Faults};
use crate::ledger::{Ledger, LedgerError};
use crate::routes::{self, AppState, MAX_BODY_BYTES};
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::post;
use axum::Router;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::TcpListener;

/// How long a key's record (and its stored answer) is kept.
pub const KEY_TTL: Duration = Duration::from_secs(24 * 3600);
/// How often expired keys are deleted, and how many per transaction.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);
const SWEEP_BATCH: u32 = 1000;

/// Why the simulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The database could not be opened or migrated.
    #[error("cannot open the ledger {}: {source}", path.display())]
    Ledger {
        /// The database file.
        path: PathBuf,
        /// Why.
        source: LedgerError,
    },
    /// The address could not be bound.
    #[error(transparent)]
    Bind(#[from] serve::BindError),
    /// `--tls-cert` / `--tls-key` could not be used.
    #[error("cannot serve TLS: {0}")]
    Tls(#[from] exactly_once::tls::TlsError),
}

/// A bound, ready simulator.
pub struct Application {
    listener: TcpListener,
    router: Router,
    ledger: Ledger,
    tls: Option<serve::TlsAcceptor>,
}

impl Application {
    /// Binds, opens the ledger (creating and migrating it) and builds the router.
    pub async fn build(config: Config) -> Result<Self, StartupError> {
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(serve::TlsAcceptor::from(std::sync::Arc::new(
                exactly_once::workspace::server_config(cert, key)?,
            ))),
            _ => None,
        };
        // Bind first: a bad address then touches no file.
        let listener = serve::bind(&config.listen).await?;
        // Opening is quick, and nothing else runs yet.
        let ledger =
            Ledger::open(&config.database, KEY_TTL).map_err(|source| StartupError::Ledger {
                path: config.database.clone(),
                source,
            })?;
        let state = AppState {
            ledger: ledger.clone(),
            faults: Faults::default(),
            latency: config.latency,
        };
        Ok(Self {
            listener,
            router: router(state),
            ledger,
            tls,
        })
    }

    /// `https` with `--tls-cert`, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The address actually bound (port 0 resolved).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until `shutdown` resolves, then drains in-flight requests.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()>) {
        let sweeper = tokio::spawn(self.ledger.sweep_periodically(SWEEP_INTERVAL, SWEEP_BATCH));
        match self.tls {
            Some(tls) => serve::serve_tls(self.listener, self.router, shutdown, tls).await,
            None => serve::serve(self.listener, self.router, shutdown).await,
        }
        sweeper.abort();
    }
}

serve::app!(Application, Config, StartupError, scheme);

/// The endpoints of CONTRACT section 6. Faults apply to `POST /v1/charges`
/// only.
pub fn router(state: AppState) -> Router {
    let charge = post(routes::charges::create).route_layer(middleware::from_fn_with_state(
        state.faults.clone(),
        faults::inject,
    ));
    Router::new()
        .route("/v1/charges", charge.get(routes::charges::list))
        .route(
            "/admin/faults",
            post(routes::faults::set).get(routes::faults::show),
        )
        .method_not_allowed_fallback(routes::method_not_allowed)
        .fallback(routes::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}
