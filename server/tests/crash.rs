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
//! Retrying is not hiding: every answer is counted by status and printed as
//! a table, and the ones the contract rules out fail the run: a 500 ever
//! ("database is locked" included), a 409 on SQLite (which waits instead of
//! answering "in use"), a 409 on PostgreSQL that is not
//! `idempotency-key-in-use` with `Retry-After`, a 503 without
//! `Retry-After`. And the kills must land on requests in flight: the
//! senders count the requests they have out, the killer records that count
//! at each kill, and at least half the kills must find one or more.
//!
//! `CRASH_KILLS` (default 100) sets how many kills; `CRASH_SEED` replays a
//! schedule (the seed is printed, and repeated on failure).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::{Caller, Database, Server};

const CALLERS: usize = 4;
const IN_FLIGHT: usize = 16;
const SENDERS_PER_OPERATION: usize = 2;

/// The server process, restarted on the same address and database
/// whenever it dies.
struct Supervised {
    server: Mutex<Server>,
    restarts: AtomicUsize,
}

impl Supervised {
    /// SIGKILL, then a new process on the same address and database.
    fn kill_and_restart(&self) {
        let mut server = self.server.lock().unwrap();
        server.kill().expect("SIGKILL");
        server.restart().expect("restart");
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// Restarts the process if it exited on its own (`exit-after-commit`).
    fn revive(&self) {
        let mut server = self.server.lock().unwrap();
        if server.try_wait().unwrap().is_some() {
            server.restart().expect("restart");
            self.restarts.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What the senders saw: every answer by status, the ones the contract
/// rules out, the requests out right now, and how many were sent.
#[derive(Default)]
struct Tally {
    statuses: Mutex<BTreeMap<String, usize>>,
    forbidden: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    attempts: AtomicUsize,
}

impl Tally {
    fn count(&self, what: String) {
        *self.statuses.lock().unwrap().entry(what).or_default() += 1;
    }

    fn forbid(&self, op: usize, why: String) {
        self.forbidden
            .lock()
            .unwrap()
            .push(format!("op {op}: {why}"));
    }

    fn table(&self) -> String {
        let statuses = self.statuses.lock().unwrap();
        let rows: Vec<String> = statuses
            .iter()
            .map(|(status, n)| format!("  {status:>16}  {n}"))
            .collect();
        rows.join("\n")
    }
}

/// One logical operation.
#[derive(Clone)]
struct Operation {
    id: usize,
    caller: Caller,
    key: String,
    amount: i64,
}

impl Operation {
    fn body(&self) -> Value {
        json!({"amount": self.amount, "currency": "usd", "description": format!("op-{}", self.id)})
    }
}

/// Sends `op` until a final answer, as a retrying client would; counts
/// every answer in `tally`.
async fn send_until_answered(
    op: &Operation,
    postgres: bool,
    tally: &Tally,
    rng: &mut StdRng,
) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(
            Instant::now() < deadline,
            "op {} never got an answer",
            op.id
        );
        let chaos = match rng.random_range(0..100) {
            0..=3 => Some("drop-after-commit"),
            4..=6 => Some("crash-before-commit"),
            7..=9 => Some("delay-after-commit=30"),
            10 => Some("exit-after-commit"),
            _ => None,
        };
        let headers: &[(&str, &str)] = match &chaos {
            Some(chaos) => &[("X-Chaos", chaos)],
            None => &[],
        };
        tally.attempts.fetch_add(1, Ordering::Relaxed);
        tally.in_flight.fetch_add(1, Ordering::SeqCst);
        let answer = match op
            .caller
            .post_keyed_with("/charges", &op.key, &op.body(), headers)
            .await
        {
            Ok(response) => {
                let status = response.status().as_u16();
                let retry_after = response.headers().contains_key("retry-after");
                response
                    .bytes()
                    .await
                    .ok()
                    .map(|body| (status, retry_after, body.to_vec()))
            }
            // Refused, reset, timed out: the server may be dead.
            Err(_) => None,
        };
        tally.in_flight.fetch_sub(1, Ordering::SeqCst);
        let Some((status, retry_after, body)) = answer else {
            tally.count("transport error".into());
            tokio::time::sleep(Duration::from_millis(rng.random_range(2..25))).await;
            continue;
        };
        tally.count(status.to_string());
        let text = || String::from_utf8_lossy(&body).into_owned();
        match status {
            201 => return body,
            409 if !postgres => tally.forbid(op.id, format!("409 on SQLite: {}", text())),
            409 => {
                let problem: Value = serde_json::from_slice(&body).unwrap_or_default();
                let in_use = problem["type"]
                    .as_str()
                    .is_some_and(|t| t.ends_with("/idempotency-key-in-use"));
                if !(in_use && retry_after) {
                    tally.forbid(
                        op.id,
                        format!("409 (Retry-After: {retry_after}): {}", text()),
                    );
                }
            }
            503 if !retry_after => {
                tally.forbid(op.id, format!("503 without Retry-After: {}", text()))
            }
            503 => {}
            500..=599 => tally.forbid(op.id, format!("{status}: {}", text())),
            other => panic!("op {}: unexpected {other}: {}", op.id, text()),
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(2..25))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_operation_charges_exactly_once_through_kills_and_duplicates() {
    let kills: usize = std::env::var("CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let seed: u64 = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    println!("crash harness: CRASH_SEED={seed} CRASH_KILLS={kills}");
    let report_seed = SeedOnPanic(seed);

    let database = Database::fresh().await.unwrap();
    let postgres = database.is_postgres();
    let server = Server::builder()
        .chaos()
        .database(database)
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let callers: Vec<Caller> = (0..CALLERS)
        .map(|i| {
            server
                .bearer(&format!("crash-caller-{i}-{seed:016x}"))
                .with_http(http.clone())
        })
        .collect();
    let server = Arc::new(Supervised {
        server: Mutex::new(server),
        restarts: AtomicUsize::new(0),
    });
    let tally = Arc::new(Tally::default());
    let killing = Arc::new(AtomicBool::new(true));
    let started = Instant::now();

    // The killer: SIGKILL at random moments, restart on the same address;
    // also revive a process that exited on its own. Records how many
    // requests were out at each kill.
    let killer = {
        let (server, killing, tally) = (server.clone(), killing.clone(), tally.clone());
        tokio::task::spawn_blocking(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut in_flight_at_kills = Vec::new();
            let mut next = Instant::now() + Duration::from_millis(rng.random_range(5..60));
            while in_flight_at_kills.len() < kills {
                std::thread::sleep(Duration::from_millis(2));
                server.revive();
                if Instant::now() >= next {
                    in_flight_at_kills.push(tally.in_flight.load(Ordering::SeqCst));
                    server.kill_and_restart();
                    next = Instant::now() + Duration::from_millis(rng.random_range(5..60));
                }
            }
            killing.store(false, Ordering::Release);
            // Keep reviving until the senders are done with exit-after-commit.
            while !killing.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(2));
                server.revive();
            }
            in_flight_at_kills
        })
    };

    // The senders: operations keep coming while the killer works.
    let answers: Arc<Mutex<HashMap<usize, Vec<Vec<u8>>>>> = Arc::default();
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut operations = Vec::new();
    let mut tasks = Vec::new();
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    while killing.load(Ordering::Acquire) {
        let slot = slots.clone().acquire_owned().await.unwrap();
        let op = Operation {
            id: operations.len(),
            caller: callers[rng.random_range(0..CALLERS)].clone(),
            key: testkit::new_key(),
            amount: rng.random_range(1..100_000),
        };
        operations.push(op.clone());
        let senders: Vec<_> = (0..SENDERS_PER_OPERATION)
            .map(|n| {
                let (op, answers, tally) = (op.clone(), answers.clone(), tally.clone());
                let mut rng = StdRng::seed_from_u64(seed ^ (op.id as u64) << 8 ^ n as u64);
                tokio::spawn(async move {
                    let body = send_until_answered(&op, postgres, &tally, &mut rng).await;
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
    let in_flight_at_kills = killer.await.unwrap();

    // Every operation: exactly one charge, and one answer for everyone.
    let answers = answers.lock().unwrap().clone();
    let mut charges_by_op: HashMap<String, Vec<Value>> = HashMap::new();
    for caller in &callers {
        let charges = caller
            .charges()
            .await
            .unwrap_or_else(|e| panic!("listing the charges: {e:#}"));
        for charge in charges {
            let description = charge["description"].as_str().unwrap().to_owned();
            charges_by_op.entry(description).or_default().push(charge);
        }
    }
    let mut duplicates = 0;
    let mut lost = 0;
    for op in &operations {
        let bodies = &answers[&op.id];
        assert_eq!(bodies.len(), SENDERS_PER_OPERATION);
        assert!(
            bodies.iter().all(|b| b == &bodies[0]),
            "op {}: senders got different answers",
            op.id
        );
        let charges = charges_by_op
            .get(&format!("op-{}", op.id))
            .map_or(0, Vec::len);
        duplicates += charges.saturating_sub(1);
        lost += usize::from(charges == 0);
        let answered: Value = serde_json::from_slice(&bodies[0]).unwrap();
        if charges == 1 {
            assert_eq!(
                charges_by_op[&format!("op-{}", op.id)][0],
                answered,
                "op {}: the charge is the answer",
                op.id
            );
        }
        // The record is there, finished, and replays the same bytes.
        let replay = op
            .caller
            .post_keyed("/charges", &op.key, &op.body())
            .await
            .unwrap();
        assert_eq!(
            replay.headers()["idempotent-replayed"],
            "true",
            "op {} is unfinished",
            op.id
        );
        assert_eq!(
            replay.bytes().await.unwrap(),
            bodies[0],
            "op {}: the replay differs",
            op.id
        );
    }
    let total: usize = charges_by_op.values().map(Vec::len).sum();
    let kills_done = in_flight_at_kills.len();
    let landed = in_flight_at_kills.iter().filter(|n| **n > 0).count();
    println!(
        "crash harness: seed={seed} backend={} kills={kills_done} (on requests in flight: {landed}) \
         restarts={} operations={} attempts={} charges={total} duplicates={duplicates} lost={lost} in {:.1}s\n\
         answers by status:\n{}",
        if postgres { "postgres" } else { "sqlite" },
        server.restarts.load(Ordering::Relaxed),
        operations.len(),
        tally.attempts.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
        tally.table()
    );
    assert_eq!(duplicates, 0, "duplicate charges");
    assert_eq!(lost, 0, "lost operations");
    assert_eq!(
        total,
        operations.len(),
        "charges that belong to no operation"
    );
    let forbidden = tally.forbidden.lock().unwrap().clone();
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
