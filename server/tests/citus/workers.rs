//! Instances connected to the workers, past the coordinator. Citus runs a
//! caller's statements from any node once the node has the metadata, and
//! the engine keeps its ledgers, outbox and audit rows in that metadata
//! (Citus local tables on the coordinator), so an instance on a worker
//! starts on the schema the coordinator's instances migrated and serves
//! beside them: each key charged once, whichever instances it reaches,
//! and each charge's receipt sent once by the relays of all three.

use super::{cluster, fresh_database};
use crate::load::charge;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use testkit::{new_key, Caller, Database, MailDev, Server, ServerBuilder};

/// `database` reached through `node` of the cluster (`worker1`, …).
fn through(node: &str, database: &Database) -> Database {
    let url = std::fs::read_to_string(cluster().join(node).join("url")).unwrap();
    let (server, _) = url.trim().rsplit_once('/').unwrap();
    let name = database.postgres_name().unwrap();
    Database::postgres_url(format!("{server}/{name}"))
}

/// The shop on `database` through `node`, its receipts sent to `maildev`.
fn instance(node: &str, database: &Database, maildev: &MailDev) -> ServerBuilder {
    let database = match node {
        "coordinator" => database.clone(),
        worker => through(worker, database),
    };
    Server::builder().database(database).smtp(maildev)
}

/// Sends `key` to every instance at once, then again to each that did
/// not answer 201 until it does: the charge each 201 named.
async fn everywhere(instances: &[Caller], key: &str, body: &Value) -> Vec<String> {
    let mut charged = Vec::new();
    let sent: Vec<_> = instances
        .iter()
        .map(|caller| {
            let (caller, key, body) = (caller.clone(), key.to_owned(), body.clone());
            tokio::spawn(async move {
                for _ in 0..50 {
                    let answer = caller.post_keyed("/charges", &key, &body).await.unwrap();
                    let status = answer.status().as_u16();
                    let text = answer.text().await.unwrap();
                    match status {
                        201 => return serde_json::from_str::<Value>(&text).unwrap(),
                        409 | 503 => tokio::time::sleep(Duration::from_millis(100)).await,
                        _ => panic!("{} answered {status}: {text}", caller.url("")),
                    }
                }
                panic!("{} never answered 201", caller.url(""));
            })
        })
        .collect();
    for paid in sent {
        let paid = paid.await.unwrap();
        charged.push(paid["id"].as_str().unwrap().to_owned());
    }
    charged
}

#[tokio::test]
#[ignore = "needs a Citus cluster: scripts/citus.sh start DIR, then TEST_CITUS_DIR=DIR"]
async fn instances_on_the_workers_charge_each_key_once_beside_the_coordinators() {
    let database = fresh_database().await;
    let maildev = MailDev::start().await.unwrap();
    // Before the coordinator's instance migrated, a worker's instance
    // does not start: DDL runs on the coordinator only.
    let early = instance("worker1", &database, &maildev).start().await;
    let Err(refused) = early else {
        panic!("an instance started on a worker before any migration");
    };
    let refused = format!("{refused:#}");
    assert!(refused.contains("migrat"), "says why: {refused}");

    let mut servers = Vec::new();
    for node in ["coordinator", "worker1", "worker2"] {
        let server = instance(node, &database, &maildev).start().await;
        servers.push(server.unwrap_or_else(|e| panic!("an instance on {node} starts: {e:#}")));
    }

    let mut named = HashMap::new();
    for c in 0..12 {
        let token = testkit::new_token();
        let callers: Vec<Caller> = servers.iter().map(|s| s.bearer(&token)).collect();
        for k in 0..3 {
            let (key, body) = (new_key(), charge(c * 3 + k));
            let ids: HashSet<String> = everywhere(&callers, &key, &body)
                .await
                .into_iter()
                .collect();
            assert_eq!(
                ids.len(),
                1,
                "one charge for key {key} on three instances: {ids:?}"
            );
            named.insert(ids.into_iter().next().unwrap(), key.clone());
            // The same key with another request, on a worker's instance.
            let other = callers[1 + (k as usize % 2)]
                .post_keyed("/charges", &key, &charge(1_000))
                .await
                .unwrap();
            assert_eq!(other.status(), 422, "{}", other.text().await.unwrap());
        }
    }

    let client = database.postgres_client().await.unwrap();
    let stored: HashSet<String> = client
        .query("SELECT id FROM charges", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let answered: HashSet<String> = named.keys().cloned().collect();
    assert_eq!(stored, answered, "every key charged once, as its 201s said");
    // Each charge's receipt written once, by whichever instance ran the
    // charge, and sent once by the three instances' relays.
    let outbox: Vec<(i64, String)> = client
        .query("SELECT id, message_id FROM outbox", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(outbox.len(), 36, "a receipt a charge: {outbox:?}");
    assert!(
        outbox.iter().any(|(id, _)| *id >= 1 << 48),
        "the workers' instances wrote receipts (ids from a worker's range): {outbox:?}"
    );
    let sent = maildev
        .wait_for(Duration::from_secs(30), "36 receipts", |emails| {
            emails.len() >= 36
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = maildev.emails().await.unwrap_or(sent);
    let ids: HashSet<&str> = sent.iter().map(|e| e.message_id.as_str()).collect();
    assert_eq!(
        (sent.len(), ids.len()),
        (36, 36),
        "each receipt sent once: {ids:?}"
    );
}
