//! Builds the service from its flags: the store (this service's migrations
//! with the engine's), the engine with the partner step, the router, the
//! listener; then serves beside the completer and the sweeper.

use crate::config::{Config, DatabaseUrl};
use crate::db::{Db, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};
use crate::routes::{self, AppState};
use crate::steps::PartnerSteps;
use exactly_once::{Any, AnyStore, Engine, PostgresStore, SqliteStore, StoreError, StoreOptions};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// How often expired records are swept (to tombstones) and old tombstones
/// deleted.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The database could not be opened or migrated.
    #[error("cannot open the database")]
    Database(#[from] StoreError),
    /// The address could not be bound.
    #[error("cannot listen on {0}")]
    Bind(String, #[source] std::io::Error),
}

/// Opens the store on `--database` (this service's migrations with the
/// engine's): migrated first when `migrate`, else only checked. A schema
/// this release cannot serve on is refused, naming the migration.
pub async fn open_database(config: &Config, migrate: bool) -> Result<Db, StoreError> {
    let store = match &config.database {
        DatabaseUrl::Sqlite(path) => {
            let options = store_options(config)
                .migrations(SQLITE_MIGRATIONS)
                .migrate(migrate);
            let path = path.clone();
            // Opening migrates and starts the writer thread: blocking.
            let store = tokio::task::spawn_blocking(move || SqliteStore::open(path, options))
                .await
                .map_err(|e| StoreError::internal("the opener panicked").caused_by(e))??;
            AnyStore::from(Arc::new(store))
        }
        DatabaseUrl::Postgres(url) => {
            let options = store_options(config)
                .migrations(POSTGRES_MIGRATIONS)
                .migrate(migrate);
            AnyStore::from(Arc::new(PostgresStore::open(url, options).await?))
        }
    };
    Ok(Db(Arc::new(store)))
}

/// What both stores' options take from the flags.
fn store_options(config: &Config) -> StoreOptions {
    StoreOptions::new()
        .durability(config.durability.into())
        .lease(config.operation_lease)
}

/// `bookings migrate`: applies the migrations the database still needs,
/// checks that this release serves on the result, and returns.
pub async fn migrate(config: &Config) -> Result<(), StoreError> {
    let db = open_database(config, true).await?;
    Engine::builder(db.store()).build().health().await
}

/// A bound, ready service.
pub struct App {
    listener: TcpListener,
    state: AppState,
    complete_interval: Duration,
}

impl App {
    /// Opens (and migrates, unless `--no-migrate`) the database and binds.
    pub async fn build(config: Config) -> Result<Self, StartupError> {
        let (engine, db) = open(&config, !config.no_migrate).await?;
        let listener = TcpListener::bind(&config.listen)
            .await
            .map_err(|e| StartupError::Bind(config.listen.clone(), e))?;
        Ok(Self {
            listener,
            state: AppState { engine, db },
            complete_interval: config.complete_interval,
        })
    }
}

/// Opens (and migrates) the database, and the engine with the partner
/// step over it: what the service and `bookings operations` run on.
pub async fn open(config: &Config, migrate: bool) -> Result<(Engine<Any>, Db), StoreError> {
    let db = open_database(config, migrate).await?;
    let engine = Engine::builder(db.store())
        .steps(PartnerSteps::new(
            &config.partner_url,
            config.partner_timeout,
        ))
        .build();
    Ok((engine, db))
}

impl App {
    /// The address bound (port 0 resolved).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until `shutdown` resolves, with the completer (which finishes
    /// bookings whose request died) and the sweeper beside.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()> + Send + 'static) {
        let engine = &self.state.engine;
        let background = [
            tokio::spawn(engine.completer(self.complete_interval)),
            tokio::spawn(engine.sweeper(SWEEP_INTERVAL)),
        ];
        let router = routes::router(self.state.clone());
        if let Err(e) = axum::serve(self.listener, router)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "the server stopped");
        }
        for task in background {
            task.abort();
        }
    }
}
