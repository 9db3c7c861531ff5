//! What only PostgreSQL can show: a key held by another transaction. On
//! SQLite, where one writer makes a duplicate wait for the first request
//! instead, these tests are skipped (and counted so).

use crate::helpers::{assert_problem, new_key, TestApp};
use std::time::{Duration, Instant};
use tokio_postgres::NoTls;

/// A connection of our own to the app's PostgreSQL database, if it has one.
async fn behind_the_back(app: &TestApp) -> Option<tokio_postgres::Client> {
    let database = app.server.database();
    if !database.is_postgres() {
        testkit::skipped("PostgreSQL only: no other transaction can hold a key on SQLite");
        return None;
    }
    Some(
        database
            .postgres_client()
            .await
            .expect("connect to the app's database"),
    )
}

/// Another transaction claims `key` for the app's caller and does not
/// finish until the returned transaction ends.
async fn hold<'a>(
    other: &'a mut tokio_postgres::Client,
    app: &TestApp,
    key: &str,
) -> tokio_postgres::Transaction<'a> {
    let tx = other.transaction().await.unwrap();
    tx.execute(
        "INSERT INTO idempotency_keys (caller, key, fingerprint, recovery_point, created_at, expires_at)
         VALUES ($1, $2, $3, 'claimed', now(), now() + interval '1 hour')",
        &[&caller_hash(&app.token), &key, &vec![0u8; 32]],
    )
    .await
    .unwrap();
    tx
}

/// A request that waits for its key longer than `lock_timeout` (5 s)
/// because another transaction holds it is answered 409
/// `idempotency-key-in-use` with `Retry-After`, and nothing runs.
#[tokio::test]
async fn a_key_held_past_lock_timeout_is_409_in_use_with_retry_after() {
    let app = TestApp::spawn_with(&[]).await;
    let Some(mut other) = behind_the_back(&app).await else {
        return;
    };
    let key = new_key();
    let tx = hold(&mut other, &app, &key).await;
    let started = Instant::now();
    let r = app.charge(&key, 100).await;
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "it did not wait for the lock"
    );
    assert!(r.headers().contains_key("retry-after"), "Retry-After");
    assert_problem(r, 409, "idempotency-key-in-use").await;
    tx.rollback().await.unwrap();
    assert_eq!(app.count("charges").await, 0);
    assert_eq!(
        app.charge(&key, 100).await.status(),
        201,
        "the key is free again"
    );
}

/// Requests sent together share one statement; one of them waiting past
/// `lock_timeout` for a key another transaction holds is 409, and only it:
/// whoever shared its statement runs again on its own and is answered 201,
/// charged once. The 409 comes after one `lock_timeout` (5 s), not two (the
/// held row used to wait again, as long, when it ran on its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_key_is_409_only_for_its_own_request_among_those_sent_with_it() {
    let app = TestApp::spawn_with(&[]).await;
    let Some(mut other) = behind_the_back(&app).await else {
        return;
    };
    let held = new_key();
    let tx = hold(&mut other, &app, &held).await;
    let caller = app.server.bearer(&app.token);
    // The held key last: the first statement starts with whichever
    // request comes first, and the held one then shares a later one.
    let keys: Vec<String> = (0..15)
        .map(|_| new_key())
        .chain(std::iter::once(held.clone()))
        .collect();
    let body = serde_json::json!({"amount": 100, "currency": "usd"});
    let requests = keys
        .iter()
        .map(|key| caller.keyed("/charges", key).json(&body));
    let sent = std::time::Instant::now();
    let answers = testkit::at_once(requests).await.unwrap();
    let waited = sent.elapsed();
    assert!(
        waited < Duration::from_secs(8),
        "answered after {waited:?}: the held row waited twice"
    );

    assert_eq!(
        answers[15].status,
        409,
        "the held key: {:?}",
        answers[15].json()
    );
    let problem = answers[15].json();
    let kind = problem["type"].as_str().unwrap_or_default();
    assert!(kind.ends_with("/idempotency-key-in-use"), "{kind}");
    for (key, answer) in keys.iter().zip(&answers).take(15) {
        assert_eq!(answer.status, 201, "{key}: {:?}", answer.json());
    }
    tx.rollback().await.unwrap();
    assert_eq!(app.count("charges").await, 15, "one charge per free key");
}

