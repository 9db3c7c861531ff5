//! Many instances on one PostgreSQL database: a key is still one operation.
//!
//! Needs a PostgreSQL server: `scripts/test.sh` starts one and runs these
//! with `TEST_POSTGRES_URL=... cargo test -p server --test instances -- --include-ignored`.

use serde_json::json;
use std::time::Duration;
use testkit::{clock, Caller, Database, Server};

/// Two instances on one fresh PostgreSQL database whose wall clocks differ:
/// the second's reads `shift_ms` ahead of the first's (behind when
/// negative). Both get `flags`.
async fn skewed_instances(shift_ms: i64, flags: &[&str]) -> [Server; 2] {
    let database = Database::postgres().await.unwrap();
    let first = Server::builder()
        .database(database.clone())
        .flags(flags)
        .start()
        .await
        .unwrap();
    let mut second = Server::builder().database(database).flags(flags);
    for (name, value) in clock::shifted_by(shift_ms).unwrap() {
        second = second.env(name, value);
    }
    [first, second.start().await.unwrap()]
}

/// `POST /charges` of 15.00 usd as `caller` with `key`.
async fn charge(caller: &Caller, key: &str) -> reqwest::Response {
    let body = json!({"amount": 1500, "currency": "usd"});
    caller.post_keyed("/charges", key, &body).await.unwrap()
}

/// A charge at one instance, its retry at the other one second later:
/// a replay of the one charge.
async fn charge_then_retry_elsewhere(instances: &[Server; 2], first: usize) {
    let token = testkit::new_token();
    let key = testkit::new_key();
    let run = charge(&instances[first].bearer(&token), &key).await;
    assert_eq!(run.status(), 201);
    let ran = run.bytes().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let retry = charge(&instances[1 - first].bearer(&token), &key).await;
    assert_eq!(retry.status(), 201);
    assert_eq!(
        retry.headers()["idempotent-replayed"],
        "true",
        "the retry ran again"
    );
    assert_eq!(retry.bytes().await.unwrap(), ran);
    let charges = instances[first].bearer(&token).charges().await.unwrap();
    assert_eq!(charges.len(), 1, "{charges:?}");
}

/// The database's clock decides expiry. An instance whose clock runs 61 s
/// ahead (`--key-ttl 60s`) still replays a record another instance wrote a
/// second ago, instead of calling it expired and charging again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a PostgreSQL server in TEST_POSTGRES_URL (scripts/test.sh provides one)"]
async fn a_retry_at_an_instance_whose_clock_is_ahead_replays_the_charge() {
    let instances = skewed_instances(61_000, &["--key-ttl", "60s"]).await;
    charge_then_retry_elsewhere(&instances, 0).await;
}

/// The other way round: a record written by an instance whose clock runs
/// 61 s behind is not born expired for the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a PostgreSQL server in TEST_POSTGRES_URL (scripts/test.sh provides one)"]
async fn a_record_written_by_an_instance_whose_clock_is_behind_is_replayed_elsewhere() {
    let instances = skewed_instances(-61_000, &["--key-ttl", "60s"]).await;
    charge_then_retry_elsewhere(&instances, 1).await;
}

/// A sweeper whose clock runs ahead deletes no record that is still live:
/// after a few of its rounds, the record is there and replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a PostgreSQL server in TEST_POSTGRES_URL (scripts/test.sh provides one)"]
async fn a_sweeper_whose_clock_is_ahead_deletes_no_live_record() {
    let instances = skewed_instances(61_000, &["--key-ttl", "60s", "--sweep-interval", "1s"]).await;
    let caller = instances[0].bearer(&testkit::new_token());
    let key = testkit::new_key();
    assert_eq!(charge(&caller, &key).await.status(), 201);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        instances[0]
            .database()
            .count("idempotency_keys")
            .await
            .unwrap(),
        1
    );
    let retry = charge(&caller, &key).await;
    assert_eq!(
        retry.headers()["idempotent-replayed"],
        "true",
        "the record was swept"
    );
}

