//! The chaos driver. Each round: kills PostgreSQL (`pg_ctl stop -m
//! immediate`, SIGKILL of the postmaster, `pg_ctl stop -m fast`, in
//! turn), holds the outage while checking `/healthz`, restarts it and
//! times each instance's first 201; cuts every connection through the
//! proxy a few times under load; then refuses new connections (and cuts
//! the open ones) for a while, and times the reconnection again. Once, in
//! the middle round, new connections also go unanswered for a while (the
//! instances' connect timeouts answer). On Citus, each round also kills
//! a worker (a crash, then SIGKILL of its postmaster, in turn), holds it
//! down, starts it again and times the first 201s after.

use crate::senders::Tally;
use rand::rngs::StdRng;
use rand::Rng;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::{Postgres, Proxy, Server};

/// The ways PostgreSQL goes away, in turn: a crash, an OOM kill of the
/// postmaster, an administrator's restart.
const KILLS: [&str; 3] = [
    "pg_ctl stop -m immediate",
    "SIGKILL of the postmaster",
    "pg_ctl stop -m fast",
];
const CUTS_PER_ROUND: usize = 4;
/// How long each outage lasts once both instances report it.
const OUTAGE: Duration = Duration::from_millis(1200);

/// What the driver did.
#[derive(Default)]
pub(crate) struct Chaos {
    /// How each kill was done, and the requests out at that moment.
    pub(crate) kills: Vec<(&'static str, usize)>,
    /// The same for each worker's kill, on Citus.
    pub(crate) worker_kills: Vec<(&'static str, usize)>,
    /// The requests out and the connections reset at each cut.
    pub(crate) cuts: Vec<(usize, usize)>,
    /// How long the last processes of the database outlived each kill.
    pub(crate) lingered_ms: Vec<u128>,
    pub(crate) refusals: usize,
    pub(crate) blackholes: usize,
    /// The answers each kill's and refusal's outage saw.
    pub(crate) outage_answers: Vec<usize>,
    /// For each return of the database, the milliseconds until each
    /// instance's first 201.
    pub(crate) reconnects_ms: Vec<[u128; 2]>,
}

/// The database and what stands between it and the instances.
pub(crate) struct Setup {
    pub(crate) cluster: Arc<Postgres>,
    /// Citus's workers behind `cluster`, the coordinator (none on
    /// PostgreSQL).
    pub(crate) workers: Vec<Arc<Postgres>>,
    pub(crate) proxy: Arc<Proxy>,
    pub(crate) servers: Arc<[Server; 2]>,
}

/// Runs `rounds` rounds under the load the senders make.
pub(crate) async fn drive(
    setup: Setup,
    tally: Arc<Tally>,
    rounds: usize,
    mut rng: StdRng,
) -> Chaos {
    let Setup {
        cluster,
        workers,
        proxy,
        servers,
    } = setup;
    let mut chaos = Chaos::default();
    let pause = |rng: &mut StdRng| Duration::from_millis(rng.random_range(100..400));
    let in_flight = || tally.in_flight.load(Ordering::SeqCst);
    for round in 0..rounds {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let way = round % KILLS.len();
        let kind = KILLS[way];
        chaos.kills.push((kind, in_flight()));
        let killed = cluster.clone();
        let lingered = blocking(move || {
            match way {
                0 => killed.kill_immediate(),
                1 => killed.sigkill_postmaster(),
                _ => killed.stop_fast(),
            }?;
            // The database is gone once its last backend is.
            killed.wait_until_gone(Duration::from_secs(30))
        })
        .await
        .unwrap();
        chaos.lingered_ms.push(lingered.as_millis());
        let answers = hold_outage(&servers, &tally, &format!("after {kind}")).await;
        chaos.outage_answers.push(answers);
        let restarted = cluster.clone();
        let back = blocking(move || restarted.restart()).await.unwrap();
        let reconnect = time_reconnect(&tally, back, "after a restart").await;
        chaos.reconnects_ms.push(reconnect);

        if !workers.is_empty() {
            tokio::time::sleep(pause(&mut rng)).await;
            let worker = workers[round % workers.len()].clone();
            let way = round % 2;
            chaos.worker_kills.push((KILLS[way], in_flight()));
            let killed = worker.clone();
            blocking(move || {
                match way {
                    0 => killed.kill_immediate(),
                    _ => killed.sigkill_postmaster(),
                }?;
                killed.wait_until_gone(Duration::from_secs(30))
            })
            .await
            .unwrap();
            // Its callers are refused meanwhile; the others' 201s go on.
            tokio::time::sleep(OUTAGE).await;
            let restarted = worker.clone();
            let back = blocking(move || restarted.restart()).await.unwrap();
            tally.arm();
            let reconnect = time_reconnect(&tally, back, "after a worker's restart").await;
            chaos.reconnects_ms.push(reconnect);
        }

        for _ in 0..CUTS_PER_ROUND {
            tokio::time::sleep(pause(&mut rng)).await;
            chaos.cuts.push((in_flight(), proxy.cut()));
        }

        tokio::time::sleep(pause(&mut rng)).await;
        proxy.refuse(true);
        chaos.cuts.push((in_flight(), proxy.cut()));
        let answers = hold_outage(&servers, &tally, "while connections are refused").await;
        chaos.outage_answers.push(answers);
        proxy.refuse(false);
        let back = Instant::now();
        chaos.refusals += 1;
        let reconnect = time_reconnect(&tally, back, "after a refusal").await;
        chaos.reconnects_ms.push(reconnect);

        if round == rounds / 2 {
            tokio::time::sleep(pause(&mut rng)).await;
            proxy.blackhole(true);
            chaos.cuts.push((in_flight(), proxy.cut()));
            // Requests wait for the connect timeout: none starts and
            // ends within the outage, so none is counted.
            hold_outage(&servers, &tally, "while connections go unanswered").await;
            proxy.blackhole(false);
            proxy.cut();
            let back = Instant::now();
            chaos.blackholes += 1;
            let reconnect = time_reconnect(&tally, back, "after a blackhole").await;
            chaos.reconnects_ms.push(reconnect);
        }
    }
    chaos
}

/// Runs `f` (a blocking cluster call) off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// Waits until `/healthz` of both instances answers 503, then holds the
/// outage for [`OUTAGE`], during which every answer must be a 503 with
/// `Retry-After` and `/healthz` still 503. Arms the first-201 clocks.
/// How many answers were sent and received during the outage.
async fn hold_outage(servers: &[Server; 2], tally: &Tally, what: &str) -> usize {
    let before = tally.outage_answers.load(Ordering::SeqCst);
    tokio::join!(until_503(&servers[0], what), until_503(&servers[1], what));
    tally.arm();
    tally.outage.store(true, Ordering::SeqCst);
    tokio::time::sleep(OUTAGE).await;
    let health = tokio::join!(servers[0].health(), servers[1].health());
    for health in [health.0, health.1] {
        let health = health.unwrap();
        if health != 503 {
            tally
                .kinds
                .forbid(format!("/healthz answered {health} {what}"));
        }
    }
    // What the alerts read: neither healthy nor reaching its database.
    for server in servers {
        let metrics = server.metrics().await.unwrap();
        let gauges = (
            metrics.counter("healthy", &[]).unwrap(),
            metrics.counter("database_reachable", &[]).unwrap(),
        );
        if gauges != (0.0, 0.0) {
            tally.kinds.forbid(format!(
                "healthy, database_reachable were {gauges:?} {what}"
            ));
        }
    }
    tally.outage.store(false, Ordering::SeqCst);
    tally.outage_answers.load(Ordering::SeqCst) - before
}

/// Polls `/healthz` until it answers 503 (15 s at most).
async fn until_503(server: &Server, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while server.health().await.unwrap() != 503 {
        assert!(Instant::now() < deadline, "/healthz is not 503 {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long after `back` each instance answered its first 201.
async fn time_reconnect(tally: &Tally, back: Instant, what: &str) -> [u128; 2] {
    let deadline = back + Duration::from_secs(30);
    loop {
        let firsts = tally.first_201s();
        if let [Some(a), Some(b)] = firsts {
            return [a, b].map(|t| t.saturating_duration_since(back).as_millis());
        }
        assert!(
            Instant::now() < deadline,
            "no 201 from each instance within 30 s {what}: {firsts:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
