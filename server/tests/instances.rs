//! Many instances on one PostgreSQL database: a key is still one operation.
//!
//! Needs a PostgreSQL server: `scripts/test.sh` starts one and runs these
//! with `TEST_POSTGRES_URL=... cargo test -p server --test instances -- --include-ignored`.

use serde_json::json;
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
