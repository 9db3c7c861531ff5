//! The database itself failing: exactly once while PostgreSQL is killed
//! and restarted and the network to it is cut and refused.
//!
//! Two server instances (`--durability full`) run on a PostgreSQL cluster
//! of the test's own (never the shared `TEST_POSTGRES_URL` server),
//! through a TCP proxy. Operations keep coming for the whole test
//! ([`senders`]) while a chaos driver ([`chaos`]) kills and stops
//! PostgreSQL, cuts and refuses its connections, and checks that while
//! the database is gone `/healthz` of both instances and every answer is a 503 with
//! `Retry-After`, and that each instance serves 201s within 5 s of its
//! return, by itself.
//!
//! At the end ([`verdict`]) every operation with a 201 has exactly one
//! charge, the one it was answered; the others have zero or one, and a
//! final retry of every operation answers 201 and leaves exactly one. No
//! 500 ever; every 503 has `Retry-After`. And "nothing was done" is never
//! said of a request that did something: an operation's charges carry its
//! own description, so one with a charge but no attempt that could have
//! made it (a 201 first run, a 503 "outcome unknown", a lost answer) was
//! lied about, whether its commit broke with the connection or not.
//!
//! On a Citus cluster of the test's own, the coordinator goes through the
//! same, and each round one worker is killed too (a crash, then SIGKILL
//! of its postmaster, in turn) and started again: meanwhile only its
//! callers are refused, and 201s come back within 5 s of its return.
//!
//! `OUTAGE_ROUNDS` (default 10) sets the rounds, `OUTAGE_SEED` replays
//! the schedule (printed, and repeated on failure). Needs PostgreSQL
//! installed: `scripts/test.sh` runs it in its PostgreSQL step with
//! `--include-ignored`, and on Citus in its Citus step.

mod chaos;
mod senders;
mod verdict;

use chaos::Setup;
use rand::rngs::StdRng;
use rand::SeedableRng;
use senders::{Tally, OUTCOME_UNKNOWN};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::{Caller, Citus, Database, Postgres, Proxy, Server};

