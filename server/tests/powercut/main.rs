//! Power cuts: exactly once past the page cache.
//!
//! Every kill of the crash harness leaves the operating system's page
//! cache alone, so it cannot tell an answer sent after `fsync` from one
//! sent before. Here the database lives on [`testkit::LazyFs`], which
//! keeps written data in memory until the file is fsynced and drops it
//! on a cut. The crash harness's senders (two per operation, same key
//! and body, retrying on errors, 409 and 5xx; every answer judged by its
//! status table) keep operations coming while a cutter, at random
//! moments, cuts the power (every unsynced page dropped, the disk gone),
//! SIGKILLs the server, remounts and starts it again on the same file.
//!
//! Afterwards every operation whose 201 a sender received must still
//! have that charge (same id), every sender of an operation got the same
//! answer, a last retry replays it byte for byte, and every operation
//! ends with exactly one charge. With `--durability full` none may be
//! lost; with `--durability relaxed` (`synchronous=NORMAL`: commits
//! reach the WAL, not the disk) the same harness must find answered work
//! lost, or it could not catch a server that answers too early.
//!
//! `POWERCUT_ROUNDS` (default 6) sets the cuts per run, `CRASH_SEED`
//! replays a schedule. Needs root and `/dev/fuse`. The PostgreSQL runs
//! ([`postgres`]) need PostgreSQL installed and are `#[ignore]`d;
//! `scripts/test.sh` runs them in its PostgreSQL step.

#[path = "../crash/harness.rs"]
mod harness;
use harness::{charges, knobs, provider, sender, stock, tally};
use harness::{CALLERS, IN_FLIGHT, ONE_AT_A_TIME, SENDERS_PER_OPERATION};

mod fsync;
mod postgres;
mod verdict;

use knobs::{knob, Seed};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sender::{Draw, Mode, Operation};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tally::Tally;
use testkit::{Database, LazyFs, MailDev, Psp, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn power_cuts_lose_no_answered_operation_with_full_durability() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let report = run(Durability::Full, Mode::Local).await;
    report.assert_nothing_answered_was_lost();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn power_cuts_find_answered_operations_lost_with_relaxed_durability() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let report = run(Durability::Relaxed, Mode::Local).await;
    report.assert_sound_but_lost_answers();
}

/// Through the provider simulator (its ledger on another machine's disk,
/// as a real provider's is) and MailDev: after the cuts no provider
/// charge is forgotten (each is named by exactly one succeeded charge)
/// and every receipt owed arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn power_cuts_forget_no_provider_charge_and_no_owed_receipt() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let report = run(Durability::Full, Mode::Provider).await;
    report.assert_nothing_answered_was_lost();
}

/// `--durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    Full,
    Relaxed,
}

/// What the cutter did.
#[derive(Debug, Default)]
pub(crate) struct Cuts {
    /// For each cut: requests in flight, pages dropped, files that lost some.
    pub(crate) each: Vec<(usize, u64, u64)>,
    /// Milliseconds from each cut until the server listened again.
    pub(crate) down_ms: Vec<u128>,
}

impl Cuts {
    /// `rounds` power cuts, each after a pause drawn from `pause_ms` (from
    /// `seed`): `cut()` cuts the power and brings everything back, giving
    /// the pages and files it dropped. Then `cutting` is cleared, which
    /// stops the senders.
    pub(crate) fn run(
        rounds: usize,
        pause_ms: std::ops::Range<u64>,
        seed: u64,
        tally: &Tally,
        cutting: &AtomicBool,
        mut cut: impl FnMut() -> (u64, u64),
    ) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut cuts = Self::default();
        for _ in 0..rounds {
            std::thread::sleep(Duration::from_millis(rng.random_range(pause_ms.clone())));
            let in_flight = tally.in_flight(0);
            let began = Instant::now();
            let (pages, files) = cut();
            cuts.down_ms.push(began.elapsed().as_millis());
            cuts.each.push((in_flight, pages, files));
        }
        cutting.store(false, Ordering::Release);
        cuts
    }

    /// [`run`](Self::run) on a thread of its own, cutting the power of
    /// `machine` (the file system and what runs on it, handed back with
    /// the cuts) with `cut`.
    pub(crate) fn spawn<M: Send + 'static>(
        (rounds, pause_ms, seed): (usize, std::ops::Range<u64>, u64),
        tally: &Arc<Tally>,
        cutting: &Arc<AtomicBool>,
        mut machine: M,
        mut cut: impl FnMut(&mut M) -> (u64, u64) + Send + 'static,
    ) -> tokio::task::JoinHandle<(M, Self)> {
        let (tally, cutting) = (tally.clone(), cutting.clone());
        tokio::task::spawn_blocking(move || {
            let cuts = Self::run(rounds, pause_ms, seed, &tally, &cutting, || {
                cut(&mut machine)
            });
            (machine, cuts)
        })
    }

    /// How many cuts found a request in flight.
    pub(crate) fn landed(&self) -> usize {
        self.each.iter().filter(|c| c.0 > 0).count()
    }
}