/// An expired record whose row another transaction holds: the wait is the
/// same wait as for a live key, and is answered the same (409 with
/// `Retry-After`), not 503. (Before, the expired record was deleted by a
/// statement of its own, whose lock timeout answered 503.)
#[tokio::test]
async fn a_lock_wait_on_an_expired_record_is_409_like_any_other_wait() {
    let app = TestApp::spawn_with(&["--key-ttl", "1s", "--sweep-interval", "1h"]).await;
    let Some(mut other) = behind_the_back(&app).await else {
        return;
    };
    let key = new_key();
    assert_eq!(app.charge(&key, 100).await.status(), 201);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let tx = other.transaction().await.unwrap();
    // By caller and key, as the engine finds a record: Citus runs it on
    // the record's shard (it refuses FOR UPDATE across shards).
    let locked = tx
        .execute(
            "SELECT 1 FROM idempotency_keys WHERE caller = $1 AND key = $2 FOR UPDATE",
            &[&caller_hash(&app.token), &key],
        )
        .await
        .unwrap();
    assert_eq!(locked, 1);
    let r = app.charge(&key, 100).await;
    assert!(r.headers().contains_key("retry-after"), "Retry-After");
    assert_problem(r, 409, "idempotency-key-in-use").await;
    tx.rollback().await.unwrap();
    // Expired, so it runs again: the documented contract.
    assert_eq!(app.charge(&key, 100).await.status(), 201);
    assert_eq!(app.charges().await.len(), 2);
}

/// The caller as the server stores it: the SHA-256 of the token.
fn caller_hash(token: &str) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    Sha256::digest(token.as_bytes()).to_vec()
}

/// A backend killed while its COMMIT waits for a synchronous standby has
/// committed locally: the reservation's answer is "outcome unknown, retry
/// with the same key", never "nothing was done", and the retry replays the
/// reservation that was committed. The backend sends 57P01 (terminating
/// connection due to administrator command) as it goes; tokio-postgres
/// reports that either as the error of the COMMIT or as a closed connection
/// (here, so far, always the latter), and both are outcome unknown. On a
/// cluster of its own (its standby is a name that never connects, so every
/// COMMIT waits), where PostgreSQL is installed (`TEST_POSTGRES_URL` set).
#[tokio::test]
async fn a_commit_killed_while_it_waits_for_a_synchronous_standby_is_outcome_unknown() {
    if std::env::var_os("TEST_POSTGRES_URL").is_none() {
        testkit::skipped("PostgreSQL only, on a cluster of its own (TEST_POSTGRES_URL)");
        return;
    }
    let cluster = testkit::Postgres::start().unwrap();
    let database = testkit::Database::postgres_on(&cluster.url())
        .await
        .unwrap();
    let app = TestApp::start(
        testkit::Server::builder()
            .durability_full()
            .database(database),
    )
    .await;
    let (admin, connection) = tokio_postgres::connect(&cluster.url(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    for sql in [
        "ALTER SYSTEM SET synchronous_standby_names = 'absent_standby'",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(sql).await.unwrap();
    }
    // The checkpointer takes the new setting in on its own time.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // A reservation commits with COMMIT (a charge without a provider is
    // a statement that commits on its own).
    let key = new_key();
    let reservation = serde_json::json!({"item_id": "sku-poster", "quantity": 1});
    let paying = app.post("/reservations", &key, &reservation);
    let killing = async {
        for _ in 0..200 {
            let killed = admin
                .query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                     WHERE wait_event = 'SyncRep'",
                    &[],
                )
                .await
                .unwrap();
            if !killed.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no COMMIT waited for the standby");
    };
    let (answer, ()) = tokio::join!(paying, killing);
    for sql in [
        "ALTER SYSTEM RESET synchronous_standby_names",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(sql).await.unwrap();
    }
    assert!(answer.headers().contains_key("retry-after"), "Retry-After");
    let problem = assert_problem(answer, 503, "unavailable").await;
    let detail = problem["detail"].as_str().unwrap();
    assert!(!detail.contains("nothing was done"), "{detail}");
    assert!(detail.contains("may or may not have been done"), "{detail}");

    let retry = app.post("/reservations", &key, &reservation).await;
    assert_eq!(retry.status(), 201);
    assert_eq!(
        retry.headers()["idempotent-replayed"],
        "true",
        "it had committed"
    );
    assert_eq!(app.count("reservations").await, 1);
}
