//! The engine on sqlx under the faults the tokio-postgres backend's tests
//! put the shop through, with the same answers: each on a PostgreSQL
//! cluster of its own (testkit's, PostgreSQL installed; run with
//! `--include-ignored`).

mod common;

use common::notes::{add_note, sqlx_engine, MIGRATIONS};
use exactly_once::{Engine, Error, Refused, Sqlx, SqlxStore, StoreOptions};
use std::sync::Arc;
use std::time::Duration;
use testkit::Database;

/// A fresh database on `cluster`, the engine on a sqlx pool of it.
async fn engine_on(cluster: &testkit::Postgres) -> (Database, Arc<Engine<Sqlx>>) {
    let db = Database::postgres_on(&cluster.url()).await.unwrap();
    let engine = sqlx_engine(&db.url(), 4).await;
    (db, engine)
}

/// With `synchronous_standby_names` naming a standby that never confirms,
/// every COMMIT waits; each waiting one is cancelled (`pg_cancel_backend`,
/// as an operator or a failover tool does). PostgreSQL then answers the
/// COMMIT as done, with a WARNING: committed here, perhaps not on any
/// standby. The engine on tokio-postgres answers 503 "may or may not have
/// been done" (server/tests/failover); on sqlx it must too, never 201.
#[tokio::test]
#[ignore = "needs PostgreSQL installed (a cluster of its own), --include-ignored"]
async fn a_commit_whose_wait_for_the_standby_is_cancelled_is_an_unknown_outcome() {
    let cluster = testkit::Postgres::start().unwrap();
    let (db, engine) = engine_on(&cluster).await;
    let admin = db.postgres_client().await.unwrap();
    for sql in [
        "ALTER SYSTEM SET synchronous_standby_names = 'never_connects'",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(sql).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    for key in ["k-1", "k-2"] {
        let request = tokio::spawn({
            let engine = Arc::clone(&engine);
            async move { add_note(&engine, key).await }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let cancelled = loop {
            let rows = admin
                .query(
                    "SELECT pg_cancel_backend(pid) FROM pg_stat_activity
                     WHERE wait_event = 'SyncRep'",
                    &[],
                )
                .await
                .unwrap();
            if !rows.is_empty() {
                break rows.len();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no COMMIT waited for the standby"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(cancelled, 1);
        let answer = tokio::time::timeout(Duration::from_secs(20), request)
            .await
            .expect("the request answered")
            .unwrap();
        match answer {
            Err(Refused::Engine(Error::OutcomeUnknown(_))) => {}
            Ok(answer) => panic!(
                "a commit the standby may not have was answered {} {}",
                answer.response.status,
                String::from_utf8_lossy(&answer.response.body)
            ),
            Err(other) => panic!("answered {other:?}, not an unknown outcome"),
        }
    }
    // Committed here all the same: the retry learns it, and replays.
    for sql in [
        "ALTER SYSTEM RESET synchronous_standby_names",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(sql).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let retry = add_note(&engine, "k-1").await.unwrap();
    assert_eq!(retry.response.status, 201);
    assert!(retry.replayed);
    assert_eq!(db.count("notes").await.unwrap(), 2);
}

/// A TCP forwarder on loopback whose upstream can be switched: the
/// address a pool keeps while a failover moves the primary behind it.
struct Forwarder {
    addr: std::net::SocketAddr,
    upstream: Arc<std::sync::Mutex<std::net::SocketAddr>>,
}

impl Forwarder {
    async fn start(upstream: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let upstream = Arc::new(std::sync::Mutex::new(upstream));
        let to = Arc::clone(&upstream);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let target = *to.lock().unwrap();
                tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Self { addr, upstream }
    }

    fn switch(&self, upstream: std::net::SocketAddr) {
        *self.upstream.lock().unwrap() = upstream;
    }
}

/// A failover behind an address that stays the same (a virtual IP, a
/// proxy): the new primary, an asynchronous standby promoted, lacks what
/// the old one last committed. A record the engine still holds in memory
/// must not be served from there: as on tokio-postgres, a new server is a
/// new epoch of the store, and the database decides again.
#[tokio::test]
#[ignore = "needs PostgreSQL installed (clusters of its own), --include-ignored"]
async fn after_a_failover_records_in_memory_are_not_served() {
    let old = testkit::Postgres::start().unwrap();
    let new = testkit::Postgres::start().unwrap();
    let db = Database::postgres_on(&old.url()).await.unwrap();
    let name = db.postgres_name().unwrap().to_owned();
    // The new primary: the same database, its schema, none of its rows.
    let on_new =
        Database::postgres_url(format!("{}/{name}", new.url().rsplit_once('/').unwrap().0));
    let creator = Database::postgres_url(new.url())
        .postgres_client()
        .await
        .unwrap();
    creator
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let pool = sqlx::PgPool::connect(&on_new.url()).await.unwrap();
    SqlxStore::open(pool.clone(), StoreOptions::new().migrations(MIGRATIONS))
        .await
        .unwrap();
    pool.close().await;

    let forwarder = Forwarder::start(old.addr()).await;
    let url = format!("postgres://postgres@{}/{name}", forwarder.addr);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap();
    let options = StoreOptions::new().migrations(MIGRATIONS);
    let store = SqlxStore::open(pool, options).await.unwrap();
    let engine = Engine::new(store);
    let first = add_note(&engine, "k-1").await.unwrap();
    assert_eq!(first.response.status, 201);
    assert!(add_note(&engine, "k-1").await.unwrap().replayed);

    // The failover: the old primary is gone, the address leads to the new.
    forwarder.switch(new.addr());
    old.stop_fast().unwrap();
    // Other traffic reaches the new primary first (a new key)...
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match add_note(&engine, "k-2").await {
            Ok(answer) => break assert_eq!(answer.response.status, 201),
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("no answer after the failover: {e:?}"),
        }
    }
    // ... then the retry of the key the old primary answered.
    let after = add_note(&engine, "k-1").await.unwrap();
    assert!(
        !after.replayed,
        "the record of the old primary was served from memory after the failover"
    );
    assert_eq!(after.response.status, 201);
    assert_eq!(on_new.count("notes").await.unwrap(), 2);
}

/// A primary whose machine hangs (every process of its cluster stopped:
/// connections stay open, the kernel acknowledges what is sent, nothing
/// answers): as on tokio-postgres (server/tests/failover/hang.rs), no
/// request waits more than 10 s, and each is answered 503, never left
/// hanging on the application's pool.
#[tokio::test]
#[ignore = "needs PostgreSQL installed (a cluster of its own), --include-ignored"]
async fn a_hung_primary_leaves_no_request_waiting_more_than_ten_seconds() {
    let cluster = testkit::Postgres::start().unwrap();
    let (_db, engine) = engine_on(&cluster).await;
    assert_eq!(add_note(&engine, "k-0").await.unwrap().response.status, 201);

    cluster.freeze().unwrap();
    let mut answers = Vec::new();
    for key in ["k-1", "k-2", "k-3"] {
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(30), add_note(&engine, key)).await;
        let status = answer.map(|a| a.or_else(Refused::into_answer).unwrap().response.status);
        answers.push((key, started.elapsed(), status));
    }
    let started = std::time::Instant::now();
    let health = tokio::time::timeout(Duration::from_secs(30), engine.health()).await;
    let health_waited = started.elapsed();
    cluster.kill_machine().unwrap();

    for (key, waited, status) in answers {
        assert!(
            waited <= Duration::from_secs(10),
            "{key} waited {waited:?} for its answer ({status:?})"
        );
        assert_eq!(status, Ok(503), "{key}");
    }
    assert!(
        health_waited <= Duration::from_secs(10) && matches!(health, Ok(Err(_))),
        "the health check waited {health_waited:?}: {health:?}"
    );
}
