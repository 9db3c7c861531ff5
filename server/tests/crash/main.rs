//! Crash and duplicate harness: exactly once, whatever breaks.
//!
//! Logical operations are each sent by two concurrent senders with the same
//! key and body (the retrying client of the seed article: same key on every
//! retry; retry on timeouts, connection errors, 409 and 5xx), while a killer
//! sends SIGKILL to the server at random moments and restarts it on the same
//! address and database. Some attempts carry `X-Chaos` values too (drop,
//! delay, crash before commit, exit after commit). At the end every
//! operation has exactly one charge, none is lost or unfinished, and its
//! stored replay equals every answer any sender got.
//!
//! **Provider mode** runs the same through the payment provider simulator
//! (`--latency 20ms`) and MailDev, with `--operation-lease 2s
//! --complete-interval 1s`: some cards decline, some charges want a
//! receipt, the chaos values include `exit-before-provider` and
//! `exit-after-provider`, a fault thrower makes the provider fail, drop
//! its answers, stall or go down now and then, and some operations are
//! abandoned (sent once with an `exit-…-provider`, never retried) for the
//! completer to finish. Afterwards, once `GET /charges` shows nothing
//! pending: the provider's ledger holds exactly one charge per succeeded
//! operation and none for a declined one, `/charges` one charge per
//! operation with the provider's id, and MailDev at least one receipt per
//! succeeded charge with a `receipt_email`, duplicates counted and printed.
//! On SQLite with one server; on PostgreSQL with two servers on the one
//! database, senders spread over both and kills of either.
//!
//! Retrying is not hiding: every answer is counted by status (and problem
//! type) and printed as a table, and the ones the contract rules out fail
//! the run:
//!
//! | answer | local mode | provider mode |
//! |---|---|---|
//! | 201 | final | final for a paying card; ruled out for a declining one |
//! | 402 `card-declined` | never | final for a declining card; ruled out for a paying one |
//! | 409 `idempotency-key-in-use` with `Retry-After` | PostgreSQL only (SQLite waits instead) | allowed: another request holds the operation's lease |
//! | 409 otherwise | ruled out | ruled out |
//! | 503 `unavailable` with `Retry-After` | allowed | allowed |
//! | 503 `provider-unavailable` with `Retry-After` | never | allowed |
//! | any other 5xx, 503 without `Retry-After` | ruled out ("database is locked" included) | ruled out |
//!
//! And the kills must land on requests in flight: the senders count the
//! requests they have out to each instance, the killer records that count
//! at each kill, and at least half the kills must find one or more.
//!
//! `CRASH_KILLS` (default 100, 50 in provider mode) sets how many kills;
//! `CRASH_SEED` replays a schedule (the seed is printed, and repeated on
//! failure).

mod checks;
mod fleet;
mod provider;
mod sender;
mod tally;

use fleet::Fleet;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sender::{Context, Mode, Operation};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tally::Tally;
use testkit::{Database, MailDev, Psp, Server};

const CALLERS: usize = 4;
const IN_FLIGHT: usize = 16;
const SENDERS_PER_OPERATION: usize = 2;

