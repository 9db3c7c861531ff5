//! The shop on a Citus cluster (`scripts/citus.sh start DIR`, then
//! `TEST_CITUS_DIR=DIR`): its tables and the engine's placed by the
//! caller, every statement of a checkout a single-shard one (Citus's own
//! counters say so), instances connected to the workers serving beside
//! the coordinator's ([`workers`]), a stopped worker failing only the callers whose
//! shards live on it, with nothing lost when it returns; under load
//! ([`load`]), a worker added and taking shards
//! (`citus_rebalance_start()`), a worker killed and started again, and
//! ([`patroni`]) a worker's primary failed over to its standby by
//! Patroni, each with nothing lost; and ([`backup`]) every node recovered
//! from its backup to one restore point.

mod backup;
mod load;
mod patroni;
mod workers;

use load::{charge, Load};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use testkit::{new_key, Caller, Database, Server};

const NEEDS: &str = "needs a Citus cluster: scripts/citus.sh start DIR, then TEST_CITUS_DIR=DIR";

fn cluster() -> PathBuf {
    PathBuf::from(std::env::var("TEST_CITUS_DIR").expect(NEEDS))
}

fn coordinator_url() -> String {
    let url = std::fs::read_to_string(cluster().join("coordinator/url")).unwrap();
    url.trim().to_owned()
}

/// A fresh database on the cluster, with Citus's statement counters on
/// for every session of it.
async fn fresh_database() -> Database {
    let database = Database::postgres_on(&coordinator_url()).await.unwrap();
    let name = database.postgres_name().unwrap().to_owned();
    let admin = Database::postgres_url(coordinator_url());
    admin
        .sql(
            "",
            &format!("ALTER DATABASE {name} SET citus.enable_stat_counters = on"),
        )
        .await
        .unwrap();
    database
}

/// The shop with its background work (completer, sweeper) resting for the
/// length of a test, so what the counters see is the checkouts'.
async fn shop(database: &Database) -> Server {
    Server::builder()
        .database(database.clone())
        .flags(["--complete-interval", "1h", "--sweep-interval", "1h"])
        .start()
        .await
        .expect("the shop starts on the coordinator")
}

/// (single-shard, multi-shard) executions Citus counted in the database.
async fn counters(client: &tokio_postgres::Client) -> (i64, i64) {
    let row = client
        .query_one(
            "SELECT query_execution_single_shard, query_execution_multi_shard
             FROM citus_stat_counters WHERE name = current_database()",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
#[ignore = "needs a Citus cluster: scripts/citus.sh start DIR, then TEST_CITUS_DIR=DIR"]
async fn tables_are_placed_by_caller_and_every_checkout_statement_is_single_shard() {
    let database = fresh_database().await;
    let server = shop(&database).await;
    let client = database.postgres_client().await.unwrap();

    let placed: HashMap<String, (String, i32)> = client
        .query(
            "SELECT logicalrelid::text, partmethod::text, colocationid FROM pg_dist_partition",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), (row.get(1), row.get(2))))
        .collect();
    let records = placed.get("idempotency_keys").expect("records sharded");
    assert_eq!(records.0, "h", "records hash-sharded: {placed:?}");
    for table in ["charges", "reservations", "outbox", "operator_actions"] {
        assert_eq!(
            placed.get(table),
            Some(records),
            "{table} sharded by caller beside the records: {placed:?}"
        );
    }
    assert_eq!(
        placed.get("inventory").map(|p| p.0.as_str()),
        Some("n"),
        "the stock on every node: {placed:?}"
    );
    // The ledgers stay on the coordinator, in Citus's metadata, where an
    // instance connected to a worker reads them.
    for ledger in ["exactly_once_migrations", "schema_migrations"] {
        let local: bool = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM citus_tables
                                WHERE table_name = to_regclass($1) AND citus_table_type = 'local')",
                &[&ledger],
            )
            .await
            .unwrap()
            .get(0);
        assert!(local, "{ledger} a Citus local table: {placed:?}");
    }

    // The database's first charge and first reservation find Citus
    // checking, once, that the new tables' shards and the stock's copies
    // are on every node (four multi-shard executions, seen here): a
    // first checkout before the count.
    let first = server.caller();
    let paid = first.charge(&charge(0)).await.unwrap();
    assert_eq!(paid.status(), 201);
    let tee = json!({"item_id": "sku-tee", "quantity": 1});
    let reserved = first
        .post_keyed("/reservations", &new_key(), &tee)
        .await
        .unwrap();
    assert_eq!(reserved.status(), 201);
    // The server's own first rounds at start (the completer's listing: a
    // multi-shard SELECT without locks, by design) are let pass: the count
    // starts once the multi-shard counter has stood still for two seconds.
    let mut last = counters(&client).await.1;
    let mut still = 0;
    for _ in 0..30 {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let now = counters(&client).await.1;
        still = if now == last { still + 1 } else { 0 };
        last = now;
        if still == 2 {
            break;
        }
    }
    client
        .execute(
            "SELECT citus_stat_counters_reset(oid) FROM pg_database WHERE datname = current_database()",
            &[],
        )
        .await
        .unwrap();
    let callers: Vec<Caller> = (0..6).map(|_| server.caller()).collect();
    let mut answered = 0;
    for (n, caller) in callers.iter().enumerate() {
        let key = new_key();
        for _ in 0..2 {
            let paid = caller
                .post_keyed("/charges", &key, &charge(n as i64))
                .await
                .unwrap();
            assert_eq!(paid.status(), 201, "{}", paid.text().await.unwrap());
            answered += 1;
        }
        let reserved = caller
            .post_keyed("/reservations", &new_key(), &tee)
            .await
            .unwrap();
        assert_eq!(reserved.status(), 201, "{}", reserved.text().await.unwrap());
        answered += 1;
    }
    let (single, multi) = counters(&client).await;
    assert_eq!(
        multi, 0,
        "no statement of a checkout spans shards ({single} single-shard)"
    );
    assert!(
        single >= answered,
        "each of the {answered} answers ran single-shard statements: {single}"
    );
    assert_eq!(server.available("sku-tee").await.unwrap(), 93);
}

