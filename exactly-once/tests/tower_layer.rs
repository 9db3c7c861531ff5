//! The engine outside axum: a plain tower service behind [`KeyedLayer`],
//! on a real SQLite file, or on PostgreSQL when `TEST_POSTGRES_URL` names
//! a server (a fresh database each test). What a team on hyper or tower
//! checks: a retry gets the first answer byte for byte, a reused key with
//! another body is a 422, concurrent duplicates run once, a request
//! refused at the edge stores nothing, an operation's own TTL and a
//! route's key namespace hold, and the replay hook sees each replay.

use bytes::Bytes;
use exactly_once::postgres::PostgresOperation;
use exactly_once::postgres::Transaction;
use exactly_once::{
    Any, AnyStore, Caller, Engine, Keyed, KeyedLayer, NoFaults, Operation, PhaseEnd, Refused,
    RunContext, Sqlite, StoredResponse,
};
use http::StatusCode;
use http_body_util::Full;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use testkit::Database;
use tower::{Service, ServiceBuilder, ServiceExt};

/// The operation: counts its runs and answers 201 with the note and the
/// run's number, so a second run would show.
#[derive(Debug)]
struct AddNote {
    text: String,
    runs: Arc<AtomicUsize>,
    ttl: Option<Duration>,
}

impl AddNote {
    fn answer(&self) -> PhaseEnd {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let body = serde_json::json!({ "note": self.text, "run": run });
        PhaseEnd::Finished(StoredResponse::new(
            StatusCode::CREATED,
            "application/json",
            serde_json::to_vec(&body).unwrap(),
        ))
    }
}

// The test runs on either database, as `TEST_POSTGRES_URL` says: the
// operation says how it runs on each, and gets `Operation<Any>` from both.
impl Operation<Sqlite> for AddNote {
    fn run(
        &self,
        _conn: &rusqlite::Connection,
        _at: &RunContext<'_>,
    ) -> rusqlite::Result<PhaseEnd> {
        Ok(self.answer())
    }

    fn key_ttl(&self) -> Option<Duration> {
        self.ttl
    }
}

impl PostgresOperation for AddNote {
    async fn run(
        &self,
        _tx: &Transaction<'_>,
        _at: &RunContext<'_>,
    ) -> exactly_once::postgres::Result<PhaseEnd> {
        Ok(self.answer())
    }

    fn key_ttl(&self) -> Option<Duration> {
        self.ttl
    }
}

struct App {
    engine: Engine<Any>,
    runs: Arc<AtomicUsize>,
    replays: Arc<AtomicUsize>,
    _db: Database,
}

