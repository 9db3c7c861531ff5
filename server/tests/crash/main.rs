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
//! database, senders spread over both and kills of either. In this mode
//! the killer also strikes as the completer starts resuming an abandoned
//! operation (seen in the server's log), and at least one such kill must
//! happen.
//!
//! **Stock mode** is local mode with reservations mixed in (a random item
//! of the three, 1 to 3 of it), two servers on PostgreSQL: afterwards each
//! item's stock is what a fresh database holds less the quantities of the
//! reservations answered 201 (each operation once), never below zero; a
//! reservation answered the recorded 409 `insufficient-inventory` took
//! nothing, and asked for more than is left; the reservations table holds
//! one row per 201. `sku-poster` (3) runs out early, `sku-tee` (100) late.
//!
//! In every mode a quarter of the restarts are killed first, a random
//! moment after their spawn (before or while the server opens its
//! database, or once it listens), and the next start must come up all the
//! same. The `startup` module kills starts on fresh databases, while they
//! migrate.
//!
//! Retrying is not hiding: every answer is counted by status (and problem
//! type) and printed as a table, and the ones the contract rules out fail
//! the run:
//!
//! | answer | local mode | provider mode |
//! |---|---|---|
//! | 201 | final | final for a paying card; ruled out for a declining one |
//! | 409 `insufficient-inventory` | final for a reservation; ruled out for a charge | (no reservations) |
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
//! `CRASH_KILLS` (default 100, 50 in provider mode) sets how many kills at
//! random moments;
//! `CRASH_SEED` replays a schedule (the seed is printed, and repeated on
//! failure).
//!
//! This file, though over 400 lines, is the run told in order (the plan,
//! the senders and the killer, then every check and the report); the
//! modules below hold its parts.

#[path = "harness.rs"]
mod harness;

mod checks;
mod fleet;
mod startup;

use harness::{charges, knobs, provider, sender, stock, tally};
use harness::{CALLERS, IN_FLIGHT, ONE_AT_A_TIME, SENDERS_PER_OPERATION};

