//! Builds the application from its configuration: the store, the router,
//! the bound listener. Tests and the binary start it the same way.

use crate::config::{Config, DatabaseUrl};
use crate::db::{Db, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};
use crate::mailer::{self, Mailer};
use crate::metrics::ShopMetrics;
use crate::observe::ObserveLayer;
use crate::operation::receipt::Receipts;
use crate::provider::Provider;
use crate::routes;
use crate::state::{AppState, Shared};
use crate::steps::ShopSteps;
use axum::extract::DefaultBodyLimit;
use axum::Router;
use exactly_once::outbox::RelaySettings;
use exactly_once::{
    AnyStore, Engine, PostgresStore, SqliteStore, StoreError, StoreOptions, IDEMPOTENT_REPLAYED,
    MAX_BODY_BYTES,
};
use http::{header, HeaderName, Method};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::cors::CorsLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::TraceLayer;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The database could not be opened or migrated.
    #[error("cannot open the database: {0}")]
    Database(#[from] StoreError),
    /// The address could not be bound.
    #[error(transparent)]
    Bind(#[from] serve::BindError),
    /// Trusted roots or a certificate could not be loaded.
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] exactly_once::tls::TlsError),
    /// The provider's HTTP client could not be built.
    #[error("cannot set up the provider's client: {0}")]
    Provider(#[from] reqwest::Error),
    /// `--chaos` on an address that is not loopback, without
    /// `--chaos-on-any-address`.
    #[error(
        "--chaos is refused on {0}, which is not a loopback address: any client could kill the \
         process and read every caller's unfinished operations; listen on 127.0.0.1, or add \
         --chaos-on-any-address (CHAOS_ON_ANY_ADDRESS=1) on a network you trust"
    )]
    ChaosOffLoopback(String),
}

/// A bound, ready server.
pub struct Application {
    listener: TcpListener,
    router: Router,
    state: AppState,
    sweep_interval: Duration,
    complete_interval: Duration,
    relay: Option<(Mailer, RelaySettings)>,
    limits: serve::Limits,
}

impl Application {
    /// Opens the database (migrating it, unless `--no-migrate`), builds
    /// the router and binds.
    pub async fn build(config: Config) -> Result<Self, StartupError> {
        refuse_chaos_off_loopback(&config).await?;
        let db = open_database(&config, !config.no_migrate).await?;
        let provider = provider(&config)?;
        let state = state(db, &config, provider);
        let mailer = match config.smtp_url.clone() {
            Some(smtp) => Some(Mailer::new(smtp, state.shop_metrics.clone())?),
            None => None,
        };
        let router = router(state.clone(), &config);
        let listener = serve::bind(&config.listen).await?;
        if config.chaos {
            tracing::warn!("chaos mode is on: X-Chaos headers make requests fail on purpose");
        }
        warn_of_short_lives(&config);
        Ok(Self {
            listener,
            router,
            state,
            sweep_interval: config.sweep_interval,
            complete_interval: config.complete_interval,
            limits: config.listener_limits(),
            relay: mailer.map(|mailer| {
                let settings = RelaySettings::default()
                    .claim(config.receipt_claim)
                    .connections(mailer::CONNECTIONS);
                (mailer, settings)
            }),
        })
    }

    /// The address actually bound (port 0 resolved).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until `shutdown` resolves, then drains in-flight requests.
    /// Beside the requests run the sweeper, the completer and, with
    /// `--smtp-url`, the receipt relay.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()>) {
        let engine = &self.state.engine;
        let mut background = vec![
            tokio::spawn(engine.sweeper(self.sweep_interval)),
            tokio::spawn(engine.completer(self.complete_interval)),
        ];
        if let Some((mailer, settings)) = self.relay {
            let smtp = mailer.smtp();
            tracing::info!(host = %smtp.host, port = smtp.port, tls = ?smtp.tls, connections = mailer::CONNECTIONS, "receipt relay started");
            background.push(tokio::spawn(engine.relay(mailer, settings)));
        }
        background.push(tokio::spawn(self.state.receipts.clone().forget_idle()));
        if let Some(rate) = &self.state.caller_rate {
            background.push(tokio::spawn(rate.forget_idle()));
        }
        serve::serve_with_limits(self.listener, self.router, shutdown, self.limits).await;
        for task in background {
            task.abort();
        }
    }
}

