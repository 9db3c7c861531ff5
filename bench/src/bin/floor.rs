//! The floors of `docs/BENCHMARKS.md`: a server that does at the database
//! what a charge does there, with no idempotency at all, so the product's
//! figures can be printed as ratios measured in the same run.
//!
//! - `POST /charges` inserts the charge row (the same columns and indexes
//!   the product's first schema had: a time-ordered `ch_` id, the caller's
//!   SHA-256, amount, currency, description, created) and answers 201 with
//!   it. On SQLite one writer thread batches whatever inserts are queued
//!   into one transaction (group commit, one fsync per batch under `full`);
//!   on PostgreSQL each request is one autocommit `INSERT` through a pool
//!   of the product's size.
//! - `GET /inventory/ITEM` is one indexed read.
//!
//! Nothing here is checked beyond what the insert needs: it is a floor,
//! not a product.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Connections of the PostgreSQL pool: the product's.
const POOL_SIZE: usize = 32;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS charges (
    id TEXT PRIMARY KEY, caller BYTEA NOT NULL, amount BIGINT NOT NULL,
    currency TEXT NOT NULL, description TEXT, created BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS charges_by_caller ON charges (caller, id);
CREATE TABLE IF NOT EXISTS inventory (item_id TEXT PRIMARY KEY, available BIGINT NOT NULL);
INSERT INTO inventory (item_id, available) VALUES ('sku-tee', 100) ON CONFLICT DO NOTHING;";

#[derive(Parser)]
#[command(
    about = "A floor server: one insert per charge, one read per stock query, no idempotency"
)]
struct Args {
    /// Address to bind (port 0 picks one; printed as `listening on http://ADDR`).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// `sqlite://PATH` or `postgres://...`.
    #[arg(long)]
    database: String,
    /// `full` (fsync per commit) or `relaxed`.
    #[arg(long, default_value = "full")]
    durability: String,
}

/// One charge row.
struct Row {
    id: String,
    caller: Vec<u8>,
    amount: i64,
    currency: String,
    description: Option<String>,
    created: i64,
}

#[derive(Clone)]
enum Db {
    Sqlite {
        inserts: mpsc::Sender<(Row, oneshot::Sender<bool>)>,
        readers: Arc<Mutex<Vec<rusqlite::Connection>>>,
        path: String,
    },
    Postgres(Pool),
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let full = args.durability == "full";
    let db = match args.database.strip_prefix("sqlite://") {
        Some(path) => open_sqlite(path, full),
        None => open_postgres(&args.database, full).await,
    };
    let app = Router::new()
        .route("/charges", post(create))
        .route("/inventory/{item}", get(stock))
        .with_state(db);
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .expect("bind");
    println!(
        "listening on http://{}",
        listener.local_addr().expect("addr")
    );
    axum::serve(listener, app).await.expect("serve");
}

fn open_sqlite(path: &str, full: bool) -> Db {
    let conn = rusqlite::Connection::open(path).expect("open the SQLite file");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("WAL");
    let synchronous = if full { "FULL" } else { "NORMAL" };
    conn.pragma_update(None, "synchronous", synchronous)
        .expect("synchronous");
    conn.execute_batch(&SCHEMA.replace("BYTEA", "BLOB"))
        .expect("schema");
    let (inserts, queue) = mpsc::channel(8192);
    std::thread::spawn(move || write_batches(conn, queue));
    Db::Sqlite {
        inserts,
        readers: Arc::default(),
        path: path.to_owned(),
    }
}

