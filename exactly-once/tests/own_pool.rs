//! The engine on the application's own deadpool pool
//! (`PostgresStore::with_pool`), on a fresh PostgreSQL database of the
//! server `TEST_POSTGRES_URL` names (run with `--include-ignored`). What a
//! team that already has its pool checks: the engine migrates its own
//! tables beside theirs, an operation's row and its key commit together
//! on their pool's connections, a retry replays, concurrent duplicates
//! write once, the engine's transactions carry their own lock_timeout,
//! and the engine's settings never stay on a connection their handlers
//! get back from the pool.

mod common;

use exactly_once::postgres::PostgresOperation;
use exactly_once::postgres::Transaction;
use exactly_once::{
    Engine, Migration, NoFaults, PhaseEnd, Postgres, PostgresStore, RunContext, StoreOptions,
    StoredResponse,
};
use http::StatusCode;
use std::sync::Arc;
use testkit::Database;

const MIGRATIONS: &[Migration] = &[Migration::contract(
    1,
    "0001_notes",
    "CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, text TEXT NOT NULL)",
)];

/// One row in the application's own table, answered with its id.
#[derive(Debug)]
struct AddNote(String);

impl PostgresOperation for AddNote {
    async fn run(
        &self,
        tx: &Transaction<'_>,
        _at: &RunContext<'_>,
    ) -> exactly_once::postgres::Result<PhaseEnd> {
        let row = tx
            .query_one(
                "INSERT INTO notes (text) VALUES ($1) RETURNING id",
                &[&self.0],
            )
            .await
            .map_err(exactly_once::postgres::classify)?;
        let id: i64 = row.get(0);
        let body = serde_json::json!({ "note": id, "text": self.0 });
        Ok(PhaseEnd::Finished(StoredResponse::new(
            StatusCode::CREATED,
            "application/json",
            body.to_string(),
        )))
    }
}

async fn add(engine: &Engine<Postgres>, key: &str, text: &str) -> exactly_once::Answer {
    let body = serde_json::json!({ "text": text });
    let parse =
        |body: &serde_json::Value| Ok::<_, ()>(AddNote(body["text"].as_str().unwrap().to_owned()));
    engine
        .execute(common::request(key, text), &body, &NoFaults, parse)
        .await
        .or_else(exactly_once::Refused::into_answer)
        .expect("the body parses")
}

#[tokio::test]
#[ignore = "needs PostgreSQL: TEST_POSTGRES_URL, --include-ignored"]
async fn the_engine_runs_on_the_applications_own_pool() {
    let db = Database::postgres().await.unwrap();
    // Their pool, configured their way.
    let config: tokio_postgres::Config = db.url().parse().unwrap();
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(8)
        .build()
        .unwrap();
    let options = StoreOptions::new().migrations(MIGRATIONS);
    let store = PostgresStore::with_pool(pool.clone(), options)
        .await
        .unwrap();
    let engine = Engine::new(store);

    let first = add(&engine, "n-1", "hello").await;
    assert_eq!(first.response.status, 201);
    let again = add(&engine, "n-1", "hello").await;
    assert!(again.replayed);
    assert_eq!(again.response.body, first.response.body);
    let reused = add(&engine, "n-1", "other").await;
    assert_eq!(reused.response.status, 422);

    let engine = Arc::new(engine);
    common::duplicates_at_once(16, || {
        let engine = Arc::clone(&engine);
        async move { add(&engine, "n-2", "once").await }
    })
    .await;

    // The engine's transactions carry their own lock_timeout on the pool's
    // connections: a request that meets a lock held elsewhere answers
    // (409 or 503, retry) instead of waiting for ever.
    let blocker = pool.get().await.unwrap();
    blocker
        .batch_execute("BEGIN; LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let blocked = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        add(&engine, "n-3", "blocked"),
    )
    .await
    .expect("a request behind a held lock waited for ever: no lock_timeout on its transaction");
    assert!(
        [409, 503].contains(&blocked.response.status),
        "behind a held lock: {}",
        blocked.response.status
    );
    blocker.batch_execute("ROLLBACK").await.unwrap();
    drop(blocker);

    // Their own reads, on their own pool, see each note once.
    let client = pool.get().await.unwrap();
    let rows = client
        .query("SELECT text FROM notes ORDER BY id", &[])
        .await
        .unwrap();
    let texts: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(texts, ["hello", "once"]);
    // Nothing of the engine's settings stayed on the connections it used.
    for _ in 0..8 {
        let client = pool.get().await.unwrap();
        let timeout: String = client
            .query_one("SHOW lock_timeout", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            timeout, "0",
            "the engine's lock_timeout stayed on a connection"
        );
    }
}
