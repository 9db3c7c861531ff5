//! How the engine's statements and settings reach PostgreSQL
//! (`PostgresStore::open`, on a fresh database of the server
//! `TEST_POSTGRES_URL` names; run with `--include-ignored`).
//!
//! On a plain URL each connection is the server's own for life: the
//! engine's statements are named, prepared once per connection, and the
//! settings (`lock_timeout`, `synchronous_commit`) are the connection's
//! from its start. With `pgbouncer=true` (a pooler in transaction mode)
//! nothing stays on a connection: every statement is unnamed, and every
//! transaction sets what it needs. The second test runs on a plain URL
//! with `pgbouncer=true` added, and through a real PgBouncer in
//! transaction mode (scripts/test.sh).

use exactly_once::postgres::{
    Insert, OneStatement, PostgresOperation, Result, Shape, Sql, Transaction,
};
use exactly_once::{
    Caller, Engine, Fingerprint, IdempotencyKey, IdempotentRequest, Migration, NoFaults, PhaseEnd,
    Postgres, PostgresStore, RunContext, StoreOptions, StoredResponse,
};
use http::StatusCode;
use std::sync::Arc;
use std::time::Duration;
use testkit::Database;
use tokio_postgres::types::Type;

const MIGRATIONS: &[Migration] = &[Migration::contract(
    1,
    "0001_notes",
    "CREATE TABLE notes (id TEXT PRIMARY KEY, caller BYTEA NOT NULL, text TEXT NOT NULL)",
)];

/// A note written with its key's claim, in one statement.
static NOTE: Shape =
    Shape::inserts(&[Insert::into("notes", &[("id", "text"), ("text", "text")]).caller("caller")]);

/// A note: in one statement with its claim (`one_statement`), or, when
/// `in_transaction`, by a statement of its own in the key's transaction.
#[derive(Debug)]
struct AddNote {
    id: String,
    text: String,
    in_transaction: bool,
}

impl AddNote {
    fn response(&self) -> StoredResponse {
        let body = serde_json::json!({ "note": self.id, "text": self.text });
        StoredResponse::new(StatusCode::CREATED, "application/json", body.to_string())
    }
}

impl PostgresOperation for AddNote {
    async fn run(&self, tx: &Transaction<'_>, at: &RunContext<'_>) -> Result<PhaseEnd> {
        const INSERT: Sql = Sql::new(
            "INSERT INTO notes (id, caller, text) VALUES ($1, $2, $3)",
            &[Type::TEXT, Type::BYTEA, Type::TEXT],
        );
        let caller = &at.caller.as_bytes()[..];
        INSERT.execute(tx, &[&self.id, &caller, &self.text]).await?;
        Ok(PhaseEnd::Finished(self.response()))
    }

    fn one_statement(&self) -> Option<OneStatement> {
        if self.in_transaction {
            return None;
        }
        let mut row = NOTE.row();
        row.set("id", &self.id).set("text", &self.text);
        Some(row.answer(self.response()))
    }
}

async fn add(
    engine: &Engine<Postgres>,
    key: &str,
    text: &str,
    in_transaction: bool,
) -> exactly_once::Answer {
    let body = serde_json::json!({ "text": text, "in_transaction": in_transaction });
    let request = IdempotentRequest {
        caller: Caller::of(b"a-session"),
        key: IdempotencyKey::parse(key.as_bytes()).unwrap(),
        fingerprint: Fingerprint::new(&http::Method::POST, "/notes", &body),
    };
    let parse = |_: &serde_json::Value| {
        Ok::<_, ()>(AddNote {
            id: format!("n_{key}"),
            text: text.to_owned(),
            in_transaction,
        })
    };
    engine
        .execute(request, &body, &NoFaults, parse)
        .await
        .or_else(exactly_once::Refused::into_answer)
        .expect("the body parses")
}

/// What `sql` (a query with one text column) answers on `client`, by the
/// simple protocol (which prepares nothing).
async fn texts(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    client
        .simple_query(sql)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(row.get(0).unwrap().to_owned()),
            _ => None,
        })
        .collect()
}

/// The engine's statements named on the session of one connection.
const ENGINE_STATEMENTS: &str = "SELECT statement FROM pg_prepared_statements \
     WHERE statement LIKE '%idempotency_keys%' OR statement LIKE '%INSERT INTO notes%'";