/// The worker (`workerN`) whose shard holds the caller that made `charge`.
async fn worker_of(client: &tokio_postgres::Client, charge: &str) -> String {
    let port: i32 = client
        .query_one(
            "SELECT s.nodeport FROM charges c JOIN citus_shards s
               ON s.shardid = get_shard_id_for_distribution_column('charges', c.caller)
             WHERE c.id = $1",
            &[&charge],
        )
        .await
        .unwrap()
        .get(0);
    for entry in std::fs::read_dir(cluster()).unwrap() {
        let dir = entry.unwrap().path();
        let url = std::fs::read_to_string(dir.join("url")).unwrap_or_default();
        if url.trim().contains(&format!(":{port}/")) {
            return dir.file_name().unwrap().to_string_lossy().into_owned();
        }
    }
    panic!("no node of the cluster listens on {port}");
}

fn citus_sh(action: &str, node: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/citus.sh");
    let status = Command::new(script)
        .args([action, cluster().to_str().unwrap(), node])
        .status()
        .unwrap();
    assert!(status.success(), "citus.sh {action} {node}");
}

/// A node down until this is dropped (the test's end, or its panic: the
/// next test needs the whole cluster).
struct Down(String);

impl Down {
    /// `node` stopped (`pg_ctl stop -m fast`).
    fn stopped(node: &str) -> Self {
        citus_sh("stop-node", node);
        Self(node.to_owned())
    }

    /// `node` killed: every process of it SIGKILLed at once.
    fn killed(node: &str) -> Self {
        citus_sh("kill-node", node);
        Self(node.to_owned())
    }
}