/// The harness's callers of the one `server` (see [`sender::callers`]).
pub(crate) fn callers_of(
    server: &Server,
    prefix: &str,
    seed: u64,
    timeout: Duration,
) -> Vec<Vec<testkit::Caller>> {
    sender::callers(prefix, seed, CALLERS, timeout, |token, http| {
        vec![server.bearer(token).with_http(http.clone())]
    })
}

/// What lives beside the server in provider mode, on disks no cut reaches.
struct Outside {
    psp: Psp,
    maildev: MailDev,
}

async fn run(durability: Durability, mode: Mode) -> verdict::Report {
    let rounds: usize = knob("POWERCUT_ROUNDS", || match mode {
        Mode::Local => 6,
        Mode::Provider => 4,
    });
    let report_seed = Seed::from_env();
    let seed = report_seed.0;
    println!(
        "power-cut harness (sqlite, {durability:?}, {mode:?}): CRASH_SEED={seed} \
         POWERCUT_ROUNDS={rounds}"
    );

    let fs = LazyFs::mount().unwrap();
    let database = Database::sqlite_at(fs.path().join("data").join("shop.db"));
    let mut builder = Server::builder().database(database);
    if durability == Durability::Full {
        builder = builder.durability_full();
    }
    let outside = match mode {
        Mode::Local => None,
        Mode::Provider => Some(Outside {
            psp: Psp::with_latency(Duration::from_millis(20)).unwrap(),
            maildev: MailDev::start().await.unwrap(),
        }),
    };
    if let Some(outside) = &outside {
        builder = builder.psp(&outside.psp).smtp(&outside.maildev).flags([
            "--operation-lease",
            "2s",
            "--complete-interval",
            "1s",
        ]);
    }
    let server = builder.start().await.unwrap();
    let timeout = match mode {
        Mode::Local => 2,
        Mode::Provider => 5,
    };
    let callers = callers_of(&server, "powercut", seed, Duration::from_secs(timeout));
    let tally = Arc::new(Tally::new(1));
    let cutting = Arc::new(AtomicBool::new(true));
    let started = Instant::now();

    let schedule = (rounds, 300..1500, seed);
    let cutter = Cuts::spawn(schedule, &tally, &cutting, (fs, server), |(fs, server)| {
        // The power goes: the disk first (nothing more becomes durable),
        // then every process.
        let dropped = fs.cut();
        server.kill().expect("SIGKILL");
        fs.remount().expect("remounting after the cut");
        server.restart().expect("a restart after a power cut");
        dropped
    });

    let answers: sender::Answers = Arc::default();
    let draw = Draw {
        provider: mode == Mode::Provider,
        reservations: false,
        abandon: 0.0,
    };
    let operations = sender::while_running(
        &cutting,
        IN_FLIGHT,
        seed,
        |id, rng| Operation::drawn(id, &callers, rng, draw),
        |op, slot| {
            let mode = (mode, false);
            sender::spawn_senders(
                op,
                SENDERS_PER_OPERATION,
                seed,
                mode,
                &tally,
                &answers,
                slot,
            )
        },
    )
    .await;
    let ((fs, server), cuts) = cutter.await.unwrap();
    let senders_done = started.elapsed();

    let answers = answers.lock().unwrap().clone();
    let observer: Vec<&testkit::Caller> = callers.iter().map(|c| &c[0]).collect();
    if mode == Mode::Provider {
        // The completer finishes what the cuts interrupted.
        charges::settled(&observer, Duration::from_secs(60)).await;
    }
    let report = verdict::judge(&operations, &answers, &observer, mode).await;
    let (ledger, receipts) = match &outside {
        Some(outside) => {
            let charges = verdict::charges(&observer).await;
            let all: Vec<&serde_json::Value> = charges.values().flatten().collect();
            (
                provider::check_ledger(&outside.psp, &all).await,
                provider::check_receipts(&outside.maildev, &all, cuts.each.len()).await,
            )
        }
        None => (0, (0, 0, 0)),
    };
    let stats = fs.stats();
    println!(
        "power-cut harness (sqlite, {durability:?}, {mode:?}): seed={seed} cuts={} (on \
         requests in flight: {}) operations={} attempts={} answered 201={} lost answers={} \
         (operations: {}) duplicates={} after final retries: not exactly one charge={} \
         provider ledger={ledger} receipts (owed, received, duplicates)={receipts:?} \
         pages dropped per cut (in flight, pages, files): {:?} syncs={} pages synced={} \
         ms from cut to listening again: {:?} senders done in {:.1}s\n\
         answers by status:\n{}",
        cuts.each.len(),
        cuts.landed(),
        operations.len(),
        tally.attempts(),
        report.answered,
        report.lost_answers,
        report.lost.len(),
        report.duplicates.len(),
        report.not_one.len(),
        cuts.each,
        stats.syncs,
        stats.pages_synced,
        cuts.down_ms,
        senders_done.as_secs_f64(),
        tally.kinds.table()
    );
    tally.assert_nothing_forbidden();
    assert_eq!(cuts.each.len(), rounds);
    let landed = cuts.landed();
    assert!(
        landed * 2 >= cuts.each.len(),
        "only {landed} of {} cuts found a request in flight",
        cuts.each.len()
    );
    drop(server);
    drop(fs);
    std::mem::forget(report_seed);
    report
}
