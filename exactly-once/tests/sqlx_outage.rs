//! The shop's outage harness (server/tests/outage) at the engine on sqlx:
//! PostgreSQL killed and restarted (`stop -m immediate`, SIGKILL of the
//! postmaster, `stop -m fast`, in turn), its connections cut, refused and
//! left unanswered, through a TCP proxy, while operations keep coming.
//! Each operation (one row in the application's table, written with sqlx
//! in the engine's transaction) is sent by one sender until it is
//! answered 201.
//!
//! Every answer is one the contract allows: 201, 503 "nothing was done"
//! (`Unavailable`), 503 "may or may not have been done" (`OutcomeUnknown`)
//! or 409 (in use); never an internal error. At the end each operation
//! has exactly one row, the one every 201 of it named; "nothing was done"
//! is never said of an attempt that did something (a first 201 that is a
//! replay needs an earlier unknown outcome); while the database is gone
//! the engine's health check fails; and 201s come back within 5 s of the
//! database's return. `OUTAGE_SEED` replays the schedule. Needs
//! PostgreSQL installed: `scripts/test.sh` runs it with
//! `--include-ignored`.

mod common;

use exactly_once::{Engine, Error, Refused, Sqlx};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::{Database, Postgres, Proxy};

/// Senders at once, each with one operation at a time.
const SENDERS: usize = 8;
/// 201s again within this of the database's return.
const RECONNECT: Duration = Duration::from_secs(5);
/// How the database goes away in turn.
const KILLS: [&str; 3] = [
    "pg_ctl stop -m immediate",
    "SIGKILL of the postmaster",
    "pg_ctl stop -m fast",
];

/// How one attempt was answered.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// 201, naming the row, first run or replay.
    Created { note: i64, replayed: bool },
    /// 503: nothing was done.
    NothingDone,
    /// 503: it may or may not have been done.
    Unknown,
    /// 409: another attempt of the key holds it.
    InUse,
    /// What the contract rules out.
    Forbidden(String),
}

impl Outcome {
    fn kind(&self) -> &'static str {
        match self {
            Self::Created {
                replayed: false, ..
            } => "201",
            Self::Created { replayed: true, .. } => "201 replayed",
            Self::NothingDone => "503 nothing was done",
            Self::Unknown => "503 outcome unknown",
            Self::InUse => "409 in use",
            Self::Forbidden(_) => "forbidden",
        }
    }

    fn of(answer: Result<exactly_once::Answer, Refused<()>>) -> Self {
        match answer {
            Ok(answer) if answer.response.status == 201 => {
                let body: serde_json::Value =
                    serde_json::from_slice(&answer.response.body).expect("a 201's body is JSON");
                let note = body["note"].as_i64().expect("a 201 names its note");
                Self::Created {
                    note,
                    replayed: answer.replayed,
                }
            }
            Ok(answer) => Self::Forbidden(format!("answered {}", answer.response.status)),
            Err(Refused::Engine(Error::Unavailable(_))) => Self::NothingDone,
            Err(Refused::Engine(Error::OutcomeUnknown(_))) => Self::Unknown,
            Err(Refused::Engine(Error::IdempotencyKeyInUse)) => Self::InUse,
            Err(other) => Self::Forbidden(format!("{other:?}")),
        }
    }
}

/// What every sender saw, shared with the chaos driver.
#[derive(Default)]
struct Tally {
    /// Each operation's attempts, by key, in order.
    attempts: Mutex<HashMap<String, Vec<Outcome>>>,
    /// When each 201 came.
    created_at: Mutex<Vec<Instant>>,
    /// Attempts answered so far.
    answered: AtomicUsize,
}

impl Tally {
    fn record(&self, key: &str, outcome: Outcome) {
        if matches!(outcome, Outcome::Created { .. }) {
            self.created_at.lock().unwrap().push(Instant::now());
        }
        self.answered.fetch_add(1, Ordering::SeqCst);
        let mut attempts = self.attempts.lock().unwrap();
        attempts.entry(key.to_owned()).or_default().push(outcome);
    }