#[tokio::test]
#[ignore = "needs PostgreSQL: TEST_POSTGRES_URL (without pgbouncer=true), --include-ignored"]
async fn a_plain_url_keeps_named_statements_and_the_settings_per_connection() {
    let db = Database::postgres().await.unwrap();
    assert!(
        !db.url().contains("pgbouncer="),
        "this test is for a plain URL"
    );
    let options = StoreOptions::new().migrations(MIGRATIONS);
    let store = PostgresStore::open(&db.url(), options).await.unwrap();
    let pool = store.pool().clone();
    let engine = Engine::new(store);
    engine.health().await.expect("a health check");

    // One at a time, so they share one connection: a note in one
    // statement with its claim, one in a transaction, a replay of each.
    for in_transaction in [false, true] {
        let key = format!("k-{in_transaction}");
        let first = add(&engine, &key, "hello", in_transaction).await;
        assert_eq!(first.response.status, 201);
        let again = add(&engine, &key, "hello", in_transaction).await;
        assert!(again.replayed);
        assert_eq!(again.response.body, first.response.body);
    }
    assert_eq!(db.count("notes").await.unwrap(), 2);

    // Every connection of the store's pool, at once: their sessions.
    let size = pool.status().size;
    assert!(size >= 1);
    let mut held = Vec::new();
    let mut named = Vec::new();
    for _ in 0..size {
        let client = pool.get().await.unwrap();
        let session: &tokio_postgres::Client = &client;
        named.extend(texts(session, ENGINE_STATEMENTS).await);
        // The settings are the session's, outside any transaction.
        assert_eq!(texts(session, "SHOW lock_timeout").await, ["5s"]);
        assert_eq!(texts(session, "SHOW synchronous_commit").await, ["on"]);
        held.push(client);
    }
    let has = |part: &str| named.iter().any(|statement| statement.contains(part));
    assert!(
        has("INSERT INTO idempotency_keys") && has("unnest(") && has("INSERT INTO notes"),
        "the engine's statements (the claim, the one-statement claim, the \
         operation's own insert) are not named on its connections: {named:#?}"
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL: TEST_POSTGRES_URL (with or without a PgBouncer), --include-ignored"]
async fn behind_a_pooler_nothing_stays_on_a_connection() {
    let db = Database::postgres().await.unwrap();
    let url = match db.url() {
        url if url.contains("pgbouncer=true") => url,
        url if url.contains('?') => format!("{url}&pgbouncer=true"),
        url => format!("{url}?pgbouncer=true"),
    };
    let options = StoreOptions::new().migrations(MIGRATIONS);
    let store = PostgresStore::open(&url, options).await.unwrap();
    let pool = store.pool().clone();
    let engine = Arc::new(Engine::new(store));
    engine.health().await.expect("a health check");

    // Many at once, so one-statement claims share statements, and
    // concurrent duplicates of one key.
    let mut tasks = Vec::new();
    for n in 0..24 {
        let engine = Arc::clone(&engine);
        let (key, in_transaction) = match n % 3 {
            0 => ("dup".to_owned(), false),
            1 => (format!("s-{n}"), false),
            _ => (format!("t-{n}"), true),
        };
        tasks.push(tokio::spawn(async move {
            (
                key.clone(),
                add(&engine, &key, "note", in_transaction).await,
            )
        }));
    }
    for task in tasks {
        let (key, answer) = task.await.unwrap();
        let status = answer.response.status;
        match key.as_str() {
            "dup" => assert!([201, 409].contains(&status), "a duplicate got {status}"),
            _ => assert_eq!(status, 201, "{key}"),
        }
    }
    // Each note once; the duplicates wrote one.
    assert_eq!(db.count("notes").await.unwrap(), 1 + 8 + 8);
    let again = add(&engine, "s-1", "note", false).await;
    assert!(again.replayed);
    let again = add(&engine, "t-2", "note", true).await;
    assert!(again.replayed);

    // The engine's transactions set their own lock_timeout: a request
    // behind a lock held elsewhere answers instead of waiting for ever.
    let blocker = db.postgres_client().await.unwrap();
    blocker
        .batch_execute("BEGIN; LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    for in_transaction in [false, true] {
        let blocked = tokio::time::timeout(
            Duration::from_secs(30),
            add(
                &engine,
                &format!("b-{in_transaction}"),
                "blocked",
                in_transaction,
            ),
        )
        .await
        .expect("a request behind a held lock waited for ever: no lock_timeout in its transaction");
        let status = blocked.response.status;
        assert!([409, 503].contains(&status), "behind a held lock: {status}");
    }
    blocker.batch_execute("ROLLBACK").await.unwrap();

    // No session setting and no named statement of the engine on the
    // server connections its own connections reach (each looked at inside
    // one transaction, so a pooler keeps it on one server connection).
    for _ in 0..4 {
        let client = pool.get().await.unwrap();
        let session: &tokio_postgres::Client = &client;
        let seen = texts(
            session,
            &format!(
                "BEGIN; SELECT current_setting('lock_timeout') UNION ALL \
                 SELECT statement FROM ({ENGINE_STATEMENTS}) AS named; COMMIT"
            ),
        )
        .await;
        assert_eq!(
            seen,
            ["0"],
            "settings or named statements stayed on a connection"
        );
    }
}
