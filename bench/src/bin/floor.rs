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
//! - With `--keyed`, the minimal idempotent floor: the least any
//!   idempotent server can do. The request's `Idempotency-Key` is a column
//!   of the charge row itself, `UNIQUE (caller, key)`; each request is one
//!   `INSERT … ON CONFLICT (caller, key) DO NOTHING`, and a duplicate key
//!   reads the existing charge row and answers it (200). No fingerprint, no
//!   stored answer, no expiry. On SQLite the same writer thread and group
//!   commit as above; on PostgreSQL one autocommit statement per request
//!   (PostgreSQL groups concurrent commits into shared WAL flushes itself).
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
use tokio_postgres::types::ToSql;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Connections of the PostgreSQL pool: the product's.
const POOL_SIZE: usize = 32;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS charges (
    id TEXT PRIMARY KEY, caller BYTEA NOT NULL, amount BIGINT NOT NULL,
    currency TEXT NOT NULL, description TEXT, created BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS charges_by_caller ON charges (caller, id);
CREATE TABLE IF NOT EXISTS keyed_charges (
    id TEXT PRIMARY KEY, caller BYTEA NOT NULL, key TEXT NOT NULL, amount BIGINT NOT NULL,
    currency TEXT NOT NULL, description TEXT, created BIGINT NOT NULL, UNIQUE (caller, key));
CREATE INDEX IF NOT EXISTS keyed_charges_by_caller ON keyed_charges (caller, id);
CREATE TABLE IF NOT EXISTS inventory (item_id TEXT PRIMARY KEY, available BIGINT NOT NULL);
INSERT INTO inventory (item_id, available) VALUES ('sku-tee', 100) ON CONFLICT DO NOTHING;";

#[derive(Parser)]
#[command(
    about = "A floor server: one insert per charge (with --keyed, keyed by a UNIQUE column), one read per stock query"
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
    /// The minimal idempotent floor: the `Idempotency-Key` in a
    /// `UNIQUE (caller, key)` column of the charge row, one insert per
    /// request, a duplicate answered from the existing row.
    #[arg(long)]
    keyed: bool,
}

/// One charge row.
struct Row {
    id: String,
    caller: Vec<u8>,
    /// The `Idempotency-Key` (`--keyed` only).
    key: Option<String>,
    amount: i64,
    currency: String,
    description: Option<String>,
    created: i64,
}

/// What the insert did: `None` if it could not be stored, else whether it
/// inserted the row (`Stored::New`) or found the key's row already there.
enum Stored {
    New,
    Existing(Row),
}

type Reply = oneshot::Sender<Option<Stored>>;

#[derive(Clone)]
struct App {
    db: Db,
    keyed: bool,
}