    /// Waits for a 201 after `back`; how long after it (15 s at most).
    async fn first_201_after(&self, back: Instant, what: &str) -> Duration {
        let deadline = back + Duration::from_secs(15);
        loop {
            let created = self.created_at.lock().unwrap().iter().copied().max();
            if let Some(at) = created.filter(|at| *at > back) {
                return at - back;
            }
            assert!(Instant::now() < deadline, "no 201 within 15 s {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL installed (a cluster of its own), --include-ignored"]
async fn postgres_killed_and_cut_off_under_sqlx_loses_duplicates_and_misreports_nothing() {
    let rounds: usize = std::env::var("OUTAGE_ROUNDS").map_or(3, |r| r.parse().unwrap());
    let seed: u64 =
        std::env::var("OUTAGE_SEED").map_or_else(|_| rand::random(), |s| s.parse().unwrap());
    println!("sqlx outage harness: OUTAGE_SEED={seed} OUTAGE_ROUNDS={rounds}");
    let cluster = Arc::new(Postgres::start().unwrap());
    let proxy = Arc::new(Proxy::start(cluster.addr()).unwrap());
    let db = Database::postgres_on(&Postgres::url_at(proxy.addr()))
        .await
        .unwrap();
    let engine = common::notes::sqlx_engine(&db.url(), 8).await;

    let tally = Arc::new(Tally::default());
    let running = Arc::new(AtomicBool::new(true));
    let next = Arc::new(AtomicUsize::new(0));
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let (engine, tally) = (engine.clone(), tally.clone());
            let (running, next) = (running.clone(), next.clone());
            let mut rng = StdRng::seed_from_u64(seed ^ (s as u64) << 16);
            tokio::spawn(async move {
                while running.load(Ordering::SeqCst) {
                    let key = format!("op-{}", next.fetch_add(1, Ordering::SeqCst));
                    send_until_created(&engine, &tally, &key, &mut rng).await;
                }
            })
        })
        .collect();

    let mut rng = StdRng::seed_from_u64(seed);
    let mut reconnects: Vec<(String, Duration)> = Vec::new();
    let mut outage_answers: Vec<(String, usize)> = Vec::new();
    for round in 0..rounds {
        for (way, kill) in KILLS.iter().enumerate() {
            tokio::time::sleep(Duration::from_millis(rng.random_range(300..800))).await;
            let what = format!("after {kill} (round {round})");
            let killed = cluster.clone();
            blocking(move || {
                match way {
                    0 => killed.kill_immediate(),
                    1 => killed.sigkill_postmaster(),
                    _ => killed.stop_fast(),
                }?;
                killed.wait_until_gone(Duration::from_secs(30)).map(|_| ())
            })
            .await
            .unwrap();
            outage_answers.push((what.clone(), hold_outage(&engine, &tally).await));
            let restarted = cluster.clone();
            let back = blocking(move || restarted.restart()).await.unwrap();
            reconnects.push((what.clone(), tally.first_201_after(back, &what).await));
        }

        tokio::time::sleep(Duration::from_millis(rng.random_range(300..800))).await;
        proxy.refuse(true);
        proxy.cut();
        let what = format!("while refused (round {round})");
        outage_answers.push((what.clone(), hold_outage(&engine, &tally).await));
        proxy.refuse(false);
        let back = Instant::now();
        reconnects.push((what.clone(), tally.first_201_after(back, &what).await));

        tokio::time::sleep(Duration::from_millis(rng.random_range(300..800))).await;
        proxy.blackhole(true);
        proxy.cut();
        // Statements wait for the engine's bound on an answer: none is
        // counted, the health check only.
        assert!(engine.health().await.is_err(), "healthy while blackholed");
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.blackhole(false);
        proxy.cut();
        let back = Instant::now();
        let what = format!("after a blackhole (round {round})");
        reconnects.push((what.clone(), tally.first_201_after(back, &what).await));
    }
    running.store(false, Ordering::SeqCst);
    for sender in senders {
        sender.await.unwrap();
    }

    let attempts = tally.attempts.lock().unwrap().clone();
    let rows = notes(&db).await;
    let verdict = judge(&attempts, &rows);
    let mut kinds: HashMap<&str, usize> = HashMap::new();
    for outcome in attempts.values().flatten() {
        *kinds.entry(outcome.kind()).or_default() += 1;
    }
    println!(
        "sqlx outage harness: seed={seed} operations={} rows={} answers by kind: {kinds:?}\n\
         answers during each outage: {outage_answers:?}\nuntil the first 201 after each \
         return: {reconnects:?}",
        attempts.len(),
        rows.values().map(Vec::len).sum::<usize>(),
    );
    for (what, problems) in verdict {
        assert!(problems.is_empty(), "{what}: {problems:#?}");
    }
    let slow: Vec<_> = reconnects.iter().filter(|(_, d)| *d > RECONNECT).collect();
    assert!(slow.is_empty(), "201s later than {RECONNECT:?}: {slow:?}");
    assert!(
        outage_answers.iter().all(|(_, n)| *n > 0),
        "an outage no request met: {outage_answers:?}"
    );
    engine.health().await.expect("healthy at the end");
}

/// Sends `key`'s operation until it is answered 201, every attempt's
/// answer into `tally`.
async fn send_until_created(engine: &Engine<Sqlx>, tally: &Tally, key: &str, rng: &mut StdRng) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let outcome = Outcome::of(common::notes::add_note(engine, key).await);
        let created = matches!(outcome, Outcome::Created { .. });
        tally.record(key, outcome);
        if created {
            return;
        }
        assert!(Instant::now() < deadline, "{key} not answered 201 in 90 s");
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..120))).await;
    }
}