/// `--chaos` lets any client kill the process (`X-Chaos`) and read every
/// caller's unfinished operations (`GET /operations`): refused unless
/// every address `--listen` names is loopback, or `--chaos-on-any-address`.
/// An address that does not resolve is left to the bind to report.
pub async fn refuse_chaos_off_loopback(config: &Config) -> Result<(), StartupError> {
    if !config.chaos || config.chaos_on_any_address {
        return Ok(());
    }
    let Ok(addresses) = tokio::net::lookup_host(config.listen.as_str()).await else {
        return Ok(());
    };
    let addresses: Vec<SocketAddr> = addresses.collect();
    if addresses.iter().all(|a| a.ip().is_loopback()) {
        Ok(())
    } else {
        Err(StartupError::ChaosOffLoopback(config.listen.clone()))
    }
}

/// The provider client `--psp-url` names; over `https://` its certificate
/// is checked against the platform's roots and `SSL_CERT_FILE`'s.
pub(crate) fn provider(
    config: &Config,
) -> Result<Option<(String, rustls::RootCertStore)>, StartupError> {
    let Some(url) = config.psp_url.as_deref() else {
        return Ok(None);
    };
    let roots = if url.starts_with("https://") {
        exactly_once::tls::trusted_roots()?
    } else {
        rustls::RootCertStore::empty()
    };
    Ok(Some((url.to_owned(), roots)))
}

/// Opens the shop's store on `--database`: migrated first when `migrate`,
/// else only checked. Either way a schema this release cannot serve on (a
/// later release's migration that does not run beside it, or one behind
/// it) is refused, naming the migration.
pub async fn open_database(config: &Config, migrate: bool) -> Result<Db, StoreError> {
    let store = match &config.database {
        DatabaseUrl::Sqlite(path) => {
            let (path, options) = (path.clone(), sqlite_options(config).migrate(migrate));
            AnyStore::from(Arc::new(
                tokio::task::spawn_blocking(move || SqliteStore::open(path, options))
                    .await
                    .map_err(|e| {
                        StoreError::internal("the database opener panicked").caused_by(e)
                    })??,
            ))
        }
        DatabaseUrl::Postgres(url) => AnyStore::from(Arc::new(
            PostgresStore::open(
                url,
                store_options(config)
                    .migrations(POSTGRES_MIGRATIONS)
                    .application_name("idempotent-checkout")
                    .migrate(migrate),
            )
            .await?,
        )),
    };
    Ok(Db(Arc::new(store)))
}

/// `server migrate`, a deploy's migration job: applies the migrations the
/// database still needs (under PostgreSQL's migration lock, while the
/// instances of the release before keep serving), checks that this
/// release serves on the result and that a write commits, and returns.
pub async fn migrate(config: &Config) -> Result<(), StoreError> {
    let db = open_database(config, true).await?;
    Engine::builder(db.store()).build().health().await
}

/// The shop's state over its database: the engine (its store, metrics and
/// the shop's steps), the provider (its URL and trusted roots) and the
/// flags the routes read.
pub fn state(
    db: Db,
    config: &Config,
    provider: Option<(String, rustls::RootCertStore)>,
) -> AppState {
    let (metrics, shop_metrics) = ShopMetrics::registered();
    let shop_metrics = Arc::new(shop_metrics);
    let provider = provider.map(|(url, roots)| {
        Arc::new(
            Provider::new(&url, config.psp_timeout, shop_metrics.clone(), roots)
                .expect("reqwest builds a client with a rustls configuration"),
        )
    });
    let receipts = match config.smtp_url {
        Some(_) => Receipts::on(config.caller_receipts, shop_metrics.receipts_withheld()),
        None => Receipts::off(),
    };
    let engine = Engine::builder(db.store())
        .metrics(Arc::new(metrics))
        .steps(ShopSteps {
            provider: provider.clone(),
            receipts: receipts.clone(),
        })
        .max_unfinished_per_caller(config.caller_unfinished)
        .build();
    AppState::from(Shared {
        engine,
        db,
        shop_metrics,
        chaos: config.chaos,
        provider,
        receipts,
        caller_rate: crate::rate::CallerRate::new(config.caller_rate),
    })
}

serve::app!(Application, Config, StartupError);

