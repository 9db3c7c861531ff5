//! The engine alone on one PostgreSQL backend, for `scripts/bench.sh`'s
//! backend pair: `POST /charges` (as `loadgen` sends it) claims the key,
//! inserts one row and records a 201 in one transaction, through
//! tokio-postgres and deadpool (`--backend postgres`, the store's own pool)
//! or through the application's sqlx pool (`--backend sqlx`). The same
//! SQL, the same 32 connections: what differs is the driver. Prints
//! `listening on http://ADDR` once it serves.

use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use clap::{Parser, ValueEnum};
use exactly_once::postgres::sqlx::SqlxOperation;
use exactly_once::postgres::{PostgresOperation, Sql, Transaction};
use exactly_once::Backend;
use exactly_once::{
    Caller, Engine, Keyed, Migration, Operation, PhaseEnd, PostgresStore, RunContext, SqlxStore,
    StoreOptions, StoredResponse,
};
use http::StatusCode;
use tokio_postgres::types::Type;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Driver {
    Postgres,
    Sqlx,
}

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    #[arg(long)]
    database: String,
    #[arg(long, value_enum)]
    backend: Driver,
}

const MIGRATIONS: &[Migration] = &[Migration::contract(
    1,
    "0001_bench_charges",
    "CREATE TABLE bench_charges (id TEXT PRIMARY KEY, caller BYTEA NOT NULL, key TEXT NOT NULL,
                                 amount BIGINT NOT NULL, currency TEXT NOT NULL)",
)];

const INSERT: &str = "INSERT INTO bench_charges (id, caller, key, amount, currency)
                      VALUES ($1, $2, $3, $4, $5)";

/// One charge row, answered 201.
#[derive(Debug)]
struct Charge {
    amount: i64,
    currency: String,
}

impl Charge {
    fn parse(body: &serde_json::Value) -> Result<Self, StatusCode> {
        Ok(Self {
            amount: body["amount"].as_i64().ok_or(StatusCode::BAD_REQUEST)?,
            currency: body["currency"].as_str().unwrap_or("usd").to_owned(),
        })
    }

    fn id(at: &RunContext<'_>) -> String {
        format!("ch_{}", &at.downstream_key()[..24])
    }

    fn answer(&self, id: &str) -> PhaseEnd {
        let body =
            serde_json::json!({ "id": id, "amount": self.amount, "currency": self.currency });
        PhaseEnd::Finished(StoredResponse::new(
            StatusCode::CREATED,
            "application/json",
            body.to_string(),
        ))
    }
}

impl PostgresOperation for Charge {
    async fn run(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> exactly_once::postgres::Result<PhaseEnd> {
        const ROW: Sql = Sql::new(
            INSERT,
            &[Type::TEXT, Type::BYTEA, Type::TEXT, Type::INT8, Type::TEXT],
        );
        let id = Self::id(at);
        ROW.execute(
            &**tx,
            &[
                &id,
                at.caller,
                &at.key.as_ref(),
                &self.amount,
                &self.currency,
            ],
        )
        .await?;
        Ok(self.answer(&id))
    }
}

impl SqlxOperation for Charge {
    async fn run(
        &self,
        conn: &mut sqlx::PgConnection,
        at: &RunContext<'_>,
    ) -> exactly_once::postgres::Result<PhaseEnd> {
        let id = Self::id(at);
        sqlx::query(INSERT)
            .bind(&id)
            .bind(&at.caller.as_bytes()[..])
            .bind(at.key.as_ref())
            .bind(self.amount)
            .bind(&self.currency)
            .execute(&mut *conn)
            .await?;
        Ok(self.answer(&id))
    }
}

/// The bearer token, as the caller.
struct Bearer(Caller);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Bearer {
    type Rejection = StatusCode;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _: &S,
    ) -> Result<Self, StatusCode> {
        let token = parts
            .headers
            .get("authorization")
            .ok_or(StatusCode::UNAUTHORIZED)?;
        Ok(Self(Caller::of(token.as_bytes())))
    }
}

impl From<Bearer> for Caller {
    fn from(bearer: Bearer) -> Self {
        bearer.0
    }
}

async fn charge<B: Backend>(State(engine): State<Engine<B>>, keyed: Keyed<Bearer>) -> Response
where
    Charge: Operation<B>,
{
    engine.run(keyed, Charge::parse).await
}

async fn serve<B: Backend>(engine: Engine<B>, listen: &str)
where
    Charge: Operation<B>,
{
    let router = Router::new()
        .route("/charges", post(charge::<B>))
        .with_state(engine);
    let listener = tokio::net::TcpListener::bind(listen).await.expect("bind");
    println!(
        "listening on http://{}",
        listener.local_addr().expect("an address")
    );
    axum::serve(listener, router).await.expect("serve");
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let options = StoreOptions::new().migrations(MIGRATIONS);
    match args.backend {
        Driver::Postgres => {
            let store = PostgresStore::open(&args.database, options)
                .await
                .map_err(said)
                .unwrap();
            serve(Engine::new(store), &args.listen).await;
        }
        Driver::Sqlx => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(32)
                .connect(&args.database)
                .await
                .expect("a sqlx pool");
            let store = SqlxStore::open(pool, options).await.map_err(said).unwrap();
            serve(Engine::new(store), &args.listen).await;
        }
    }
}

/// A store that did not open, said with its causes.
fn said(e: exactly_once::StoreError) -> String {
    exactly_once::workspace::Chain(&e).to_string()
}
