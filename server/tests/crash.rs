//! Crash and duplicate harness: exactly once, whatever breaks.
//!
//! Logical operations are each sent by two concurrent senders with the same
//! key and body (the retrying client of the seed article: same key on every
//! retry; retry on timeouts, connection errors, 409 and 5xx), while a killer
//! sends SIGKILL to the server at random moments and restarts it on the same
//! SQLite file. Some attempts carry `X-Chaos` values too (drop, delay,
//! crash before commit, exit after commit). At the end every operation has
//! exactly one charge, none is lost or unfinished, and its stored replay
//! equals every answer any sender got.
//!
//! `CRASH_KILLS` (default 100) sets how many kills; `CRASH_SEED` replays a
//! schedule (the seed is printed, and repeated on failure).

mod common;

use common::spawn_server;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

const CALLERS: usize = 4;
const IN_FLIGHT: usize = 16;
const SENDERS_PER_OPERATION: usize = 2;

/// The server process, restarted on the same database whenever it dies.
struct Supervised {
    db: String,
    child: Mutex<Child>,
    addr: RwLock<String>,
    restarts: AtomicUsize,
}

fn start(db: &str, listen: &str) -> Option<(Child, String)> {
    let args = [
        "--listen",
        listen,
        "--chaos",
        "--durability",
        "relaxed",
        "--www",
        "/nonexistent",
        "--database",
        db,
    ];
    let (child, base) = spawn_server(&args)?;
    Some((child, base.trim_start_matches("http://").to_owned()))
}

impl Supervised {
    fn new(db: String) -> Self {
        let (child, addr) = start(&db, "127.0.0.1:0").expect("first start");
        Self {
            db,
            child: Mutex::new(child),
            addr: RwLock::new(addr),
            restarts: AtomicUsize::new(0),
        }
    }

    fn addr(&self) -> String {
        self.addr.read().unwrap().clone()
    }

