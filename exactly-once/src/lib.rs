//! Idempotency keys for axum, recorded **in the same database transaction
//! as your own write**.
//!
//! A client sends a mutating request with an `Idempotency-Key`. The engine
//! claims the key, runs your operation's SQL and records the response in
//! one transaction, and answers once that commit is durable. A retry gets
//! the stored response byte for byte (`Idempotent-Replayed: true`); the key
//! reused with another request is a 422; concurrent duplicates never run
//! twice (409 with `Retry-After` while the first runs); records expire
//! after a TTL. Work outside the database (a payment provider) runs as
//! [`Steps`] between phases, each phase a transaction that records a
//! recovery point, under a lease, with a downstream key of its own; a
//! completer finishes what crashed. Messages out leave through an
//! [`outbox`] written in your transaction.
//!
//! Two stores: [`SqliteStore`], embedded, one writer thread with group
//! commit; [`PostgresStore`], for many instances on one database.
//!
//! # Quick start
//!
//! An operation is your own type: what it writes, on each backend it
//! supports, and what it answers.
//!
//! ```
//! use exactly_once::{
//!     Caller, Engine, Keyed, Operation, RunContext, SqliteOptions, SqliteStore, Step,
//!     StoredResponse,
//! };
//! use axum::{extract::{FromRequestParts, State}, response::Response, routing::post, Router};
//! use http::{request::Parts, StatusCode};
//!
//! /// `POST /notes {"text": "..."}`: one row, answered 201.
//! #[derive(Debug)]
//! struct AddNote {
//!     text: String,
//! }
//!
//! impl Operation for AddNote {
//!     fn run_sqlite(
//!         &self,
//!         conn: &rusqlite::Connection,
//!         at: &RunContext<'_>,
//!     ) -> rusqlite::Result<Step> {
//!         conn.execute("INSERT INTO notes (text) VALUES (?1)", [&self.text])?;
//!         let body = serde_json::json!({ "id": conn.last_insert_rowid(), "text": self.text });
//!         Ok(Step::Finished(StoredResponse::new(
//!             StatusCode::CREATED,
//!             "application/json",
//!             body.to_string(),
//!         )))
//!     }
//! }
//!
//! /// Who calls: here a header; in your application, your authentication.
//! struct User(Caller);
//!
//! impl FromRequestParts<Engine> for User {
//!     type Rejection = StatusCode;
//!
//!     async fn from_request_parts(parts: &mut Parts, _: &Engine) -> Result<Self, StatusCode> {
//!         let user = parts.headers.get("x-user").ok_or(StatusCode::UNAUTHORIZED)?;
//!         Ok(User(Caller::of(user.as_bytes())))
//!     }
//! }
//!
//! impl From<User> for Caller {
//!     fn from(user: User) -> Caller {
//!         user.0
//!     }
//! }
//!
//! async fn add_note(State(engine): State<Engine>, keyed: Keyed<User>) -> Response {
//!     engine
//!         .run(keyed, |body| {
//!             let text = body["text"].as_str().ok_or(StatusCode::BAD_REQUEST)?;
//!             Ok(AddNote { text: text.to_owned() })
//!         })
//!         .await
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("notes.db");
//! const MIGRATIONS: &[(i64, &str)] =
//!     &[(1, "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")];
//! let store = SqliteStore::open(SqliteOptions::new(path).migrations(MIGRATIONS))?;
//! let engine = Engine::new(store);
//! let app: Router = Router::new().route("/notes", post(add_note)).with_state(engine);
//!
//! // Twice the same request under one key: one note, the same answer.
//! use tower::ServiceExt;
//! let request = || {
//!     http::Request::post("/notes")
//!         .header("x-user", "ada")
//!         .header("idempotency-key", "4f1c")
//!         .header("content-type", "application/json")
//!         .body(axum::body::Body::from(r#"{"text":"hello"}"#))
//!         .unwrap()
//! };
//! let first = app.clone().oneshot(request()).await?;
//! let again = app.clone().oneshot(request()).await?;
//! assert_eq!(first.status(), StatusCode::CREATED);
//! assert_eq!(again.status(), StatusCode::CREATED);
//! assert_eq!(again.headers()["idempotent-replayed"], "true");
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! * [`Engine`]: what handlers and tasks share; [`Keyed`], the extractor
//!   of a keyed JSON request; [`Engine::run`], the flow (replay, claim,
//!   run, record, answer).
//! * [`Operation`] and [`Step`]: your SQL inside the engine's transaction
//!   and how a phase ends; [`Steps`]: your work between phases.
//! * [`store`]: the [`Store`] protocol; [`SqliteStore`], [`PostgresStore`].
//! * [`outbox`]: messages written with your transaction and relayed by a
//!   [`Transport`](outbox::Transport) of yours.
//! * [`Engine::completer`], [`Engine::sweeper`], [`Engine::relay`]: the
//!   background tasks.
//! * [`Error`] and [`Problem`]: `application/problem+json` answers.
//! * [`Metrics`]: Prometheus metrics; [`Hooks`]: fault injection.
//! * [`Caller`], [`IdempotencyKey`], [`Fingerprint`], [`OperationId`]:
//!   what identifies an operation; [`clock`]: the boot clock.
//!
//! The design, for contributors: `docs/ENGINE.md` in the repository.

#![warn(missing_docs)]

#[macro_use]
mod macros;

mod caller;
pub mod clock;
mod completer;
mod engine;
pub mod error;
mod fingerprint;
mod flow;
pub mod hooks;
pub mod key;
pub mod metrics;
mod operation_id;
pub mod outbox;
pub mod record;
pub mod store;
pub mod sweep;
mod sweeper;

pub use caller::Caller;
pub use engine::{Engine, EngineBuilder, NoSteps, Shared, Steps};
pub use error::{Error, Problem, StepUnavailable};
pub use fingerprint::Fingerprint;
pub use flow::keyed::{Keyed, MAX_BODY_BYTES};
pub use flow::{respond, IDEMPOTENT_REPLAYED};
pub use hooks::{Hooks, NoHooks};
pub use key::{IdempotencyKey, IdempotencyKeyError};
pub use metrics::Metrics;
pub use operation_id::OperationId;
pub use record::{Lease, Record, Step, StoredResponse};
pub use store::postgres::{PostgresOptions, PostgresStore};
pub use store::sqlite::{SqliteOptions, SqliteStore};
pub use store::{Durability, Operation, RunContext, Store, StoreError};