#[derive(Clone)]
enum Db {
    Sqlite {
        inserts: mpsc::Sender<(Row, Reply)>,
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
        .with_state(App {
            db,
            keyed: args.keyed,
        });
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

const INSERT: &str = "INSERT INTO charges (id, caller, amount, currency, description, created)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
const INSERT_KEYED: &str =
    "INSERT INTO keyed_charges (id, caller, key, amount, currency, description, created)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (caller, key) DO NOTHING";
const SELECT_KEYED: &str = "SELECT id, amount, currency, description, created
     FROM keyed_charges WHERE caller = ?1 AND key = ?2";

/// The writer thread: every queued insert in one transaction, then answer.
fn write_batches(mut conn: rusqlite::Connection, mut queue: mpsc::Receiver<(Row, Reply)>) {
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
            let mut stored = Vec::with_capacity(batch.len());
            for (row, _) in &batch {
                stored.push(match &row.key {
                    None => {
                        tx.prepare_cached(INSERT)?.execute(rusqlite::params![
                            row.id,
                            row.caller,
                            row.amount,
                            row.currency,
                            row.description,
                            row.created
                        ])?;
                        Stored::New
                    }
                    Some(key) => {
                        let inserted =
                            tx.prepare_cached(INSERT_KEYED)?.execute(rusqlite::params![
                                row.id,
                                row.caller,
                                key,
                                row.amount,
                                row.currency,
                                row.description,
                                row.created
                            ])?;
                        if inserted == 1 {
                            Stored::New
                        } else {
                            let existing = tx.prepare_cached(SELECT_KEYED)?.query_row(
                                rusqlite::params![row.caller, key],
                                |r| {
                                    Ok(Row {
                                        id: r.get(0)?,
                                        caller: row.caller.clone(),
                                        key: Some(key.clone()),
                                        amount: r.get(1)?,
                                        currency: r.get(2)?,
                                        description: r.get(3)?,
                                        created: r.get(4)?,
                                    })
                                },
                            )?;
                            Stored::Existing(existing)
                        }
                    }
                });
            }
            tx.commit()?;
            Ok::<_, rusqlite::Error>(stored)
        })();
        match result {
            Ok(stored) => {
                for ((_, reply), stored) in batch.into_iter().zip(stored) {
                    let _ = reply.send(Some(stored));
                }
            }
            Err(_) => {
                for (_, reply) in batch {
                    let _ = reply.send(None);
                }
            }
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

async fn create(State(app): State<App>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let key = match app.keyed {
        false => None,
        true => match headers.get("idempotency-key").and_then(|v| v.to_str().ok()) {
            Some(key) => Some(key.to_owned()),
            None => return StatusCode::BAD_REQUEST.into_response(),
        },
    };
    let row = Row {
        id: format!("ch_{}", uuid::Uuid::now_v7().simple()),
        // The product's caller: the SHA-256 of the bearer token (so
        // `loadgen --scenario fill-keyed` writes rows of the same caller).
        caller: Sha256::digest(token.trim_start_matches("Bearer ").as_bytes()).to_vec(),
        key,
        amount: body["amount"].as_i64().unwrap_or(0),
        currency: body["currency"].as_str().unwrap_or("usd").to_owned(),
        description: body["description"].as_str().map(str::to_owned),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64),
    };
    let answer = |row: &Row| {
        json!({
            "id": row.id, "amount": row.amount, "currency": row.currency,
            "description": row.description, "status": "succeeded", "created": row.created,
        })
    };
    let new = answer(&row);
    let stored = match app.db {
        Db::Sqlite { inserts, .. } => {
            let (reply, done) = oneshot::channel();
            match inserts.send((row, reply)).await {
                Ok(()) => done.await.ok().flatten(),
                Err(_) => None,
            }
        }
        Db::Postgres(pool) => insert_postgres(&pool, row).await,
    };
    match stored {
        Some(Stored::New) => (StatusCode::CREATED, Json(new)).into_response(),
        Some(Stored::Existing(row)) => (StatusCode::OK, Json(answer(&row))).into_response(),
        None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

/// One autocommit statement (prepared once per connection, as the
/// product's are); a keyed duplicate then reads the existing row.
async fn insert_postgres(pool: &Pool, row: Row) -> Option<Stored> {
    let client = pool.get().await.ok()?;
    let insert = match row.key {
        None => {
            "INSERT INTO charges (id, caller, amount, currency, description, created)
             VALUES ($1, $2, $3, $4, $5, $6)"
        }
        Some(_) => {
            "INSERT INTO keyed_charges (id, caller, key, amount, currency, description, created)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (caller, key) DO NOTHING"
        }
    };
    let insert = client.prepare_cached(insert).await.ok()?;
    let values: [&(dyn ToSql + Sync); 7] = [
        &row.id,
        &row.caller,
        &row.key,
        &row.amount,
        &row.currency,
        &row.description,
        &row.created,
    ];
    let params = match row.key {
        None => [&values[..2], &values[3..]].concat(),
        Some(_) => values.to_vec(),
    };
    let inserted = client.execute(&insert, &params).await.ok()?;
    let Some(key) = &row.key else {
        return Some(Stored::New);
    };
    if inserted == 1 {
        return Some(Stored::New);
    }
    // The insert waited for any transaction holding the key, so the row is
    // committed and this statement's snapshot sees it.
    let select = client
        .prepare_cached(
            "SELECT id, amount, currency, description, created
             FROM keyed_charges WHERE caller = $1 AND key = $2",
        )
        .await
        .ok()?;
    let existing = client.query_one(&select, &[&row.caller, key]).await.ok()?;
    Some(Stored::Existing(Row {
        id: existing.get(0),
        caller: row.caller.clone(),
        key: row.key.clone(),
        amount: existing.get(1),
        currency: existing.get(2),
        description: existing.get(3),
        created: existing.get(4),
    }))
}

async fn stock(State(app): State<App>, Path(item): Path<String>) -> Response {
    let available: Option<i64> = match app.db {
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
