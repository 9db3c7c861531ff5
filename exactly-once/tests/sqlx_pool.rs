//! The engine on the application's own `sqlx::PgPool` (the `Sqlx`
//! backend), on a fresh PostgreSQL database of the server
//! `TEST_POSTGRES_URL` names (run with `--include-ignored`). What a team on
//! sqlx checks: the operation writes with sqlx queries inside the engine's
//! transaction (its row and the key's record commit together), a retry
//! replays byte for byte, another body is a 422, concurrent duplicates
//! write once, an operation in two phases is finished by the completer
//! after its request died, an operation runs under the engine's
//! `lock_timeout`, and none of the engine's settings stays on a connection
//! of their pool.

mod common;

use exactly_once::outbox::{enqueue, Message};
use exactly_once::postgres::sqlx::SqlxOperation;
use exactly_once::postgres::Result;
use exactly_once::{
    Engine, Lease, Migration, NoFaults, Operation, PhaseEnd, RunContext, Sqlx, SqlxStore, Steps,
    StoreOptions, StoredResponse,
};
use http::StatusCode;
use sqlx::PgConnection;
use std::sync::Arc;
use std::time::Duration;
use testkit::Database;

const MIGRATIONS: &[Migration] = &[Migration::contract(
    1,
    "0001_notes",
    "CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL, text TEXT NOT NULL,
                         sent BOOLEAN NOT NULL DEFAULT false)",
)];

/// One row in the application's table, written with sqlx; in two phases
/// (`sent_at` its recovery point) when `then_send`.
#[derive(Debug)]
struct AddNote {
    text: String,
    then_send: bool,
}

impl SqlxOperation for AddNote {
    async fn run(&self, conn: &mut PgConnection, at: &RunContext<'_>) -> Result<PhaseEnd> {
        let (id,): (i64,) =
            sqlx::query_as("INSERT INTO notes (key, text) VALUES ($1, $2) RETURNING id")
                .bind(at.key.as_ref())
                .bind(&self.text)
                .fetch_one(&mut *conn)
                .await?;
        // Its message, in the same transaction (the one `enqueue`).
        let message = Message {
            id: format!("note-{}", at.key.as_ref()),
            to: "reader@example.com".into(),
            subject: "a note".into(),
            body: self.text.clone(),
        };
        enqueue(&mut *conn, &message, at).await?;
        if self.then_send {
            return Ok(PhaseEnd::stop("sending", &id));
        }
        Ok(PhaseEnd::Finished(created(id, &self.text)))
    }
}

fn created(id: i64, text: &str) -> StoredResponse {
    let body = serde_json::json!({ "note": id, "text": text });
    StoredResponse::new(StatusCode::CREATED, "application/json", body.to_string())
}

/// The second phase: the note marked sent.
#[derive(Debug)]
struct MarkSent(i64);

impl SqlxOperation for MarkSent {
    async fn run(&self, conn: &mut PgConnection, _at: &RunContext<'_>) -> Result<PhaseEnd> {
        let (text,): (String,) =
            sqlx::query_as("UPDATE notes SET sent = true WHERE id = $1 RETURNING text")
                .bind(self.0)
                .fetch_one(&mut *conn)
                .await?;
        Ok(PhaseEnd::Finished(created(self.0, &text)))
    }
}

/// The step at `sending`: nothing outside, the next phase at once.
struct Send;

#[async_trait::async_trait]
impl Steps<Sqlx> for Send {
    async fn step(&self, lease: &Lease) -> Result<Arc<dyn Operation<Sqlx>>, exactly_once::Error> {
        let id: i64 = serde_json::from_str(&lease.state)
            .map_err(|e| exactly_once::Error::internal(e.to_string()))?;
        Ok(Arc::new(MarkSent(id)))
    }
}

async fn add(
    engine: &Engine<Sqlx>,
    key: &str,
    text: &str,
    then_send: bool,
) -> exactly_once::Answer {
    let body = serde_json::json!({ "text": text });
    let parse = |body: &serde_json::Value| {
        Ok::<_, ()>(AddNote {
            text: body["text"].as_str().unwrap().to_owned(),
            then_send,
        })
    };
    engine
        .execute(common::request(key, text), &body, &NoFaults, parse)
        .await
        .or_else(exactly_once::Refused::into_answer)
        .expect("the body parses")
}