use fleet::{Fleet, Plan};
use knobs::{knob, Seed};
use sender::{Draw, Kind, Mode, Operation};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tally::Tally;
use testkit::{Database, MailDev, Psp, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_operation_charges_exactly_once_through_kills_and_duplicates() {
    let _alone = ONE_AT_A_TIME.lock().await;
    run(Mode::Local, Mix::Charges).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reservations_take_stock_exactly_once_and_never_below_zero_through_kills_and_duplicates() {
    let _alone = ONE_AT_A_TIME.lock().await;
    run(Mode::Local, Mix::ChargesAndReservations).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn through_the_provider_every_operation_charges_the_card_once_and_owes_one_receipt() {
    let _alone = ONE_AT_A_TIME.lock().await;
    run(Mode::Provider, Mix::Charges).await;
}

/// What the operations are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mix {
    Charges,
    /// One in eight of them reservations.
    ChargesAndReservations,
}

/// What lives beside the servers in provider mode.
struct Outside {
    psp: Arc<Psp>,
    maildev: MailDev,
}

/// The servers of `mode` on `database`: one, or two on PostgreSQL in
/// provider mode and with reservations.
async fn start(mode: Mode, mix: Mix, database: &Database, outside: Option<&Outside>) -> Fleet {
    let instances = match (mode, mix, database.is_postgres()) {
        (Mode::Provider, _, true) | (_, Mix::ChargesAndReservations, true) => 2,
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

async fn run(mode: Mode, mix: Mix) {
    let kills: usize = knob("CRASH_KILLS", || match mode {
        Mode::Local => 100,
        Mode::Provider => 50,
    });
    let report_seed = Seed::from_env();
    let seed = report_seed.0;
    println!("crash harness ({mode:?}, {mix:?}): CRASH_SEED={seed} CRASH_KILLS={kills}");

    let database = Database::fresh().await.unwrap();
    let postgres = database.is_postgres();
    let outside = match mode {
        Mode::Local => None,
        Mode::Provider => Some(Outside {
            psp: Arc::new(Psp::with_latency(Duration::from_millis(20)).unwrap()),
            maildev: MailDev::start().await.unwrap(),
        }),
    };
    let fleet = Arc::new(start(mode, mix, &database, outside.as_ref()).await);
    // Through the provider a request may take a few seconds (its retries).
    let timeout = if mode == Mode::Provider { 5 } else { 2 };
    let callers = sender::callers(
        "crash",
        seed,
        CALLERS,
        Duration::from_secs(timeout),
        |token, http| {
            (0..fleet.len())
                .map(|i| fleet.caller(i, token, http))
                .collect()
        },
    );
    let tally = Arc::new(Tally::new(fleet.len()));
    let killing = Arc::new(AtomicBool::new(true));
    let done = Arc::new(AtomicBool::new(false));
    let stop_killer = fleet::Done(done.clone());
    let started = Instant::now();

    // Through the provider a kill costs more (the operation it hits waits
    // for its lease): kills come less often, so that work goes on between.
    let plan = Plan {
        kills,
        gap: match mode {
            Mode::Local => 5..60,
            Mode::Provider => 100..600,
        },
        seed,
        recovery_kills: match mode {
            Mode::Local => 0,
            Mode::Provider => kills / 5,
        },
    };
    let killer = {
        let (fleet, killing, tally) = (fleet.clone(), killing.clone(), tally.clone());
        tokio::task::spawn_blocking(move || fleet.kill_at_random(&plan, &tally, &killing, &done))
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
    let answers: sender::Answers = Arc::default();
    let provider = mode == Mode::Provider;
    let draw = Draw {
        provider,
        reservations: mix == Mix::ChargesAndReservations,
        abandon: if provider { 0.05 } else { 0.0 },
    };
    let operations = sender::while_running(
        &killing,
        IN_FLIGHT,
        seed,
        |id, rng| Operation::drawn(id, &callers, rng, draw),
        |op, slot| {
            let senders = if op.abandoned {
                1
            } else {
                SENDERS_PER_OPERATION
            };
            sender::spawn_senders(op, senders, seed, (mode, postgres), &tally, &answers, slot)
        },
    )
    .await;
    drop(stop_killer); // tell the reviver to stop
    throwing.store(false, Ordering::Release);
    let kills_done = killer.await.unwrap();
    let thrown = match faults {
        Some(faults) => faults.await.unwrap(),
        None => Default::default(),
    };
    let senders_done = started.elapsed();

    // The completer finishes what nobody retries: wait until nothing is
    // pending, then read every charge.
    let observer: Vec<&testkit::Caller> = callers.iter().map(|c| &c[0]).collect();
    let charges_by_op = charges::settled(&observer, Duration::from_secs(60)).await;

    // Every operation: exactly one charge, and one answer for everyone.
    let answers = answers.lock().unwrap().clone();
    let mut duplicates = 0;
    let mut lost = 0;
    let mut never_started = 0;
    let mut reservations = Vec::new();
    for op in &operations {
        if op.reservation().is_some() {
            reservations.push((op, checks::reservation(op, answers.get(&op.id)).await));
            continue;
        }
        let charges = charges_by_op
            .get(&op.description())
            .map_or(&[][..], Vec::as_slice);
        duplicates += charges.len().saturating_sub(1);
        if op.abandoned {
            // Its one attempt may have died before the start committed: then
            // the operation never happened, and nothing of it is stored. A
            // record without its charge is one the completer lost.
            if charges.is_empty() {
                never_started += 1;
                let stored = database
                    .count(&format!(
                        "idempotency_keys WHERE key = '{}'",
                        op.key.replace('\'', "''")
                    ))
                    .await
                    .unwrap();
                lost += usize::try_from(stored).unwrap();
            }
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
    let stock = match mix {
        Mix::Charges => "-".to_owned(),
        Mix::ChargesAndReservations => stock::check(&reservations, observer[0], &database).await,
    };

    let in_flight_at_kills = &kills_done.in_flight;
    let landed = in_flight_at_kills.iter().filter(|n| **n > 0).count();
    let [starting, listening, exited] = kills_done.starts_killed;
    let count = |f: fn(&Operation) -> bool| operations.iter().filter(|op| f(op)).count();
    println!(
        "crash harness ({mode:?}, {mix:?}): seed={seed} backend={} instances={} kills={} \
         (on requests in flight: {landed}) starts killed={} (starting {starting}, listening \
         {listening}, exited first {exited}) kills in recovery={} (before the completer was \
         done: {}) restarts={} operations={} (declined {}, with receipt {}, abandoned {}, of \
         which never started {never_started}, reservations {}) attempts={} charges={} \
         duplicates={duplicates} lost={lost} stock: {stock} ledger={ledger} receipts owed={} \
         received={} duplicate receipts={} faults thrown={thrown:?} senders done in {:.1}s, \
         checked in {:.1}s\n\
         answers by status:\n{}",
        if postgres { "postgres" } else { "sqlite" },
        fleet.len(),
        in_flight_at_kills.len(),
        starting + listening + exited,
        kills_done.in_recovery,
        kills_done.mid_resume,
        fleet.restarts(),
        operations.len(),
        count(Operation::declined),
        count(|op| matches!(
            op.kind,
            Kind::Charge {
                receipt_email: Some(_),
                ..
            }
        )),
        count(|op| op.abandoned),
        reservations.len(),
        tally.attempts(),
        all_charges.len(),
        receipts.0,
        receipts.1,
        receipts.2,
        senders_done.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        tally.kinds.table()
    );
    assert_eq!(duplicates, 0, "duplicate charges");
    assert_eq!(lost, 0, "lost operations");
    assert_eq!(
        all_charges.len(),
        operations.len() - never_started - reservations.len(),
        "charges that belong to no operation"
    );
    tally.assert_nothing_forbidden();
    assert!(in_flight_at_kills.len() >= kills);
    assert!(
        landed * 2 >= in_flight_at_kills.len(),
        "only {landed} of {} kills found a request in flight: {in_flight_at_kills:?}",
        in_flight_at_kills.len()
    );
    // The completer is seen in the log, which `TEST_LOG` sends elsewhere.
    // A kill counts only if it came before the completer logged the
    // operation done (in practice every one does: 10 of 10 in two runs).
    if mode == Mode::Provider && std::env::var_os("TEST_LOG").is_none() {
        assert!(
            kills_done.mid_resume > 0,
            "no kill found the completer in the middle of resuming an operation \
             ({} found it resuming or done)",
            kills_done.in_recovery
        );
    }
    std::mem::forget(report_seed);
}