    /// Restarts on the same port (or, if taken, another one).
    fn restart(&self, child: &mut Child) {
        let _ = child.wait();
        let addr = self.addr();
        let (new_child, new_addr) = start(&self.db, &addr)
            .or_else(|| start(&self.db, "127.0.0.1:0"))
            .expect("restart");
        *child = new_child;
        *self.addr.write().unwrap() = new_addr;
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    fn kill_and_restart(&self) {
        let mut child = self.child.lock().unwrap();
        let _ = child.kill(); // SIGKILL
        self.restart(&mut child);
    }

    /// Restarts the process if it exited on its own (`exit-after-commit`).
    fn revive(&self) -> bool {
        let mut child = self.child.lock().unwrap();
        if child.try_wait().unwrap().is_some() {
            self.restart(&mut child);
            true
        } else {
            false
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        let mut child = self.child.lock().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// One logical operation.
#[derive(Clone)]
struct Operation {
    id: usize,
    token: String,
    key: String,
    amount: i64,
}

impl Operation {
    fn body(&self) -> Value {
        json!({"amount": self.amount, "currency": "usd", "description": format!("op-{}", self.id)})
    }
}

/// Sends `op` until a final answer, as a retrying client would.
async fn send_until_answered(
    client: &reqwest::Client,
    server: &Supervised,
    op: &Operation,
    rng: &mut StdRng,
) -> (bytes::Bytes, usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    for attempt in 1.. {
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
        let mut request = client
            .post(format!("http://{}/charges", server.addr()))
            .bearer_auth(&op.token)
            .header("Idempotency-Key", &op.key)
            .json(&op.body());
        if let Some(chaos) = chaos {
            request = request.header("X-Chaos", chaos);
        }
        // An Err (refused, reset, timed out) means the server may be dead: retry.
        if let Ok(response) = request.send().await {
            let status = response.status().as_u16();
            match (status, response.bytes().await) {
                (201, Ok(body)) => return (body, attempt),
                (408 | 409 | 425 | 429 | 500..=599, _) | (_, Err(_)) => {}
                (other, Ok(body)) => {
                    panic!(
                        "op {}: unexpected {other}: {}",
                        op.id,
                        String::from_utf8_lossy(&body)
                    )
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(2..25))).await;
    }
    unreachable!()
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

    let dir = tempfile::tempdir().unwrap();
    let server = Arc::new(Supervised::new(common::fresh_database(dir.path()).await));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let tokens: Vec<String> = (0..CALLERS)
        .map(|i| format!("crash-caller-{i}-{seed:016x}"))
        .collect();
    let killing = Arc::new(AtomicBool::new(true));
    let started = Instant::now();

    // The killer: SIGKILL at random moments, restart on the same file; also
    // revive a process that exited on its own.
    let killer = {
        let (server, killing) = (server.clone(), killing.clone());
        tokio::task::spawn_blocking(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut done = 0;
            let mut next = Instant::now() + Duration::from_millis(rng.random_range(5..60));
            while done < kills {
                std::thread::sleep(Duration::from_millis(2));
                server.revive();
                if Instant::now() >= next {
                    server.kill_and_restart();
                    done += 1;
                    next = Instant::now() + Duration::from_millis(rng.random_range(5..60));
                }
            }
            killing.store(false, Ordering::Release);
            // Keep reviving until the senders are done with exit-after-commit.
            while !killing.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(2));
                server.revive();
            }
            done
        })
    };

    // The senders: operations keep coming while the killer works.
    let answers: Arc<Mutex<HashMap<usize, Vec<bytes::Bytes>>>> = Arc::default();
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut operations = Vec::new();
    let mut tasks = Vec::new();
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    while killing.load(Ordering::Acquire) {
        let slot = slots.clone().acquire_owned().await.unwrap();
        let op = Operation {
            id: operations.len(),
            token: tokens[rng.random_range(0..CALLERS)].clone(),
            key: uuid::Uuid::new_v4().to_string(),
            amount: rng.random_range(1..100_000),
        };
        operations.push(op.clone());
        let senders: Vec<_> = (0..SENDERS_PER_OPERATION)
            .map(|n| {
                let (client, server, op, answers) =
                    (client.clone(), server.clone(), op.clone(), answers.clone());
                let mut rng = StdRng::seed_from_u64(seed ^ (op.id as u64) << 8 ^ n as u64);
                tokio::spawn(async move {
                    let (body, _attempts) =
                        send_until_answered(&client, &server, &op, &mut rng).await;
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
    let kills_done = killer.await.unwrap();

    // Every operation: exactly one charge, and one answer for everyone.
    let answers = answers.lock().unwrap().clone();
    let mut charges_by_op: HashMap<String, Vec<Value>> = HashMap::new();
    for token in &tokens {
        let mut after = String::new();
        loop {
            let page: Value = client
                .get(format!(
                    "http://{}/charges?limit=1000{after}",
                    server.addr()
                ))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let data = page["data"].as_array().unwrap();
            for charge in data {
                let description = charge["description"].as_str().unwrap().to_owned();
                charges_by_op
                    .entry(description)
                    .or_default()
                    .push(charge.clone());
            }
            if page["has_more"] != true {
                break;
            }
            after = format!(
                "&starting_after={}",
                data.last().unwrap()["id"].as_str().unwrap()
            );
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
        let replay = client
            .post(format!("http://{}/charges", server.addr()))
            .bearer_auth(&op.token)
            .header("Idempotency-Key", &op.key)
            .json(&op.body())
            .send()
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
    println!(
        "crash harness: seed={seed} kills={kills_done} restarts={} operations={} charges={total} duplicates={duplicates} lost={lost} in {:.1}s",
        server.restarts.load(Ordering::Relaxed),
        operations.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(duplicates, 0, "duplicate charges");
    assert_eq!(lost, 0, "lost operations");
    assert_eq!(
        total,
        operations.len(),
        "charges that belong to no operation"
    );
    assert!(kills_done >= kills);
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