/// Waits until the engine's health check fails, then holds the outage
/// for a second: how many attempts were answered meanwhile.
async fn hold_outage(engine: &Engine<Sqlx>, tally: &Tally) -> usize {
    let deadline = Instant::now() + Duration::from_secs(15);
    while engine.health().await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "still healthy without a database"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = tally.answered.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    tally.answered.load(Ordering::SeqCst) - before
}

/// Every note's id, by key.
async fn notes(db: &Database) -> HashMap<String, Vec<i64>> {
    let client = db.postgres_client().await.unwrap();
    let mut by_key: HashMap<String, Vec<i64>> = HashMap::new();
    for row in client
        .query("SELECT key, id FROM notes", &[])
        .await
        .unwrap()
    {
        by_key.entry(row.get(0)).or_default().push(row.get(1));
    }
    by_key
}

/// Each kind of wrong, with the operations it was found in.
fn judge(
    attempts: &HashMap<String, Vec<Outcome>>,
    rows: &HashMap<String, Vec<i64>>,
) -> Vec<(&'static str, Vec<String>)> {
    let (mut not_one, mut lost, mut lies, mut forbidden) = (vec![], vec![], vec![], vec![]);
    for (key, outcomes) in attempts {
        let row = rows.get(key).map_or(&[][..], Vec::as_slice);
        if row.len() != 1 {
            not_one.push(format!("{key}: rows {row:?}, answers {outcomes:?}"));
        }
        for outcome in outcomes {
            match outcome {
                Outcome::Created { note, .. } if !row.contains(note) => {
                    lost.push(format!("{key}: 201 named {note}, rows {row:?}"));
                }
                Outcome::Forbidden(what) => forbidden.push(format!("{key}: {what}")),
                _ => {}
            }
        }
        let first_201 = outcomes
            .iter()
            .position(|o| matches!(o, Outcome::Created { .. }));
        if let Some(i) = first_201 {
            let replayed = matches!(outcomes[i], Outcome::Created { replayed: true, .. });
            if replayed && !outcomes[..i].contains(&Outcome::Unknown) {
                lies.push(format!("{key}: {outcomes:?}"));
            }
        }
    }
    vec![
        ("operations without exactly one row", not_one),
        ("201s whose row is gone", lost),
        ("\"nothing was done\" said of an attempt that did it", lies),
        ("answers the contract rules out", forbidden),
    ]
}

/// Runs `f` (a blocking cluster call) off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}