async fn app() -> App {
    let (db, store) = store(Duration::from_secs(30)).await;
    let replays = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&replays);
    let engine = Engine::builder(store)
        .steps(Slow::default())
        .on_replay(move |replay| {
            assert_eq!(replay.status, 201);
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .build();
    App {
        engine,
        runs: Arc::new(AtomicUsize::new(0)),
        replays,
        _db: db,
    }
}

/// A fresh database and the engine's store on it, with leases of `lease`.
async fn store(lease: Duration) -> (Database, Arc<AnyStore>) {
    let db = Database::fresh().await.unwrap();
    let store = match db.sqlite_path() {
        Some(path) => {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let options = exactly_once::StoreOptions::new().lease(lease);
            AnyStore::from(Arc::new(
                exactly_once::SqliteStore::open(path, options).unwrap(),
            ))
        }
        None => {
            let options = exactly_once::StoreOptions::new().lease(lease);
            AnyStore::from(Arc::new(
                exactly_once::PostgresStore::open(&db.url(), options)
                    .await
                    .unwrap(),
            ))
        }
    };
    (db, Arc::new(store))
}

/// An operation in two phases whose first stops at `quick`.
#[derive(Debug)]
struct StartCall;

impl Operation<Sqlite> for StartCall {
    fn run(
        &self,
        _conn: &rusqlite::Connection,
        _at: &RunContext<'_>,
    ) -> rusqlite::Result<PhaseEnd> {
        Ok(PhaseEnd::stop("quick", &serde_json::json!({})))
    }
}

impl PostgresOperation for StartCall {
    async fn run(
        &self,
        _tx: &Transaction<'_>,
        _at: &RunContext<'_>,
    ) -> exactly_once::postgres::Result<PhaseEnd> {
        Ok(PhaseEnd::stop("quick", &serde_json::json!({})))
    }
}

/// Steps whose call at `quick` never answers (the process dies in it),
/// with a lease of half a second at that point; `calls` counts the calls,
/// each a run of the step: the request's, then the completer's.
#[derive(Default)]
struct Slow {
    calls: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl exactly_once::Steps<Any> for Slow {
    async fn step(
        &self,
        _lease: &exactly_once::Lease,
    ) -> Result<Arc<dyn Operation<Any>>, exactly_once::Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }

    fn lease(&self, point: &str) -> Option<Duration> {
        (point == "quick").then_some(Duration::from_millis(500))
    }
}

type Response = http::Response<Bytes>;
type Request = http::Request<Full<Bytes>>;

/// What the test needs of the service: any tower service over HTTP
/// requests, shared between tasks.
trait Notes:
    Service<Request, Response = Response, Error = std::convert::Infallible, Future: Send>
    + Clone
    + Send
    + 'static
{
}

impl<T> Notes for T where
    T: Service<Request, Response = Response, Error = std::convert::Infallible, Future: Send>
        + Clone
        + Send
        + 'static
{
}

/// The service a hyper or tower team writes: the layer keys the request,
/// the handler parses its body into the operation and asks the engine.
/// `/short` notes live a second; `/a` and `/b` keep their keys apart.
fn service(app: &App) -> impl Notes {
    let (engine, runs) = (app.engine.clone(), Arc::clone(&app.runs));
    ServiceBuilder::new()
        .layer(KeyedLayer::new(|parts: &http::request::Parts| {
            let token = parts.headers.get(http::header::AUTHORIZATION)?;
            Some(Caller::of(token.as_bytes()))
        }))
        .service_fn(move |request: http::Request<Keyed>| {
            let (engine, runs) = (engine.clone(), Arc::clone(&runs));
            async move {
                let path = request.uri().path().to_owned();
                let mut keyed = request.into_body();
                if path == "/a" || path == "/b" {
                    keyed = keyed.within(&path);
                }
                let ttl = (path == "/short").then_some(Duration::from_secs(1));
                let parse = |body: &serde_json::Value| match body["note"].as_str() {
                    Some(text) => Ok(AddNote {
                        text: text.to_owned(),
                        runs,
                        ttl,
                    }),
                    None => Err("a note needs a \"note\""),
                };
                let answer = match engine
                    .execute(keyed.request, &keyed.body, &NoFaults, parse)
                    .await
                    .or_else(Refused::into_answer)
                {
                    Ok(answer) => answer.into_http(),
                    Err(why) => http::Response::builder()
                        .status(StatusCode::BAD_REQUEST)
                        .body(Bytes::from(why))
                        .unwrap(),
                };
                Ok(answer)
            }
        })
}

fn post(path: &str, key: Option<&str>, body: &str) -> Request {
    let mut request = http::Request::post(path)
        .header(http::header::AUTHORIZATION, "token-of-alice")
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

async fn send(service: &impl Notes, request: Request) -> Response {
    service.clone().oneshot(request).await.unwrap()
}

fn replayed(response: &Response) -> bool {
    response.headers().get("idempotent-replayed").is_some()
}

#[tokio::test]
async fn a_tower_service_replays_refuses_reuse_and_runs_concurrent_duplicates_once() {
    let app = app().await;
    let service = service(&app);

    let first = send(&service, post("/notes", Some("k-1"), r#"{"note":"hi"}"#)).await;
    assert_eq!(first.status(), 201);
    assert!(!replayed(&first));
    let again = send(&service, post("/notes", Some("k-1"), r#"{"note":"hi"}"#)).await;
    assert_eq!(again.status(), 201);
    assert!(replayed(&again));
    assert_eq!(again.body(), first.body(), "the replay is byte for byte");
    assert_eq!(
        app.replays.load(Ordering::SeqCst),
        1,
        "the hook saw the replay"
    );

    let reused = send(&service, post("/notes", Some("k-1"), r#"{"note":"bye"}"#)).await;
    assert_eq!(reused.status(), 422);
    assert_eq!(reused.headers()["content-type"], "application/problem+json");
    // Even with a body the route would refuse: the record decides first.
    let unparsed = send(&service, post("/notes", Some("k-1"), r#"{"other":1}"#)).await;
    assert_eq!(unparsed.status(), 422);
    assert_eq!(app.replays.load(Ordering::SeqCst), 1, "a 422 is no replay");

    let duplicates = (0..20).map(|_| {
        let service = service.clone();
        tokio::spawn(async move {
            send(
                &service,
                post("/notes", Some("k-2"), r#"{"note":"twenty"}"#),
            )
            .await
        })
    });
    let mut bodies = Vec::new();
    for duplicate in duplicates {
        let response = duplicate.await.unwrap();
        match response.status().as_u16() {
            201 => bodies.push(response.into_body()),
            409 => assert!(response.headers().contains_key("retry-after")),
            other => panic!("a concurrent duplicate got {other}"),
        }
    }
    assert!(!bodies.is_empty());
    assert!(bodies.iter().all(|body| body == &bodies[0]));
    assert_eq!(app.runs.load(Ordering::SeqCst), 2, "k-1 once and k-2 once");
}

#[tokio::test]
async fn requests_refused_at_the_edge_never_reach_the_service_and_store_nothing() {
    let app = app().await;
    let service = service(&app);

    let mut anonymous = post("/notes", Some("k-3"), r#"{"note":"hi"}"#);
    anonymous.headers_mut().remove(http::header::AUTHORIZATION);
    let refused = send(&service, anonymous).await;
    assert_eq!(refused.status(), 401);
    let problem: serde_json::Value = serde_json::from_slice(refused.body()).unwrap();
    assert_eq!(problem["type"], "/problems/unauthorized");

    assert_eq!(
        send(&service, post("/notes", None, "{}")).await.status(),
        400
    );
    let mut form = post("/notes", Some("k-3"), "note=hi");
    form.headers_mut().insert(
        http::header::CONTENT_TYPE,
        "application/x-www-form-urlencoded".parse().unwrap(),
    );
    assert_eq!(send(&service, form).await.status(), 415);
    let big = format!(
        r#"{{"note":"{}"}}"#,
        "x".repeat(exactly_once::MAX_BODY_BYTES)
    );
    assert_eq!(
        send(&service, post("/notes", Some("k-3"), &big))
            .await
            .status(),
        413
    );
    assert_eq!(
        send(&service, post("/notes", Some("k-3"), "{"))
            .await
            .status(),
        400
    );
    let unparsed = send(&service, post("/notes", Some("k-3"), r#"{"x":1}"#)).await;
    assert_eq!(unparsed.status(), 400, "the route's own refusal");
    assert_eq!(app.runs.load(Ordering::SeqCst), 0);

    // Nothing was stored under k-3: the corrected request runs.
    let fixed = send(&service, post("/notes", Some("k-3"), r#"{"note":"hi"}"#)).await;
    assert_eq!(fixed.status(), 201);
    assert!(!replayed(&fixed));
    assert_eq!(app.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_operation_with_its_own_ttl_is_forgotten_when_it_says() {
    let app = app().await;
    let service = service(&app);

    let short = send(&service, post("/short", Some("k-4"), r#"{"note":"brief"}"#)).await;
    let long = send(&service, post("/notes", Some("k-5"), r#"{"note":"kept"}"#)).await;
    assert_eq!(
        (short.status().as_u16(), long.status().as_u16()),
        (201, 201)
    );
    let soon = send(&service, post("/short", Some("k-4"), r#"{"note":"brief"}"#)).await;
    assert!(replayed(&soon), "within its second the key is remembered");

    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let later = send(&service, post("/short", Some("k-4"), r#"{"note":"brief"}"#)).await;
    assert_eq!(later.status(), 201);
    assert!(!replayed(&later), "past its own TTL the key is new again");
    assert_ne!(later.body(), short.body(), "a second run");
    let kept = send(&service, post("/notes", Some("k-5"), r#"{"note":"kept"}"#)).await;
    assert!(
        replayed(&kept),
        "the store's TTL (a day) still holds the other"
    );
    assert_eq!(app.runs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_key_namespace_per_route_keeps_the_same_key_apart() {
    let app = app().await;
    let service = service(&app);

    let a = send(&service, post("/a", Some("k-6"), r#"{"note":"on a"}"#)).await;
    let b = send(&service, post("/b", Some("k-6"), r#"{"note":"on b"}"#)).await;
    assert_eq!(
        (a.status().as_u16(), b.status().as_u16()),
        (201, 201),
        "two operations"
    );
    assert!(!replayed(&b));
    let a_again = send(&service, post("/a", Some("k-6"), r#"{"note":"on a"}"#)).await;
    assert!(replayed(&a_again));
    assert_eq!(a_again.body(), a.body());
    // Without a namespace the same key on another path is a 422.
    let plain = send(&service, post("/notes", Some("k-7"), r#"{"note":"x"}"#)).await;
    let other = send(&service, post("/other", Some("k-7"), r#"{"note":"x"}"#)).await;
    assert_eq!(
        (plain.status().as_u16(), other.status().as_u16()),
        (201, 422)
    );
    assert_eq!(app.runs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_recovery_point_with_its_own_lease_is_resumed_after_it_not_the_stores() {
    // The store's lease is a minute; the point `quick` says half a second.
    let (_db, store) = store(Duration::from_secs(60)).await;
    let slow = Slow::default();
    let calls = Arc::clone(&slow.calls);
    let engine = Engine::builder(Arc::clone(&store)).steps(slow).build();
    let caller = Caller::of(b"token-of-alice");
    let key = exactly_once::IdempotencyKey::parse(b"k-8").unwrap();
    let request = exactly_once::IdempotentRequest {
        caller,
        key: key.clone(),
        fingerprint: exactly_once::Fingerprint::new(
            &http::Method::POST,
            "/calls",
            &serde_json::json!({}),
        ),
    };
    // The request starts the step, then dies in it (its task is dropped:
    // nothing renews the lease any more).
    let running = tokio::spawn({
        let engine = engine.clone();
        async move {
            let _ = engine
                .execute(request, &serde_json::json!({}), &NoFaults, |_| {
                    Ok::<_, ()>(StartCall)
                })
                .await;
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.abort();

    // The completer, looking every 100 ms, runs the step again once the
    // point's half second is over: well before the store's minute.
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the request ran the step");
    let completer = tokio::spawn(engine.completer(Duration::from_millis(100)));
    let started = std::time::Instant::now();
    while calls.load(Ordering::SeqCst) < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "not resumed after 5 s: the store's minute-long lease, not the point's half second"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    completer.abort();
}