async fn notes(pool: &sqlx::PgPool) -> Vec<(String, String, bool)> {
    sqlx::query_as("SELECT key, text, sent FROM notes ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test]
#[ignore = "needs PostgreSQL: TEST_POSTGRES_URL, --include-ignored"]
async fn the_engine_runs_on_the_applications_sqlx_pool() {
    let db = Database::postgres().await.unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(&db.url())
        .await
        .unwrap();
    let options = StoreOptions::new().migrations(MIGRATIONS);
    let store = SqlxStore::open(pool.clone(), options).await.unwrap();
    let engine = Engine::new(store);

    let first = add(&engine, "n-1", "hello", false).await;
    assert_eq!(first.response.status, 201, "{:?}", first.response);
    let again = add(&engine, "n-1", "hello", false).await;
    assert!(again.replayed);
    assert_eq!(again.response.body, first.response.body);
    assert_eq!(again.response.headers, first.response.headers);
    let reused = add(&engine, "n-1", "other", false).await;
    assert_eq!(reused.response.status, 422);

    let engine = Arc::new(engine);
    common::duplicates_at_once(16, || {
        let engine = Arc::clone(&engine);
        async move { add(&engine, "n-2", "once", false).await }
    })
    .await;
    assert_eq!(
        notes(&pool).await,
        [
            ("n-1".to_owned(), "hello".to_owned(), false),
            ("n-2".to_owned(), "once".to_owned(), false)
        ]
    );
    // One message per note, written with it: none for the 422, one for
    // the sixteen duplicates.
    let messages: Vec<(String, String)> =
        sqlx::query_as("SELECT message_id, body FROM outbox ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        messages,
        [
            ("note-n-1".to_owned(), "hello".to_owned()),
            ("note-n-2".to_owned(), "once".to_owned())
        ]
    );

    // Nothing of the engine's settings stayed on the pool's connections.
    for _ in 0..8 {
        let (timeout,): (String,) = sqlx::query_as("SHOW lock_timeout")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(
            timeout, "0",
            "the engine's lock_timeout stayed on a connection"
        );
    }
}

#[tokio::test]
#[ignore = "needs PostgreSQL: TEST_POSTGRES_URL, --include-ignored"]
async fn a_step_left_by_its_request_is_finished_by_the_completer() {
    let db = Database::postgres().await.unwrap();
    let pool = sqlx::PgPool::connect(&db.url()).await.unwrap();
    let options = StoreOptions::new()
        .migrations(MIGRATIONS)
        .lease(Duration::from_millis(300));
    let store = Arc::new(SqlxStore::open(pool.clone(), options).await.unwrap());

    // A release without the step: the request stops at `sending` and
    // leaves the operation there (as a request whose process died would).
    let without = Engine::builder(Arc::clone(&store)).build();
    let stopped = add(&without, "n-3", "later", true).await;
    assert_eq!(stopped.response.status, 503, "{:?}", stopped.response);
    assert_eq!(
        notes(&pool).await,
        [("n-3".to_owned(), "later".to_owned(), false)]
    );

    // The release with it: its completer finishes the operation.
    let with = Engine::builder(Arc::clone(&store)).steps(Send).build();
    let completer = tokio::spawn(with.completer(Duration::from_millis(100)));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !notes(&pool).await[0].2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the completer never finished it"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    completer.abort();
    let replayed = add(&with, "n-3", "later", true).await;
    assert!(replayed.replayed);
    assert_eq!(replayed.response.status, 201);
}

/// Answers the `lock_timeout` its own transaction runs under.
#[derive(Debug)]
struct ShowLockTimeout;

impl SqlxOperation for ShowLockTimeout {
    async fn run(&self, conn: &mut PgConnection, _at: &RunContext<'_>) -> Result<PhaseEnd> {
        let (timeout,): (String,) = sqlx::query_as("SHOW lock_timeout")
            .fetch_one(&mut *conn)
            .await?;
        Ok(PhaseEnd::Finished(StoredResponse::new(
            StatusCode::OK,
            "text/plain",
            timeout,
        )))
    }
}

/// An operation on the application's pool runs under the engine's
/// `lock_timeout` (a key held by another transaction is answered 409, not
/// waited on forever), and the connection goes back to the pool without
/// it.
#[tokio::test]
#[ignore = "needs PostgreSQL: TEST_POSTGRES_URL, --include-ignored"]
async fn an_operation_runs_under_the_engines_lock_timeout_and_the_pool_gets_none() {
    let db = Database::postgres().await.unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&db.url())
        .await
        .unwrap();
    let options = StoreOptions::new().migrations(MIGRATIONS);
    let engine = Engine::new(SqlxStore::open(pool.clone(), options).await.unwrap());
    let answer = engine
        .execute(
            common::request("lock-1", "show"),
            &serde_json::json!({ "text": "show" }),
            &NoFaults,
            |_| Ok::<_, ()>(ShowLockTimeout),
        )
        .await
        .or_else(exactly_once::Refused::into_answer)
        .expect("the body parses");
    assert_eq!(answer.response.status, 200, "{:?}", answer.response);
    let inside = String::from_utf8_lossy(&answer.response.body).into_owned();
    assert_ne!(
        inside, "0",
        "no lock_timeout inside the engine's transaction"
    );
    // The pool's one connection, the one the operation ran on.
    let (outside,): (String,) = sqlx::query_as("SHOW lock_timeout")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(outside, "0", "the engine's lock_timeout ({inside}) stayed");
}
