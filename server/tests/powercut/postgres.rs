//! PostgreSQL through power cuts: its data folder on the forgetting file
//! system (`fsync=on`, the server's `--durability full` is
//! `synchronous_commit=on`); each cut drops every unsynced page, then
//! PostgreSQL (every process of it, as a machine losing power) and the
//! server are killed together, the file system remounted, PostgreSQL
//! started (crash recovery from what was synced) and the server with it.
//! Nothing answered may be lost.

use crate::knobs::knob;
use crate::sender::{self, Mode, Operation};
use crate::tally::Tally;
use crate::verdict;
use crate::Cuts;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::{Database, LazyFs, Postgres, Server};

use crate::IN_FLIGHT;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL installed (scripts/test.sh runs it with --include-ignored)"]
async fn power_cuts_under_postgres_lose_no_answered_operation_with_synchronous_commit() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let rounds: usize = knob("POWERCUT_ROUNDS", || 4);
    let seed: u64 = knob("CRASH_SEED", rand::random);
    println!("power-cut harness (postgres): CRASH_SEED={seed} POWERCUT_ROUNDS={rounds}");
    let fs = LazyFs::mount().unwrap();
    let cluster = Postgres::start_in(fs.path(), &["fsync=on"]).unwrap();
    let database = Database::postgres_on(&cluster.url()).await.unwrap();
    let server = Server::builder()
        .durability_full()
        .database(database)
        .start()
        .await
        .unwrap();
    let callers = crate::callers_of(&server, "powercut-pg", seed, Duration::from_secs(5));
    let tally = Arc::new(Tally::new(1));
    let cutting = Arc::new(AtomicBool::new(true));
    let started = Instant::now();
    let machine = (fs, cluster, server);
    let schedule = (rounds, 500..2000, seed);
    let cutter = Cuts::spawn(
        schedule,
        &tally,
        &cutting,
        machine,
        |(fs, cluster, server)| {
            let dropped = fs.cut();
            server.kill().expect("SIGKILL to the server");
            cluster.kill_machine().expect("SIGKILL to PostgreSQL");
            fs.remount().expect("remounting after the cut");
            cluster.restart().expect("PostgreSQL after a power cut");
            server.restart().expect("the server after a power cut");
            dropped
        },
    );

    let answers: sender::Answers = Arc::default();
    let operations = sender::while_running(
        &cutting,
        IN_FLIGHT,
        seed,
        |id, rng| Operation::charge(id, &callers, rng, false),
        |op, slot| {
            let senders = crate::SENDERS_PER_OPERATION;
            let mode = (Mode::Local, true);
            sender::spawn_senders(op, senders, seed, mode, &tally, &answers, slot)
        },
    )
    .await;
    let ((fs, cluster, server), Cuts { each, down_ms }) = cutter.await.unwrap();
    let answers = answers.lock().unwrap().clone();
    let observer: Vec<&testkit::Caller> = callers.iter().map(|c| &c[0]).collect();
    let report = verdict::judge(&operations, &answers, &observer, Mode::Local).await;
    let stats = fs.stats();
    println!(
        "power-cut harness (postgres): seed={seed} cuts={} (on requests in flight: {}) \
         operations={} attempts={} answered 201={} lost answers={} duplicates={} not exactly \
         one charge={} (in flight, pages dropped, files) per cut: {each:?} syncs={} pages \
         synced={} ms from cut to serving again: {down_ms:?} load {:.1}s\n\
         answers by status:\n{}",
        each.len(),
        each.iter().filter(|c| c.0 > 0).count(),
        operations.len(),
        tally.attempts(),
        report.answered,
        report.lost_answers,
        report.duplicates.len(),
        report.not_one.len(),
        stats.syncs,
        stats.pages_synced,
        started.elapsed().as_secs_f64(),
        tally.kinds.table()
    );
    tally.assert_nothing_forbidden();
    assert!(
        each.iter().all(|c| c.1 > 0),
        "a cut dropped nothing: PostgreSQL wrote nothing unsynced? {each:?}"
    );
    report.assert_nothing_answered_was_lost();
    drop(server);
    drop(cluster);
    drop(fs);
}
