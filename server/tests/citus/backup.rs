//! Backups per node and a recovery of the whole cluster to one restore
//! point, as docs/OPERATIONS.md ("Citus", backups) tells the operator: a
//! base backup of the coordinator and of each worker, their WAL archived,
//! `citus_create_restore_point()` on the coordinator, then every node
//! recovered to that name. The cluster comes back as it was at that point
//! on every node at once: the charges answered before it are there, on
//! whichever worker holds their caller, those after it are gone, and their
//! keys run once when retried.

use crate::load::charge;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use testkit::{new_key, Caller, Citus, Database, Postgres};

const RESTORE_POINT: &str = "before_the_last_charges";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Citus installed (scripts/citus.sh install)"]
async fn every_node_recovered_to_one_restore_point_keeps_the_charges_made_before_it() {
    let citus = Citus::start_archiving(2).await.unwrap();
    let nodes: Vec<&Postgres> = std::iter::once(&citus.coordinator)
        .chain(&citus.workers)
        .map(|node| &**node)
        .collect();
    let database = Database::postgres_on(&citus.coordinator.url())
        .await
        .unwrap();
    let server = crate::shop(&database).await;
    let callers: Vec<Caller> = (0..6).map(|_| server.caller()).collect();

    let before_backup = pay(&callers, 0).await;
    let backups: Vec<_> = (nodes.iter())
        .map(|node| node.base_backup().unwrap())
        .collect();
    let before_point = pay(&callers, 10).await;
    let client = database.postgres_client().await.unwrap();
    client
        .execute("SELECT citus_create_restore_point($1)", &[&RESTORE_POINT])
        .await
        .unwrap();
    for node in &nodes {
        archive_now(node).await;
    }
    let after_point = pay(&callers, 20).await;
    drop(client);
    drop(server);

    for (node, backup) in nodes.iter().zip(&backups) {
        node.recover_to(backup, RESTORE_POINT).unwrap();
    }
    for node in &nodes {
        until_promoted(node).await;
    }
    let server = crate::shop(&database).await;
    let callers: Vec<Caller> = (callers.iter())
        .map(|caller| server.bearer(caller.token()))
        .collect();
    let kept: BTreeSet<String> = before_backup.iter().chain(&before_point).cloned().collect();
    assert_eq!(
        charge_ids(&callers).await,
        kept,
        "after the recovery, the charges are those answered before the restore point"
    );
    // The last charges are unknown again: sent again (their keys are new
    // to the cluster, as any key it never saw), each is charged once.
    let again = pay(&callers, 20).await;
    assert!(
        again.is_disjoint(&after_point),
        "a charge after the point came back"
    );
    assert_eq!(charge_ids(&callers).await.len(), kept.len() + again.len());
    println!(
        "recovered every node to {RESTORE_POINT}: {} charges kept, {} after it forgotten and \
         charged again on retry",
        kept.len(),
        after_point.len()
    );
}

/// Two charges from each caller, keys new; the charge ids answered.
async fn pay(callers: &[Caller], from: i64) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for (c, caller) in (0i64..).zip(callers) {
        for n in 0..2 {
            let key = new_key();
            ids.insert(charged(caller, &key, from + c * 100 + n).await);
        }
    }
    ids
}

/// Charge `n` under `key`: the id its 201 names.
async fn charged(caller: &Caller, key: &str, n: i64) -> String {
    let answer = caller
        .post_keyed("/charges", key, &charge(n))
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    let body: serde_json::Value = answer.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// Every caller's charge ids.
async fn charge_ids(callers: &[Caller]) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for caller in callers {
        for charge in caller.charges().await.unwrap() {
            ids.insert(charge["id"].as_str().unwrap().to_owned());
        }
    }
    ids
}

/// Ends the node's WAL segment (`pg_switch_wal()`) and waits until the
/// archive has it: the restore point just written is then in the archive.
async fn archive_now(node: &Postgres) {
    let client = connect(node).await;
    let segment: String = client
        .query_one("SELECT pg_walfile_name(pg_switch_wal())", &[])
        .await
        .unwrap()
        .get(0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let archived: Option<String> = client
            .query_one("SELECT last_archived_wal FROM pg_stat_archiver", &[])
            .await
            .unwrap()
            .get(0);
        if archived.is_some_and(|archived| archived >= segment) {
            return;
        }
        assert!(Instant::now() < deadline, "{segment} never archived");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the node has replayed up to the restore point and
/// promoted itself (`pg_is_in_recovery()` false).
async fn until_promoted(node: &Postgres) {
    let client = connect(node).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let recovering: bool = client
            .query_one("SELECT pg_is_in_recovery()", &[])
            .await
            .unwrap()
            .get(0);
        if !recovering {
            return;
        }
        assert!(Instant::now() < deadline, "still recovering after 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A client on the node's first database.
async fn connect(node: &Postgres) -> tokio_postgres::Client {
    Database::postgres_url(node.url())
        .postgres_client()
        .await
        .unwrap()
}