/// The replay cache never outlives the record: an instance whose clock
/// runs a minute behind replays from memory while the record lives, and
/// once the database calls the record expired (`--key-ttl 3s`) the same
/// instance runs the key again rather than replaying its copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a PostgreSQL server in TEST_POSTGRES_URL (scripts/test.sh provides one)"]
async fn a_cached_replay_never_outlives_the_record_whatever_the_clock() {
    let instances = skewed_instances(-61_000, &["--key-ttl", "3s", "--sweep-interval", "1h"]).await;
    let behind = instances[1].bearer(&testkit::new_token());
    let key = testkit::new_key();
    assert_eq!(charge(&behind, &key).await.status(), 201);
    for _ in 0..3 {
        let replay = charge(&behind, &key).await;
        assert!(replay.headers().get("idempotent-replayed").is_some());
    }
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let after = charge(&behind, &key).await;
    assert_eq!(after.status(), 201);
    assert!(
        after.headers().get("idempotent-replayed").is_none(),
        "a copy of an expired record was replayed"
    );
    assert_eq!(behind.charges().await.unwrap().len(), 2);
}

/// Instances starting at the same moment on a fresh database migrate it
/// once (an advisory lock orders them): all serve, and each migration is
/// recorded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 6)]
#[ignore = "needs a PostgreSQL server in TEST_POSTGRES_URL (scripts/test.sh provides one)"]
async fn instances_starting_together_migrate_once() {
    for _ in 0..5 {
        let database = Database::postgres().await.unwrap();
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(4));
        let starts: Vec<_> = (0..4)
            .map(|_| {
                let (database, barrier) = (database.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    Server::builder().database(database).start().await
                })
            })
            .collect();
        let mut instances = Vec::new();
        for start in starts {
            instances.push(start.await.unwrap().expect("every instance starts"));
        }
        database
            .sql(
                "",
                "DO $$ BEGIN
                   IF (SELECT count(*) FROM schema_migrations) <> 3
                      OR (SELECT count(DISTINCT version) FROM schema_migrations) <> 3 THEN
                     RAISE EXCEPTION 'migrations recorded: %',
                       (SELECT string_agg(version::text, ',') FROM schema_migrations);
                   END IF;
                 END $$;",
            )
            .await
            .expect("each migration recorded once");
        for instance in &instances {
            let caller = instance.caller();
            let body = json!({"amount": 100, "currency": "usd"});
            let r = caller.charge(&body).await.unwrap();
            assert_eq!(r.status(), 201);
        }
    }
}

/// Two server processes on one fresh PostgreSQL database.
async fn two_instances() -> [Server; 2] {
    let database = Database::postgres().await.unwrap();
    let start = || Server::builder().database(database.clone()).start();
    [start().await.unwrap(), start().await.unwrap()]
}

/// Forty copies of one request, spread over two instances at once: one
/// charge, one first run, the same answer everywhere, no 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a PostgreSQL server in TEST_POSTGRES_URL (scripts/test.sh provides one)"]
async fn concurrent_duplicates_on_two_instances_run_once() {
    let instances = two_instances().await;
    let key = testkit::new_key();
    let token = testkit::new_token();
    let body = json!({"amount": 1500, "currency": "usd"});
    let copies = (0..40).map(|i| {
        instances[i % 2]
            .bearer(&token)
            .keyed("/charges", &key)
            .json(&body)
    });
    let answers = testkit::at_once(copies).await.unwrap();
    testkit::exactly_one_run(&answers).unwrap();
    for instance in &instances {
        let charges = instance.bearer(&token).charges().await.unwrap();
        assert_eq!(charges.len(), 1, "{charges:?}");
    }
}

/// Ten buyers on two instances race for three posters: three win, stock 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a PostgreSQL server in TEST_POSTGRES_URL (scripts/test.sh provides one)"]
async fn the_inventory_guard_holds_across_instances() {
    let instances = two_instances().await;
    let poster = json!({"item_id": "sku-poster", "quantity": 1});
    let buyers = (0..10).map(|i| {
        instances[i % 2]
            .caller()
            .keyed("/reservations", &testkit::new_key())
            .json(&poster)
    });
    let answers = testkit::at_once(buyers).await.unwrap();
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        3,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        7,
        "{statuses:?}"
    );
    assert_eq!(instances[1].available("sku-poster").await.unwrap(), 0);
}
