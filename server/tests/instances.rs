//! Many instances on one PostgreSQL database: a key is still one operation.
//!
//! Needs a PostgreSQL server: `scripts/test.sh` starts one and runs these
//! with `TEST_POSTGRES_URL=... cargo test -p server --test instances -- --include-ignored`.

mod common;

use common::spawn_server;
use serde_json::{json, Value};
use std::process::Child;
use std::sync::Arc;

struct Instance {
    child: Child,
    base: String,
}

impl Instance {
    fn start(database: &str) -> Self {
        let args = [
            "--listen",
            "127.0.0.1:0",
            "--www",
            "/nonexistent",
            "--database",
            database,
        ];
        let (child, base) = spawn_server(&args).expect("the server starts");
        Self { child, base }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn fresh_database() -> String {
    common::fresh_postgres()
        .await
        .expect("TEST_POSTGRES_URL names a PostgreSQL server")
}

/// Forty copies of one request, spread over two instances at once: one
/// charge, one first run, the same answer everywhere, no 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a PostgreSQL server in TEST_POSTGRES_URL (scripts/test.sh provides one)"]
async fn concurrent_duplicates_on_two_instances_run_once() {
    let database = fresh_database().await;
    let instances = [Instance::start(&database), Instance::start(&database)];
    let client = reqwest::Client::new();
    let key = uuid::Uuid::new_v4().to_string();
    let token = format!("instances-{}", uuid::Uuid::new_v4().simple());
    let barrier = Arc::new(tokio::sync::Barrier::new(40));
    let mut tasks = Vec::new();
    for i in 0..40 {
        let url = format!("{}/charges", instances[i % 2].base);
        let (client, key, token, barrier) =
            (client.clone(), key.clone(), token.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let r = client
                .post(url)
                .bearer_auth(token)
                .header("Idempotency-Key", key)
                .json(&json!({"amount": 1500, "currency": "usd"}))
                .send()
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
        assert_eq!(
            common::list_charges(&client, &instance.base, &token)
                .await
                .len(),
            1
        );
    }
}

/// Ten buyers on two instances race for three posters: three win, stock 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a PostgreSQL server in TEST_POSTGRES_URL (scripts/test.sh provides one)"]
async fn the_inventory_guard_holds_across_instances() {
    let database = fresh_database().await;
    let instances = [Instance::start(&database), Instance::start(&database)];
    let client = reqwest::Client::new();
    let barrier = Arc::new(tokio::sync::Barrier::new(10));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let url = format!("{}/reservations", instances[i % 2].base);
        let (client, barrier) = (client.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            client
                .post(url)
                .bearer_auth(format!("buyer-{}", uuid::Uuid::new_v4().simple()))
                .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
                .json(&json!({"item_id": "sku-poster", "quantity": 1}))
                .send()
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
    let stock: Value = client
        .get(format!("{}/inventory/sku-poster", instances[1].base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stock["available"], 0);
}
