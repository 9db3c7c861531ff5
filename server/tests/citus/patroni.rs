//! A worker's primary failed over to its standby by Patroni's Citus
//! support (Debian's `patroni`, its `citus:` section): etcd, a
//! coordinator, a worker group of a primary and a synchronous standby,
//! and a worker group of one, all in one Patroni scope. The shop runs on
//! the coordinator's `citus` database under load; the first worker
//! group's primary machine dies (SIGKILL to Patroni, then to
//! PostgreSQL); Patroni promotes the standby once the leader key expires
//! and the coordinator's Patroni points `pg_dist_node` at it. Judged as
//! the other changes under load: every key charged once with the charge
//! its 201 named, every other answer a 409 or a 503 with `Retry-After`.

use crate::load::Load;
use std::time::{Duration, Instant};
use testkit::{Database, Patroni};

/// How long after the kill the coordinator may still point at the dead
/// primary: Patroni's leader key `ttl`, then its loop, then the update.
const FAILED_OVER_WITHIN: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Citus, Patroni and etcd installed (scripts/citus.sh install, scripts/patroni.sh)"]
async fn a_workers_primary_failed_over_by_patroni_loses_nothing_answered() {
    let mut patroni = Patroni::start_citus(&[1, 2, 1]).await.unwrap();
    let coordinator = patroni.leader_of(0).await.unwrap();
    let database = Database::postgres_url(patroni.citus_url(coordinator));
    let server = crate::shop(&database).await;
    let load = Load::start(&server, 8);
    tokio::time::sleep(Duration::from_secs(3)).await;

    let primary = patroni.leader_of(1).await.unwrap();
    patroni.kill_machine(primary).unwrap();
    let killed = Instant::now();
    let standby = loop {
        match patroni.leader_of(1).await {
            Some(leader) if leader != primary => break leader,
            _ => assert!(
                killed.elapsed() <= FAILED_OVER_WITHIN,
                "no new leader of the worker group {FAILED_OVER_WITHIN:?} after the kill\n{}",
                patroni.logs()
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    patroni.wait_until_registered().await.unwrap();
    let took = killed.elapsed();
    println!(
        "a worker's primary (port {}) killed; its standby (port {}) registered after {} ms",
        patroni.port(primary),
        patroni.port(standby),
        took.as_millis()
    );
    assert!(
        took <= FAILED_OVER_WITHIN,
        "the standby was registered {took:?} after the kill"
    );
    // The new primary takes checkouts for a while before the verdict.
    tokio::time::sleep(Duration::from_secs(3)).await;
    load.stop_and_judge(
        &server,
        &database,
        "a worker's primary failed over by Patroni",
    )
    .await;
}