impl Drop for Down {
    fn drop(&mut self) {
        citus_sh("start-node", &self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Citus cluster: scripts/citus.sh start DIR, then TEST_CITUS_DIR=DIR"]
async fn a_stopped_worker_fails_only_its_callers_and_loses_nothing() {
    let database = fresh_database().await;
    let server = shop(&database).await;
    let client = database.postgres_client().await.unwrap();

    // Callers until both workers hold at least two.
    let mut by_worker: HashMap<String, Vec<Caller>> = HashMap::new();
    let mut keys: Vec<(Caller, String, i64)> = Vec::new();
    let mut n = 0;
    while by_worker.len() < 2 || by_worker.values().any(|callers| callers.len() < 2) {
        n += 1;
        assert!(
            n < 200,
            "callers never landed on two workers: {:?}",
            by_worker.keys()
        );
        let caller = server.caller();
        let key = new_key();
        let paid = caller
            .post_keyed("/charges", &key, &charge(n))
            .await
            .unwrap();
        assert_eq!(paid.status(), 201);
        let id = paid.json::<Value>().await.unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let worker = worker_of(&client, &id).await;
        keys.push((caller.clone(), key, n));
        by_worker.entry(worker).or_default().push(caller);
    }
    let mut workers: Vec<String> = by_worker.keys().cloned().collect();
    workers.sort();
    let (stopped, running) = (&workers[0], &workers[1]);

    let down = Down::stopped(stopped);
    let mut failed = Vec::new();
    for round in 0..3 {
        let mut sends = Vec::new();
        for (worker, callers) in &by_worker {
            for caller in callers {
                n += 1;
                let (caller, key, amount, worker) = (caller.clone(), new_key(), n, worker.clone());
                sends.push(tokio::spawn(async move {
                    let answer = caller
                        .post_keyed("/charges", &key, &charge(amount))
                        .await
                        .unwrap();
                    let status = answer.status().as_u16();
                    let retry_after = answer.headers().get("retry-after").is_some();
                    (worker, caller, key, amount, status, retry_after)
                }));
            }
        }
        for send in sends {
            let (worker, caller, key, amount, status, retry_after) = send.await.unwrap();
            if &worker == stopped {
                assert_eq!(
                    status, 503,
                    "round {round}: a caller on the stopped {worker}"
                );
                assert!(retry_after, "the 503 says when to retry");
                failed.push((caller.clone(), key.clone(), amount));
            } else {
                assert_eq!(
                    status, 201,
                    "round {round}: a caller on the running {running}"
                );
            }
            keys.push((caller, key, amount));
        }
    }
    drop(down);

    // Each refused key, retried once the worker is back, is charged; no key
    // is charged twice, and no charge that was answered is missing.
    for (caller, key, amount) in &failed {
        let mut status = 0;
        for _ in 0..50 {
            let answer = caller
                .post_keyed("/charges", key, &charge(*amount))
                .await
                .unwrap();
            status = answer.status().as_u16();
            if status == 201 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        assert_eq!(
            status, 201,
            "a refused key is charged once its worker is back"
        );
    }
    let mut per_caller: HashMap<String, usize> = HashMap::new();
    for (caller, _, _) in &keys {
        *per_caller.entry(caller.token().to_owned()).or_default() += 1;
    }
    for (token, expected) in per_caller {
        let charges = server.bearer(&token).charges().await.unwrap();
        assert_eq!(charges.len(), expected, "one charge per key, none lost");
    }
    assert_eq!(database.count("charges").await.unwrap(), keys.len() as i64);
}

/// A third worker joins under load and `citus_rebalance_start()` moves
/// shard groups onto it while eight callers keep paying, each key sent
/// until it is answered 201: some shards move there, every answer is a
/// 201 or a 409 or 503 with `Retry-After` (writes to a moving shard wait,
/// then give up), never a 500, and each key is charged exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Citus cluster: scripts/citus.sh start DIR, then TEST_CITUS_DIR=DIR"]
async fn a_worker_added_under_load_takes_shards_and_loses_nothing() {
    let database = fresh_database().await;
    let server = shop(&database).await;
    let client = database.postgres_client().await.unwrap();

    let load = Load::start(&server, 8);

    tokio::time::sleep(Duration::from_secs(1)).await;
    let worker = add_worker(&database).await;
    assert_eq!(
        shards_on(&client, worker).await,
        0,
        "a new worker holds no shard"
    );
    client
        .batch_execute("SELECT citus_rebalance_start(shard_transfer_mode => 'block_writes')")
        .await
        .unwrap();
    client
        .batch_execute("SELECT citus_rebalance_wait()")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let moved = shards_on(&client, worker).await;
    assert!(moved > 0, "the rebalance moved no shard to the new worker");
    let what = format!("rebalance ({moved} shards moved)");
    load.stop_and_judge(&server, &database, &what).await;
}

/// A worker killed under load (every process of its PostgreSQL SIGKILLed,
/// as when its machine loses power) and started again 1.5 s later, three
/// times, while
/// eight callers keep paying, each key until it is answered 201: every
/// key is charged exactly once, with the charge its 201 named (the
/// worker's crash recovery keeps every answered commit), and every other
/// answer was a 409 or 503 with `Retry-After`, never a 500. (A worker
/// lost during the coordinator's COMMIT was answered 500 "nothing was
/// done" before: the worker may have committed, so it is "outcome
/// unknown".)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Citus cluster: scripts/citus.sh start DIR, then TEST_CITUS_DIR=DIR"]
async fn a_worker_killed_under_load_loses_nothing_answered_and_charges_each_key_once() {
    let database = fresh_database().await;
    let server = shop(&database).await;
    let load = Load::start(&server, 8);
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let down = Down::killed("worker1");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        drop(down);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    load.stop_and_judge(&server, &database, "a worker killed")
        .await;
}

/// Starts one more worker (`scripts/citus.sh add-worker`: it joins the
/// cluster's first database, and the coordinator creates every database
/// on it) and registers it in `database`, with the extension there: its
/// port.
async fn add_worker(database: &Database) -> u16 {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/citus.sh");
    let added = Command::new(script)
        .args(["add-worker", cluster().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(added.status.success(), "citus.sh add-worker");
    let url = String::from_utf8(added.stdout).unwrap();
    let (base, _) = url.trim().rsplit_once('/').unwrap();
    let port: u16 = base.rsplit_once(':').unwrap().1.parse().unwrap();
    let name = database.postgres_name().unwrap();
    let worker = Database::postgres_url(format!("{base}/{name}"));
    worker
        .sql("", "CREATE EXTENSION IF NOT EXISTS citus")
        .await
        .unwrap();
    let client = database.postgres_client().await.unwrap();
    client
        .execute(
            "SELECT citus_add_node('127.0.0.1', $1)",
            &[&i32::from(port)],
        )
        .await
        .unwrap();
    port
}

/// How many shards of the database live on the worker at `port`.
async fn shards_on(client: &tokio_postgres::Client, port: u16) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM citus_shards WHERE nodeport = $1",
            &[&i32::from(port)],
        )
        .await
        .unwrap()
        .get(0)
}