/// The HTTP API of docs/CONTRACT.md section 3, with the demo page at `/`.
///
/// The layers every request passes through are one stack, applied once:
/// each `Router::layer` or `route_layer` call wraps every route in another
/// boxed service that a request clones on its way in; six such calls cost
/// a replay 28 of its 93 allocations (docs/BENCHMARKS.md, "Per-request
/// CPU").
pub fn router(state: AppState, config: &Config) -> Router {
    let (mut api, _) = routes::api::api_routes().split_for_parts();
    if config.chaos {
        // The demo's operator panel: not in the API (nor its document).
        api = api.route("/operations", axum::routing::get(routes::operations::list));
    }
    let cors = (!config.cors_origins.is_empty()).then(|| {
        CorsLayer::new()
            .allow_origin(config.cors_origins.clone())
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([
                HeaderName::from_static("idempotency-key"),
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static("x-chaos"),
            ])
            .expose_headers([IDEMPOTENT_REPLAYED.clone(), header::RETRY_AFTER])
            .max_age(Duration::from_secs(600))
    });
    api.method_not_allowed_fallback(routes::method_not_allowed)
        .fallback_service(routes::www::service(&config.www_dir))
        .layer(
            ServiceBuilder::new()
                // Server errors are logged once, with their cause, by
                // `observe`; the trace layer's own line would be a second.
                .layer(TraceLayer::new_for_http().on_failure(()))
                // Inside the router's layer, so it sees the matched route.
                .layer(ObserveLayer::new(state.engine.metrics().clone()))
                .option_layer(cors)
                // Inside CORS, so that a page on another origin reads its 429.
                .option_layer(state.caller_rate.clone())
                .layer(RequestBodyTimeoutLayer::new(config.body_timeout))
                .layer(DefaultBodyLimit::max(MAX_BODY_BYTES)),
        )
        .with_state(state)
}

/// The SQLite store's options, from the flags.
pub(crate) fn sqlite_options(config: &Config) -> StoreOptions {
    store_options(config)
        .migrations(SQLITE_MIGRATIONS)
        .migrate(!config.no_migrate)
}

/// What both stores' options take from the flags.
fn store_options(config: &Config) -> StoreOptions {
    StoreOptions::new()
        .durability(config.durability.into())
        .key_ttl(config.key_ttl)
        .lease(config.operation_lease)
        .attention_after(config.attention_after)
        .tombstone_ttl(config.tombstone_ttl)
        .outbox_retention(config.outbox_retention)
}

/// How long the browser client keeps a key by default (its `keyTtlMs`).
const CLIENT_KEY_LIFE: Duration = Duration::from_secs(24 * 3600);
/// How long the provider (Stripe, the simulator) keeps its idempotency keys.
const PROVIDER_KEY_LIFE: Duration = Duration::from_secs(24 * 3600);

/// Warns of settings under which a card can be charged twice: a record
/// that expires before the browser client stops resuming its key (a page
/// reloaded after `--key-ttl` resumes a key the server forgot, which runs
/// again), and a failing charge retried after the provider forgot its key.
fn warn_of_short_lives(config: &Config) {
    if config.psp_url.is_none() {
        return;
    }
    if config.key_ttl < CLIENT_KEY_LIFE {
        tracing::warn!(
            key_ttl = %humantime::format_duration(config.key_ttl),
            client_key_life = %humantime::format_duration(CLIENT_KEY_LIFE),
            "--key-ttl is shorter than the browser client's default key life: a page reloaded \
             after --key-ttl resumes a key this server has forgotten, and the card is charged \
             again; give the client a keyTtlMs below --key-ttl, or raise --key-ttl"
        );
    }
    if config.attention_after >= PROVIDER_KEY_LIFE {
        tracing::warn!(
            attention_after = %humantime::format_duration(config.attention_after),
            "--attention-after is not shorter than the provider keeps its idempotency keys \
             (24h): a failing charge retried after that could be charged twice"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serve::flags::parse;

    #[tokio::test]
    async fn chaos_is_refused_off_loopback_unless_allowed_on_any_address() {
        for (args, refused) in [
            (&["--chaos", "--listen", "0.0.0.0:0"][..], true),
            (&["--chaos", "--listen", "[::]:0"], true),
            (
                &["--chaos", "--listen", "0.0.0.0:0", "--chaos-on-any-address"],
                false,
            ),
            (&["--chaos", "--listen", "127.0.0.1:0"], false),
            (&["--chaos", "--listen", "[::1]:0"], false),
            (&["--chaos", "--listen", "localhost:0"], false),
            (&["--listen", "0.0.0.0:0"], false),
        ] {
            let config: Config = parse(args).unwrap();
            let refusal = refuse_chaos_off_loopback(&config).await;
            assert_eq!(refusal.is_err(), refused, "{args:?}: {refusal:?}");
        }
    }
}
