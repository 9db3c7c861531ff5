//! The application of the engine's tests on sqlx: one table, `notes`, and
//! one operation that adds a row to it with a sqlx query in the engine's
//! transaction, answered `201 {"note": ID}`.

use exactly_once::postgres::sqlx::SqlxOperation;
use exactly_once::postgres::Result;
use exactly_once::{
    Answer, Caller, Engine, Fingerprint, IdempotencyKey, IdempotentRequest, Migration, NoFaults,
    PhaseEnd, Refused, RunContext, Sqlx, SqlxStore, StoreOptions, StoredResponse,
};
use http::StatusCode;
use sqlx::PgConnection;
use std::sync::Arc;

/// The application's own table, beside the engine's.
pub(crate) const MIGRATIONS: &[Migration] = &[Migration::contract(
    1,
    "0001_notes",
    "CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL)",
)];

/// One row in the application's table, written with sqlx.
#[derive(Debug)]
pub(crate) struct AddNote;

impl SqlxOperation for AddNote {
    async fn run(&self, conn: &mut PgConnection, at: &RunContext<'_>) -> Result<PhaseEnd> {
        let (id,): (i64,) = sqlx::query_as("INSERT INTO notes (key) VALUES ($1) RETURNING id")
            .bind(at.key.as_ref())
            .fetch_one(&mut *conn)
            .await?;
        let body = serde_json::json!({ "note": id });
        Ok(PhaseEnd::Finished(StoredResponse::json(
            StatusCode::CREATED,
            &body,
        )))
    }
}

/// `POST /notes` under `key`, by one session.
pub(crate) async fn add_note(engine: &Engine<Sqlx>, key: &str) -> Result<Answer, Refused<()>> {
    let body = serde_json::json!({ "note": key });
    let request = IdempotentRequest {
        caller: Caller::of(b"a-session"),
        key: IdempotencyKey::parse(key.as_bytes()).unwrap(),
        fingerprint: Fingerprint::new(&http::Method::POST, "/notes", &body),
    };
    engine
        .execute(request, &body, &NoFaults, |_| Ok::<_, ()>(AddNote))
        .await
}

/// The engine on a sqlx pool of `connections` to `url`, with the notes
/// table migrated.
pub(crate) async fn sqlx_engine(url: &str, connections: u32) -> Arc<Engine<Sqlx>> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(connections)
        .connect(url)
        .await
        .unwrap();
    let options = StoreOptions::new().migrations(MIGRATIONS);
    let store = SqlxStore::open(pool, options).await.unwrap();
    Arc::new(Engine::new(store))
}
