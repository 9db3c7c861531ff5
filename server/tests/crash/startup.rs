//! Kills during start-up on fresh databases: the first start migrates the
//! schema (in one transaction, on PostgreSQL under an advisory lock), and a
//! start killed at any moment of it, before, inside or after the migration,
//! must leave a database the next start opens cleanly: healthy, with the
//! inventory of a fresh database, taking reservations and charges.
//!
//! Each round spawns a server on a fresh database, sends it SIGKILL, then
//! starts it again. Half the rounds kill at a random moment up to 1.2
//! times what a whole start takes (measured on the starts that follow);
//! the other half as soon as the log shows the first `migration applied`,
//! with later migrations still to run in the same transaction. Where the kill
//! landed is read in the logs: a killed start that had logged `migration
//! applied` and whose successor applied migrations again was killed inside
//! the migration's transaction; at least one round must land there.
//! `CRASH_STARTS` (default 40) sets the rounds, `CRASH_SEED` replays them.

use crate::knobs::{knob, Seed};
use crate::stock::INVENTORY;
use crate::ONE_AT_A_TIME;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use testkit::{Database, KillAt, KilledStart, Server};

/// What the server logs as it applies one migration, inside the
/// migration's transaction.
const MIGRATED: &str = "migration applied";

/// Where a round's kill landed.
#[derive(Debug, Default)]
struct Landed {
    /// Before any migration was logged (before or while opening the
    /// database, or inside the first migration).
    before_migrating: usize,
    /// After a migration was logged, and the next start migrated again:
    /// inside the transaction, rolled back.
    inside_migration: usize,
    /// After the migration committed, before `listening on`.
    after_migration: usize,
    /// Once it listened.
    listening: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_killed_while_it_starts_on_a_fresh_database_starts_cleanly_the_next_time() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let rounds: usize = knob("CRASH_STARTS", || 40);
    let report_seed = Seed::from_env();
    let seed = report_seed.0;
    println!("killed starts: CRASH_SEED={seed} CRASH_STARTS={rounds}");
    let mut rng = StdRng::seed_from_u64(seed);
    let began = Instant::now();

    // How long a whole start on a fresh database takes here (an average
    // that follows the starts of the rounds).
    let calibration = Instant::now();
    drop(Server::start().await.unwrap());
    let mut whole_start = calibration.elapsed();

    let mut landed = Landed::default();
    for round in 0..rounds {
        let logs = tempfile::tempdir().unwrap();
        let (killed_log, next_log) = (logs.path().join("killed.log"), logs.path().join("next.log"));
        let builder = Server::builder().database(Database::fresh().await.unwrap());
        let at = if round % 2 == 0 {
            KillAt::After(rng.random_range(Duration::ZERO..=whole_start * 6 / 5))
        } else {
            KillAt::Logged(MIGRATED.to_owned())
        };
        let killed = builder
            .clone()
            .log(&killed_log)
            .start_and_kill(&at)
            .await
            .unwrap();
        let next = Instant::now();
        let server = builder.log(&next_log).start().await.unwrap_or_else(|e| {
            panic!(
                "round {round}: a start killed at {at:?} ({killed:?}; it logged:\n{}) \
                 left a database the next start cannot open: {e:#}",
                read(&killed_log)
            )
        });
        whole_start = (whole_start * 3 + next.elapsed()) / 4;

        assert_whole(&server, round).await;
        let migrated = read(&killed_log).contains(MIGRATED);
        let again = read(&next_log).contains(MIGRATED);
        match (killed, migrated, again) {
            (KilledStart::Exited(status), ..) => panic!(
                "round {round}: the start exited on its own ({status}) before the kill:\n{}",
                read(&killed_log)
            ),
            (KilledStart::Listening, ..) => landed.listening += 1,
            (KilledStart::Starting, false, _) => landed.before_migrating += 1,
            (KilledStart::Starting, true, true) => landed.inside_migration += 1,
            (KilledStart::Starting, true, false) => landed.after_migration += 1,
        }
    }
    println!(
        "killed starts: seed={seed} rounds={rounds} whole start {whole_start:?}, kills landed: \
         {landed:?}; in {:.1}s",
        began.elapsed().as_secs_f64()
    );
    // Where the kills landed is read in the log, which `TEST_LOG` sends
    // elsewhere.
    if std::env::var_os("TEST_LOG").is_none() {
        assert!(
            landed.inside_migration > 0,
            "no kill landed inside the migration: {landed:?}"
        );
    }
    std::mem::forget(report_seed);
}

/// A server on a database whose first start was killed is whole: healthy,
/// the stock of a fresh database, and it takes a reservation and a charge.
async fn assert_whole(server: &Server, round: usize) {
    assert_eq!(server.health().await.unwrap(), 200, "round {round}");
    for (item, initial) in INVENTORY {
        assert_eq!(
            server.available(item).await.unwrap(),
            initial,
            "round {round}: {item}"
        );
    }
    let caller = server.caller();
    let reserved = caller
        .post_keyed(
            "/reservations",
            &testkit::new_key(),
            &json!({"item_id": "sku-poster", "quantity": 3}),
        )
        .await
        .unwrap();
    assert_eq!(reserved.status(), 201, "round {round}");
    let charged = caller
        .charge(&json!({"amount": 100, "currency": "usd"}))
        .await
        .unwrap();
    assert_eq!(charged.status(), 201, "round {round}");
}

/// A log file's text (empty if missing).
fn read(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}