/// The writer thread: every queued insert in one transaction, then answer.
fn write_batches(
    mut conn: rusqlite::Connection,
    mut queue: mpsc::Receiver<(Row, oneshot::Sender<bool>)>,
) {
    while let Some(first) = queue.blocking_recv() {
        let mut batch = vec![first];
        while let Ok(next) = queue.try_recv() {
            batch.push(next);
            if batch.len() == 512 {
                break;
            }
        }
        let result = (|| {
            let tx = conn.transaction()?;
            {
                let mut insert = tx.prepare_cached(
                    "INSERT INTO charges (id, caller, amount, currency, description, created)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?;
                for (row, _) in &batch {
                    insert.execute(rusqlite::params![
                        row.id,
                        row.caller,
                        row.amount,
                        row.currency,
                        row.description,
                        row.created
                    ])?;
                }
            }
            tx.commit()
        })();
        for (_, reply) in batch {
            let _ = reply.send(result.is_ok());
        }
    }
}

async fn open_postgres(url: &str, full: bool) -> Db {
    let mut config: tokio_postgres::Config = url.parse().expect("a PostgreSQL URL");
    let synchronous = if full { "on" } else { "off" };
    config.options(format!("-c synchronous_commit={synchronous}"));
    let manager = Manager::from_config(
        config,
        tokio_postgres::NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager)
        .max_size(POOL_SIZE)
        .runtime(Runtime::Tokio1)
        .build()
        .expect("a pool");
    pool.get()
        .await
        .expect("connect")
        .batch_execute(SCHEMA)
        .await
        .expect("schema");
    Db::Postgres(pool)
}

async fn create(State(db): State<Db>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let row = Row {
        id: format!("ch_{}", uuid::Uuid::now_v7().simple()),
        caller: Sha256::digest(token.as_bytes()).to_vec(),
        amount: body["amount"].as_i64().unwrap_or(0),
        currency: body["currency"].as_str().unwrap_or("usd").to_owned(),
        description: body["description"].as_str().map(str::to_owned),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64),
    };
    let answer = json!({
        "id": row.id, "amount": row.amount, "currency": row.currency,
        "description": row.description, "status": "succeeded", "created": row.created,
    });
    let stored = match db {
        Db::Sqlite { inserts, .. } => {
            let (reply, done) = oneshot::channel();
            match inserts.send((row, reply)).await {
                Ok(()) => done.await.unwrap_or(false),
                Err(_) => false,
            }
        }
        Db::Postgres(pool) => match pool.get().await {
            // A statement prepared once per connection, as the product's are.
            Ok(client) => match client
                .prepare_cached(
                    "INSERT INTO charges (id, caller, amount, currency, description, created)
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .await
            {
                Ok(insert) => client
                    .execute(
                        &insert,
                        &[
                            &row.id,
                            &row.caller,
                            &row.amount,
                            &row.currency,
                            &row.description,
                            &row.created,
                        ],
                    )
                    .await
                    .is_ok(),
                Err(_) => false,
            },
            Err(_) => false,
        },
    };
    if stored {
        (StatusCode::CREATED, Json(answer)).into_response()
    } else {
        StatusCode::SERVICE_UNAVAILABLE.into_response()
    }
}

async fn stock(State(db): State<Db>, Path(item): Path<String>) -> Response {
    let available: Option<i64> = match db {
        Db::Sqlite { readers, path, .. } => {
            let conn = readers.lock().expect("readers").pop();
            let conn = conn.unwrap_or_else(|| {
                let conn = rusqlite::Connection::open(&path).expect("a read connection");
                conn.set_db_config(
                    rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
                    true,
                )
                .expect("QPSG");
                conn
            });
            let available = conn
                .prepare_cached("SELECT available FROM inventory WHERE item_id = ?1")
                .and_then(|mut s| s.query_row([&item], |r| r.get(0)))
                .ok();
            readers.lock().expect("readers").push(conn);
            available
        }
        Db::Postgres(pool) => match pool.get().await {
            Ok(client) => match client
                .prepare_cached("SELECT available FROM inventory WHERE item_id = $1")
                .await
            {
                Ok(read) => client
                    .query_opt(&read, &[&item])
                    .await
                    .ok()
                    .flatten()
                    .map(|r| r.get(0)),
                Err(_) => None,
            },
            Err(_) => None,
        },
    };
    match available {
        Some(available) => Json(json!({ "item_id": item, "available": available })).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