const CALLERS: usize = 4;
/// The bound: 201s again within this of the database's return.
const RECONNECT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL installed (scripts/test.sh runs it with --include-ignored)"]
async fn postgres_killed_and_cut_off_loses_duplicates_and_misreports_nothing() {
    let cluster = Arc::new(Postgres::start().unwrap());
    harness(cluster, Vec::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Citus installed (scripts/test.sh runs it in its Citus step)"]
async fn citus_nodes_killed_and_cut_off_lose_duplicates_and_misreport_nothing() {
    let citus = Citus::start(2).await.unwrap();
    harness(citus.coordinator.clone(), citus.workers.clone()).await;
}

/// The harness on `cluster`, the database the servers reach through the
/// proxy, with `workers` behind it on Citus.
async fn harness(cluster: Arc<Postgres>, workers: Vec<Arc<Postgres>>) {
    let rounds: usize = env_or("OUTAGE_ROUNDS", 10);
    let seed: u64 = env_or("OUTAGE_SEED", rand::random());
    println!("outage harness: OUTAGE_SEED={seed} OUTAGE_ROUNDS={rounds}");
    let report_seed = SeedOnPanic(seed);

    let proxy = Arc::new(Proxy::start(cluster.addr()).unwrap());
    let database = Database::postgres_on(&Postgres::url_at(proxy.addr()))
        .await
        .unwrap();
    // `full` is synchronous_commit=on: an answered commit survives a
    // PostgreSQL crash. (`relaxed` loses the last ones, answered 201s
    // included: this test finds them.)
    let start = || {
        Server::builder()
            .durability_full()
            .database(database.clone())
            .start()
    };
    let servers = Arc::new([start().await.unwrap(), start().await.unwrap()]);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let callers = |token: &str| -> [Caller; 2] {
        [0, 1].map(|i| servers[i].bearer(token).with_http(http.clone()))
    };
    let tokens: Vec<String> = (0..CALLERS).map(|_| testkit::new_token()).collect();
    let tally = Arc::new(Tally::default());
    let started = Instant::now();

    let setup = Setup {
        cluster: cluster.clone(),
        workers,
        proxy: proxy.clone(),
        servers: servers.clone(),
    };
    let chaos_rng = StdRng::seed_from_u64(seed ^ 0xc4a05);
    let driver = tokio::spawn(chaos::drive(setup, tally.clone(), rounds, chaos_rng));
    let operations =
        senders::keep_coming(&tokens, callers, &tally, seed, || driver.is_finished()).await;
    let chaos = driver.await.unwrap();
    let load = started.elapsed();

    let at = |i: usize| -> Vec<Caller> { tokens.iter().map(|t| callers(t)[i].clone()).collect() };
    let found = verdict::charges(&at(0)).await;
    let verdict = verdict::judge(&operations, &tally, &found).await;
    let after = verdict::charges(&at(1)).await;
    let total: usize = after.values().map(Vec::len).sum();
    let landed = |counts: &mut dyn Iterator<Item = usize>| counts.filter(|n| *n > 0).count();
    println!(
        "outage harness: seed={seed} kills={} (on requests in flight: {}) worker kills={:?} cuts={} \
         (on requests in flight: {}, connections reset: {}) refusals={} blackholes={} operations={} \
         (one-shot: {}) outcome-unknown answers={} charges={total} \
         duplicates={} lost={} lies={} load {:.1}s, total {:.1}s\n\
         kills: {:?}\nms until the last process of the database was gone: {:?}\nanswers during each kill's and refusal's outage (all 503): {:?}\n\
         ms from each return of the database to each instance's first 201: {:?}\n\
         answers by status:\n{}",
        chaos.kills.len(),
        landed(&mut chaos.kills.iter().map(|k| k.1)),
        chaos.worker_kills,
        chaos.cuts.len(),
        landed(&mut chaos.cuts.iter().map(|c| c.0)),
        chaos.cuts.iter().map(|c| c.1).sum::<usize>(),
        chaos.refusals,
        chaos.blackholes,
        operations.len(),
        operations.iter().filter(|op| op.one_shot).count(),
        tally.kinds.counted(OUTCOME_UNKNOWN),
        verdict.duplicates.len(),
        verdict.lost.len(),
        verdict.lies.len(),
        load.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        chaos.kills.iter().map(|k| k.0).collect::<Vec<_>>(),
        chaos.lingered_ms,
        chaos.outage_answers,
        chaos.reconnects_ms,
        tally.kinds.table(),
    );

    // What the instances logged as errors other than the outages' 503s,
    // for a failure's message.
    let errors: Vec<String> = (servers.iter())
        .flat_map(|server| {
            server
                .log_text()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|line| line.contains("ERROR") && !line.contains("status=503"))
        .collect();
    let errors = errors[errors.len().saturating_sub(10)..].join("\n");
    for (what, problems) in [
        ("duplicate charges", &verdict.duplicates),
        ("201s whose charge is gone", &verdict.lost),
        ("\"nothing was done\" said of a charge", &verdict.lies),
        ("final retries that went wrong", &verdict.retries),
        ("answers the contract rules out", &tally.kinds.forbidden()),
    ] {
        assert!(
            problems.is_empty(),
            "{} {what}, first ones:\n{}\nthe instances' last errors:\n{errors}",
            problems.len(),
            problems[..problems.len().min(10)].join("\n")
        );
    }
    let not_one: Vec<(usize, usize)> = (operations.iter())
        .map(|op| (op.id, after.get(&op.description()).map_or(0, Vec::len)))
        .filter(|(_, n)| *n != 1)
        .collect();
    assert!(
        not_one.is_empty(),
        "(op, charges) after the final retries: {not_one:?}"
    );
    assert_eq!(
        total,
        operations.len(),
        "charges that belong to no operation"
    );
    let slow: Vec<&u128> = (chaos.reconnects_ms.iter().flatten())
        .filter(|ms| **ms > RECONNECT.as_millis())
        .collect();
    assert!(
        slow.is_empty(),
        "201s came back later than {RECONNECT:?}: {slow:?} ms"
    );
    assert!(
        chaos.outage_answers.iter().all(|n| *n > 0),
        "an outage no request met: {:?}",
        chaos.outage_answers
    );
    assert!(
        landed(&mut chaos.kills.iter().map(|k| k.1)) * 2 >= chaos.kills.len(),
        "most kills found no request in flight: {:?}",
        chaos.kills
    );
    assert!(
        landed(&mut chaos.cuts.iter().map(|c| c.0)) * 2 >= chaos.cuts.len(),
        "most cuts found no request in flight: {:?}",
        chaos.cuts
    );
    for server in servers.iter() {
        assert_eq!(server.health().await.unwrap(), 200, "/healthz at the end");
    }
    std::mem::forget(report_seed);
}

/// An environment variable parsed, or `default`.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Prints the seed again if the test panics, so the schedule can be replayed.
struct SeedOnPanic(u64);

impl Drop for SeedOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("outage harness FAILED; replay with OUTAGE_SEED={}", self.0);
        }
    }
}
