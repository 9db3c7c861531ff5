//! A Patroni failover under load: etcd and two Patroni nodes (Debian's
//! packages, `synchronous_mode: true`), two server instances given both
//! nodes in one URL, charges through the provider simulator. The
//! leader's machine dies (SIGKILL to Patroni's process group, then to the
//! postmaster's); Patroni promotes the synchronous standby once the
//! leader key expires (its `ttl`). Judged: nothing answered is lost, one
//! charge and one provider charge per operation, and 201s come again
//! within `ttl` + 5 s of the kill. Then a new machine replaces the dead
//! one (Patroni clones the leader) and, with `PATRONI_ROUNDS` above 1,
//! the new leader dies in turn.

use crate::load;
use crate::ONE_AT_A_TIME;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::{Database, Patroni, Psp};

/// Load before each kill; after the first 201 from the new leader.
const BEFORE: Duration = Duration::from_secs(3);
const AFTER: Duration = Duration::from_secs(3);
/// 201s again within Patroni's ttl and this.
const SLACK: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Patroni, etcd and PostgreSQL installed (scripts/test.sh runs it with --include-ignored)"]
async fn a_patroni_failover_loses_no_answered_operation_and_charges_once() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let seed: u64 = crate::knobs::knob("FAILOVER_SEED", rand::random);
    let rounds: usize = crate::knobs::knob("PATRONI_ROUNDS", || 2);
    let mut patroni = Patroni::start(2).await.unwrap();
    let leader = patroni.leader_now().await.expect("a leader");
    let made = Database::postgres_on(&patroni.url(leader)).await.unwrap();
    let url = format!(
        "postgres://postgres@{}/{}?target_session_attrs=read-write",
        patroni.addrs().join(","),
        made.postgres_name().unwrap()
    );
    let database = Database::postgres_url(url);
    let psp = Arc::new(Psp::with_latency(Duration::from_millis(20)).unwrap());
    let servers = crate::two_instances(&database, &psp).await;
    let bound = testkit::patroni::TTL + SLACK;
    let mut again = Vec::new();
    let mut operations = 0;
    for round in 0..rounds {
        let token = format!("patroni-{round}-{seed:016x}");
        let callers: Vec<testkit::Caller> = servers.iter().map(|s| s.bearer(&token)).collect();
        let sending = Arc::new(AtomicBool::new(true));
        let began = Instant::now();
        let leader = patroni.leader_now().await.expect("a leader");
        let (killed, load) = {
            let sending = sending.clone();
            let killer = async {
                tokio::time::sleep(BEFORE).await;
                patroni.kill_machine(leader).unwrap();
                began.elapsed()
            };
            // The load stops once the new leader answered for a while.
            let load = async {
                let stop = async {
                    loop {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        if began.elapsed() > BEFORE + bound + AFTER {
                            break;
                        }
                    }
                    sending.store(false, Ordering::Release);
                };
                let (load, ()) = tokio::join!(
                    load::run(&callers, seed ^ round as u64, &sending, began),
                    stop
                );
                load
            };
            tokio::join!(killer, load)
        };
        let verdict = load.judge(&callers[0], &psp).await;
        let first = load
            .attempts
            .iter()
            .filter(|a| a.sent >= killed && a.status == Some(201))
            .map(|a| a.answered() - killed)
            .min();
        let longest = load.longest();
        println!(
            "patroni round {round}: seed={seed} operations={} attempts={} leader node{} killed at \
             {:.1}s; 201s again {:?} ms after the kill (bound {} ms); longest wait {} ms; answers: \
             {:?}; lost answers={} duplicates={} ledger rows so far={} charged twice={}",
            load.operations.len(),
            load.attempts.len(),
            leader + 1,
            killed.as_secs_f64(),
            first.map(|d| d.as_millis()),
            bound.as_millis(),
            longest.waited.as_millis(),
            load.kinds(),
            verdict.report.lost_answers,
            verdict.report.duplicates.len(),
            verdict.ledger.rows,
            verdict.ledger.charged_twice,
        );
        operations += load.operations.len();
        verdict.assert_exactly_once(operations);
        let first = first.expect("no 201 after the kill");
        assert!(
            first <= bound,
            "201s again {first:?} after the kill (bound {bound:?})"
        );
        again.push(first);
        // A new machine in the dead one's place, for the next round.
        if round + 1 < rounds {
            patroni.replace(leader).await.unwrap();
        }
    }
    println!(
        "patroni: {rounds} rounds, 201s again {:?} ms after each kill",
        again.iter().map(Duration::as_millis).collect::<Vec<_>>()
    );
}
