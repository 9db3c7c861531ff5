//! `orders`: an order service whose team was on sqlx before it took the
//! engine. Its pool, its schema and its reads stay sqlx's (the schema a
//! script it runs at start); the engine adds its
//! tables beside theirs and runs `POST /orders`
//! at most once per key, charging the card at a payment provider between
//! two phases ([`order`]). Prints `listening on http://ADDR` on stdout once
//! it serves; logs on stderr (`RUST_LOG`).

mod order;

use axum::extract::{FromRequestParts, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use exactly_once::secrets::{redact, RedactedStderr, SecretUrl};
use exactly_once::{Caller, Engine, Problem, Sqlx, SqlxStore, StoreOptions};
use http::request::Parts;
use http::{header, StatusCode};
use order::{BadOrder, PlaceOrder, ProviderSteps};
use std::process::ExitCode;
use std::time::Duration;

/// An order service on PostgreSQL through sqlx.
#[derive(Debug, Parser)]
#[command(version)]
struct Config {
    /// Where to listen.
    #[arg(long, env = "ORDERS_LISTEN", default_value = "127.0.0.1:8090")]
    listen: String,
    /// The PostgreSQL database (`postgres://…`).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: SecretUrl,
    /// The payment provider (`http://…`, or `https://…` trusting the
    /// platform's roots and `SSL_CERT_FILE`; docs/PSP.md).
    #[arg(long, env = "ORDERS_PROVIDER_URL", hide_env_values = true)]
    provider_url: SecretUrl,
    /// How long a call to the provider may take.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    provider_timeout: Duration,
    /// How often the completer looks for orders whose request died.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    complete_interval: Duration,
    /// How long an order in progress is its request's before the completer
    /// may take it over.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    operation_lease: Duration,
}

/// What every handler shares: the engine, and the team's own pool.
#[derive(Clone)]
struct AppState {
    engine: Engine<Sqlx>,
    pool: sqlx::PgPool,
}

/// The caller: `Authorization: Bearer TOKEN`, or a 401.
struct Customer(Caller);

impl<S: Send + Sync> FromRequestParts<S> for Customer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .filter(|token| !token.trim().is_empty())
            .map(|token| Self(Caller::of(token.trim())))
            .ok_or_else(|| {
                Problem::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "Unauthorized",
                    "send Authorization: Bearer TOKEN",
                )
                .into_response()
            })
    }
}

impl From<Customer> for Caller {
    fn from(customer: Customer) -> Self {
        customer.0
    }
}

impl IntoResponse for BadOrder {
    fn into_response(self) -> Response {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            "Invalid request",
            self.0,
        )
        .into_response()
    }
}

/// `POST /orders {"item": "…", "amount": 1999}`: placed and paid at most
/// once per key.
async fn place(State(state): State<AppState>, keyed: exactly_once::Keyed<Customer>) -> Response {
    state.engine.run(keyed, PlaceOrder::parse).await
}

/// `GET /orders`: the caller's orders, oldest first (the team's own read).
async fn list(State(state): State<AppState>, Customer(caller): Customer) -> Response {
    match order::list(&state.pool, &caller).await {
        Ok(data) => Json(serde_json::json!({ "data": data })).into_response(),
        Err(e) => exactly_once::Error::from(exactly_once::StoreError::from(e)).into_response(),
    }
}

/// `GET /healthz`: 200 when the database can commit.
async fn health(State(state): State<AppState>) -> Response {
    match state.engine.health().await {
        Ok(()) => (StatusCode::OK, "ok").into_response(),
        Err(e) => exactly_once::Error::from(e).into_response(),
    }
}

async fn serve(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    // What the team had before the engine: its pool and its migrations.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .connect(&config.database_url)
        .await?;
    sqlx::raw_sql(include_str!("../migrations/0001_orders.sql"))
        .execute(&pool)
        .await?;
    // What the engine adds: its tables beside theirs, on the same pool.
    let options = StoreOptions::new().lease(config.operation_lease);
    let store = SqlxStore::open(pool.clone(), options).await?;
    let steps = ProviderSteps::new(&config.provider_url, config.provider_timeout)?;
    let engine = Engine::builder(std::sync::Arc::new(store))
        .steps(steps)
        .build();
    tokio::spawn(engine.completer(config.complete_interval));
    tokio::spawn(engine.sweeper(Duration::from_secs(60)));
    let router = Router::new()
        .route("/orders", post(place).get(list))
        .route("/healthz", get(health))
        .with_state(AppState { engine, pool });
    let listener = tokio::net::TcpListener::bind(&config.listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    // ring, whatever the features Cargo unified with other packages built
    // beside this one (reqwest can be given rustls without a provider);
    // an `Err` only says one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match Config::try_parse() {
        Ok(config) => config,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            eprint!("{}", redact(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(|| RedactedStderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match serve(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", redact(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}