/// Each harness loads the whole machine: they run one after the other.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_operation_charges_exactly_once_through_kills_and_duplicates() {
    let _alone = ONE_AT_A_TIME.lock().await;
    run(Mode::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn through_the_provider_every_operation_charges_the_card_once_and_owes_one_receipt() {
    let _alone = ONE_AT_A_TIME.lock().await;
    run(Mode::Provider).await;
}

/// What lives beside the servers in provider mode.
struct Outside {
    psp: Arc<Psp>,
    maildev: MailDev,
}

/// The servers of `mode` on `database`: one, or two on PostgreSQL in
/// provider mode.
async fn start(mode: Mode, database: &Database, outside: Option<&Outside>) -> Fleet {
    let instances = match (mode, database.is_postgres()) {
        (Mode::Provider, true) => 2,
        _ => 1,
    };
    let mut servers = Vec::new();
    for _ in 0..instances {
        let mut builder = Server::builder().chaos().database(database.clone());
        if let Some(outside) = outside {
            builder = builder.psp(&outside.psp).smtp(&outside.maildev).flags([
                "--operation-lease",
                "2s",
                "--complete-interval",
                "1s",
            ]);
        }
        servers.push(builder.start().await.unwrap());
    }
    Fleet::new(servers)
}

async fn run(mode: Mode) {
    let kills: usize = std::env::var("CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if mode == Mode::Provider { 50 } else { 100 });
    let seed: u64 = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    println!("crash harness ({mode:?}): CRASH_SEED={seed} CRASH_KILLS={kills}");
    let report_seed = SeedOnPanic(seed);

    let database = Database::fresh().await.unwrap();
    let postgres = database.is_postgres();
    let outside = match mode {
        Mode::Local => None,
        Mode::Provider => Some(Outside {
            psp: Arc::new(Psp::with_latency(Duration::from_millis(20)).unwrap()),
            maildev: MailDev::start().await.unwrap(),
        }),
    };
    let fleet = Arc::new(start(mode, &database, outside.as_ref()).await);
    // Through the provider a request may take a few seconds (its retries).
    let timeout = if mode == Mode::Provider { 5 } else { 2 };
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(timeout))
        .build()
        .unwrap();
    let callers: Vec<Vec<testkit::Caller>> = (0..CALLERS)
        .map(|c| {
            let token = format!("crash-caller-{c}-{seed:016x}");
            (0..fleet.len())
                .map(|i| fleet.caller(i, &token, &http))
                .collect()
        })
        .collect();
    let tally = Arc::new(Tally::new(fleet.len()));
    let killing = Arc::new(AtomicBool::new(true));
    let started = Instant::now();

    // Through the provider a kill costs more (the operation it hits waits
    // for its lease): kills come less often, so that work goes on between.
    let gap = match mode {
        Mode::Local => 5..60,
        Mode::Provider => 100..600,
    };
    let killer = {
        let (fleet, killing, tally) = (fleet.clone(), killing.clone(), tally.clone());
        tokio::task::spawn_blocking(move || {
            fleet.kill_at_random(kills, gap, seed, &tally, &killing)
        })
    };
    let throwing = Arc::new(AtomicBool::new(true));
    let faults = outside.as_ref().map(|outside| {
        tokio::spawn(provider::throw_faults(
            outside.psp.clone(),
            seed,
            throwing.clone(),
        ))
    });

    // The senders: operations keep coming while the killer works.
    let answers: Arc<Mutex<HashMap<usize, Vec<Vec<u8>>>>> = Arc::default();
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut operations = Vec::new();
    let mut tasks = Vec::new();
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    while killing.load(Ordering::Acquire) {
        let slot = slots.clone().acquire_owned().await.unwrap();
        let id = operations.len();
        let provider = mode == Mode::Provider;
        let op = Operation {
            id,
            callers: callers[rng.random_range(0..CALLERS)].clone(),
            key: testkit::new_key(),
            amount: rng.random_range(1..100_000),
            declined: provider && rng.random_bool(0.15),
            receipt_email: (provider && rng.random_bool(0.4))
                .then(|| format!("op-{id}@shop.example")),
            abandoned: provider && rng.random_bool(0.05),
        };
        operations.push(op.clone());
        let senders = if op.abandoned {
            1
        } else {
            SENDERS_PER_OPERATION
        };
        let senders: Vec<_> = (0..senders)
            .map(|n| {
                let (op, answers, tally) = (op.clone(), answers.clone(), tally.clone());
                let mut rng = StdRng::seed_from_u64(seed ^ (op.id as u64) << 8 ^ n as u64);
                tokio::spawn(async move {
                    let cx = Context {
                        mode,
                        postgres,
                        tally: &tally,
                    };
                    if op.abandoned {
                        sender::send_and_walk_away(&op, &cx, &mut rng).await;
                        return;
                    }
                    let body = sender::send_until_answered(&op, &cx, &mut rng).await;
                    answers.lock().unwrap().entry(op.id).or_default().push(body);
                })
            })
            .collect();
        tasks.push(tokio::spawn(async move {
            for sender in senders {
                sender.await.unwrap();
            }
            drop(slot);
        }));
    }
    for task in tasks {
        task.await.expect("a sender failed");
    }
    killing.store(true, Ordering::Release); // tell the reviver to stop
    throwing.store(false, Ordering::Release);
    let in_flight_at_kills = killer.await.unwrap();
    let thrown = match faults {
        Some(faults) => faults.await.unwrap(),
        None => Default::default(),
    };
    let senders_done = started.elapsed();

    // The completer finishes what nobody retries: wait until nothing is
    // pending, then read every charge.
    let observer: Vec<&testkit::Caller> = callers.iter().map(|c| &c[0]).collect();
    let charges_by_op = checks::settled_charges(&observer, Duration::from_secs(60)).await;

    // Every operation: exactly one charge, and one answer for everyone.
    let answers = answers.lock().unwrap().clone();
    let mut duplicates = 0;
    let mut lost = 0;
    let mut never_started = 0;
    for op in &operations {
        let charges = charges_by_op
            .get(&op.description())
            .map_or(&[][..], Vec::as_slice);
        duplicates += charges.len().saturating_sub(1);
        if op.abandoned {
            // Its one attempt may have died before the start committed: then
            // the operation never happened.
            never_started += usize::from(charges.is_empty());
        } else {
            lost += usize::from(charges.is_empty());
        }
        let Some(charge) = charges.first() else {
            continue;
        };
        checks::operation(op, mode, charge, answers.get(&op.id)).await;
    }
    let all_charges: Vec<&Value> = charges_by_op.values().flatten().collect();
    let (ledger, receipts) = match &outside {
        Some(outside) => (
            provider::check_ledger(&outside.psp, &all_charges).await,
            provider::check_receipts(&outside.maildev, &all_charges, fleet.restarts()).await,
        ),
        None => (0, (0, 0, 0)),
    };

    let kills_done = in_flight_at_kills.len();
    let landed = in_flight_at_kills.iter().filter(|n| **n > 0).count();
    let count = |f: fn(&Operation) -> bool| operations.iter().filter(|op| f(op)).count();
    println!(
        "crash harness ({mode:?}): seed={seed} backend={} instances={} kills={kills_done} \
         (on requests in flight: {landed}) restarts={} operations={} (declined {}, with receipt {}, \
         abandoned {}, of which never started {never_started}) attempts={} charges={} \
         duplicates={duplicates} lost={lost} ledger={ledger} receipts owed={} received={} \
         duplicate receipts={} faults thrown={thrown:?} senders done in {:.1}s, checked in {:.1}s\n\
         answers by status:\n{}",
        if postgres { "postgres" } else { "sqlite" },
        fleet.len(),
        fleet.restarts(),
        operations.len(),
        count(|op| op.declined),
        count(|op| op.receipt_email.is_some()),
        count(|op| op.abandoned),
        tally.attempts(),
        all_charges.len(),
        receipts.0,
        receipts.1,
        receipts.2,
        senders_done.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        tally.table()
    );
    assert_eq!(duplicates, 0, "duplicate charges");
    assert_eq!(lost, 0, "lost operations");
    assert_eq!(
        all_charges.len(),
        operations.len() - never_started,
        "charges that belong to no operation"
    );
    let forbidden = tally.forbidden();
    assert!(
        forbidden.is_empty(),
        "{} answers the contract rules out, first ones:\n{}",
        forbidden.len(),
        forbidden[..forbidden.len().min(10)].join("\n")
    );
    assert!(kills_done >= kills);
    assert!(
        landed * 2 >= kills_done,
        "only {landed} of {kills_done} kills found a request in flight: {in_flight_at_kills:?}"
    );
    std::mem::forget(report_seed);
}

/// Prints the seed again if the test panics, so the schedule can be replayed.
struct SeedOnPanic(u64);

impl Drop for SeedOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("crash harness FAILED; replay with CRASH_SEED={}", self.0);
        }
    }
}
