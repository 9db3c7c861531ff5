//! Many instances on one PostgreSQL database: a key is still one operation.
//!
//! Needs a PostgreSQL server: `scripts/test.sh` starts one and runs these
//! with `TEST_POSTGRES_URL=... cargo test -p server --test instances -- --include-ignored`.

use serde_json::json;
use std::sync::Arc;
use testkit::{Database, Server};

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
    let barrier = Arc::new(tokio::sync::Barrier::new(40));
    let mut tasks = Vec::new();
    for i in 0..40 {
        let caller = instances[i % 2].bearer(&token);
        let (key, barrier) = (key.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let r = caller
                .post_keyed(
                    "/charges",
                    &key,
                    &json!({"amount": 1500, "currency": "usd"}),
                )
                .await
                .unwrap();
            let replayed = r.headers().contains_key("idempotent-replayed");
            (r.status().as_u16(), replayed, r.bytes().await.unwrap())
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    assert!(
        answers.iter().all(|(s, _, _)| *s == 201),
        "{:?}",
        answers.iter().map(|a| a.0).collect::<Vec<_>>()
    );
    assert_eq!(
        answers.iter().filter(|(_, replayed, _)| !replayed).count(),
        1
    );
    assert!(answers.iter().all(|(_, _, body)| *body == answers[0].2));
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
    let barrier = Arc::new(tokio::sync::Barrier::new(10));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let buyer = instances[i % 2].caller();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            buyer
                .post_keyed(
                    "/reservations",
                    &testkit::new_key(),
                    &json!({"item_id": "sku-poster", "quantity": 1}),
                )
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap());
    }
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
