//! CONTRACT section 3, a record's life and a lease, against clocks that
//! jump and hosts that sleep: a wall clock set a day off, while the server
//! runs or between two of its runs, neither holds a lease past
//! `--operation-lease` nor lets a record expire early; and a copy kept in
//! memory is not served past the record's life because the host was
//! suspended meanwhile. The server's clocks are stepped by the test kit's
//! `LD_PRELOAD` shim ([`SteppedClock`]), the production binary unchanged.
//! PostgreSQL measures both on the database's `now()`, so there the wall
//! clock of the server's host moves nothing either; every test runs on both.

use crate::helpers::{pay_until_free, visa, Checkout, Reply, TestApp};
use serde_json::Value;
use testkit::{new_key, Server, ServerBuilder, SteppedClock};

/// A day and an hour: past the default `--key-ttl` of a day.
const DAY_AND_AN_HOUR_MS: i64 = 25 * 3_600_000;

/// `builder` on `clock`.
fn on(clock: &SteppedClock, mut builder: ServerBuilder) -> ServerBuilder {
    for (name, value) in clock.env().unwrap() {
        builder = builder.env(name, value);
    }
    builder
}

/// A process whose clock ran a day ahead left its operation at a recovery
/// point under a lease (it exited before the provider was called); the
/// clock is set right and the server restarted. The lease runs out after
/// `--operation-lease` (2 s), not after a day: the retry resumes it.
#[tokio::test]
async fn a_lease_taken_while_the_clock_was_a_day_ahead_runs_out_on_time_once_it_is_set_right() {
    let clock = SteppedClock::new().unwrap();
    clock.set_wall(DAY_AND_AN_HOUR_MS).unwrap();
    let mut shop = Checkout::start_with(on(
        &clock,
        Server::builder().flags(["--operation-lease", "2s", "--complete-interval", "1h"]),
    ))
    .await;
    let key = new_key();
    shop.pay_and_exit(&key, &visa(5100), "exit-before-provider")
        .await;
    clock.set_wall(0).unwrap();
    shop.app.server.restart().unwrap();
    let pending = shop.app.charges().await;
    // Within 15 s, or pay_until_free gives up: the lease held.
    let resumed = pay_until_free(&shop, &key, &visa(5100)).await;
    shop.assert_resumed_by_retry(&resumed, &pending[0]).await;
}

/// Pays once with `key` as `app`'s caller, steps the wall clock by
/// `step_ms` (the server keeps running, then restarts, so nothing of it is
/// answered from memory), and pays again: the retry is a replay of the same
/// charge, since no time passed for the record.
async fn a_step_of_the_wall_clock_expires_nothing(start_ms: i64, step_ms: i64) {
    let clock = SteppedClock::new().unwrap();
    clock.set_wall(start_ms).unwrap();
    let mut app = TestApp::start(on(&clock, Server::builder())).await;
    let key = new_key();
    let first = app.charge(&key, 2500).await;
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();
    clock.set_wall(start_ms + step_ms).unwrap();
    app.server.kill().unwrap();
    app.server.restart().unwrap();
    let retry = app.charge(&key, 2500).await;
    assert_eq!(retry.status(), 201);
    assert_eq!(
        retry
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..]),
        "the record was live: a replay"
    );
    let retry: Value = retry.json().await.unwrap();
    assert_eq!(
        retry["id"], first["id"],
        "the same charge, not a second one"
    );
    assert_eq!(app.charges().await.len(), 1, "one charge");
}

/// A record written while the clock ran a day behind is not expired once
/// the clock is set right: the retry replays it instead of charging again.
#[tokio::test]
async fn a_record_written_while_the_clock_was_a_day_behind_does_not_expire_when_it_is_set_right() {
    a_step_of_the_wall_clock_expires_nothing(-DAY_AND_AN_HOUR_MS, DAY_AND_AN_HOUR_MS).await;
}

/// A wall clock that jumps a day ahead expires nothing either.
#[tokio::test]
async fn a_wall_clock_that_jumps_a_day_ahead_expires_no_record() {
    a_step_of_the_wall_clock_expires_nothing(0, DAY_AND_AN_HOUR_MS).await;
}

/// A copy in memory outlives nothing: a finished record is kept in memory
/// (a different request under its key is refused from that copy while the
/// database no longer has the record); the host is then suspended for
/// longer than the record's life. Afterwards the copy is not served: the
/// database decides, and since it has no record the request runs.
#[tokio::test]
async fn a_copy_in_memory_is_not_served_after_the_host_slept_past_the_records_life() {
    let clock = SteppedClock::new().unwrap();
    let app = TestApp::start(on(&clock, Server::builder().flags(["--key-ttl", "30s"]))).await;
    let key = new_key();
    assert_eq!(app.charge(&key, 100).await.status(), 201);
    // Gone from the database (as a sweeper after its expiry would leave
    // it); the copy in memory still answers for it.
    app.sql(
        "DELETE FROM idempotency_keys",
        "DELETE FROM idempotency_keys",
    )
    .await;
    assert_eq!(
        app.charge(&key, 200).await.status(),
        422,
        "the copy in memory answers while the record's life lasts"
    );
    clock.suspend(60_000).unwrap();
    let after = app.charge(&key, 200).await;
    assert_eq!(
        after.status(),
        201,
        "the copy outlived the record's life: {}",
        after.text().await.unwrap()
    );
}

/// What a reboot does to the SQLite database's clock: the boot clock
/// starts again, so the server goes on from the clock's last stored
/// reading. The boot is simulated by the `clock` row's boot id (the next
/// start sees a boot other than the one that stored it) and a wall clock
/// set `wall_ms` off, as a hardware clock kept in local time or a VM
/// restored with a skewed clock leaves it.
async fn an_answered_charge_survives_a_reboot_with_the_wall_clock_off_by(wall_ms: i64) {
    let clock = SteppedClock::new().unwrap();
    let mut shop = Checkout::start_with(on(&clock, Server::builder())).await;
    if shop.app.server.database().is_postgres() {
        testkit::skipped("SQLite only: the database host's now() decides on PostgreSQL");
        return;
    }
    let key = new_key();
    let first = shop.pay(&key, &visa(3100)).await;
    shop.assert_charged_once(&first).await;
    shop.app.server.kill().unwrap();
    shop.app
        .sql("UPDATE clock SET boot_id = 'the boot before'", "")
        .await;
    clock.set_wall(wall_ms).unwrap();
    shop.app.server.restart().unwrap();

    let retry = shop.pay(&key, &visa(3100)).await;
    assert!(
        retry.replayed,
        "the record lives on: {}",
        String::from_utf8_lossy(&retry.body)
    );
    assert_eq!(retry.body, first.body);
    assert_eq!(shop.ledger().await.len(), 1, "charged once");
}

/// A boot whose wall clock reads a day and an hour ahead expires nothing:
/// an earlier release moved the database's clock on by the wall clock's
/// jump, expired every record at once, and the retry of an answered
/// charge charged the card a second time.
#[tokio::test]
async fn a_reboot_with_the_wall_clock_25_hours_ahead_expires_nothing() {
    an_answered_charge_survives_a_reboot_with_the_wall_clock_off_by(DAY_AND_AN_HOUR_MS).await;
}

/// Nor does one whose wall clock reads a day and an hour behind.
#[tokio::test]
async fn a_reboot_with_the_wall_clock_25_hours_behind_expires_nothing() {
    an_answered_charge_survives_a_reboot_with_the_wall_clock_off_by(-DAY_AND_AN_HOUR_MS).await;
}

/// The database file copied (with its WAL) to another host whose clock is
/// a day and an hour ahead: the server started there replays the charge's
/// record, and its provider charges nothing.
#[tokio::test]
async fn a_database_copied_to_a_host_25_hours_ahead_expires_nothing() {
    let mut shop = Checkout::start(&[]).await;
    let Some(path) = shop.app.sqlite_file() else {
        testkit::skipped("SQLite only: a copy of the database file");
        return;
    };
    let key = new_key();
    let first = shop.pay(&key, &visa(3200)).await;
    shop.assert_charged_once(&first).await;
    shop.app.server.kill().unwrap();

    let elsewhere = tempfile::tempdir().unwrap();
    let copy = elsewhere.path().join("shop.db");
    for suffix in ["", "-wal"] {
        let from = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
        if from.exists() {
            std::fs::copy(&from, format!("{}{suffix}", copy.display())).unwrap();
        }
    }
    let database = testkit::Database::sqlite_at(&copy);
    database
        .sql("UPDATE clock SET boot_id = 'the other host'", "")
        .await
        .unwrap();
    let clock = SteppedClock::new().unwrap();
    clock.set_wall(DAY_AND_AN_HOUR_MS).unwrap();
    let there = Checkout::start_with(on(&clock, Server::builder().database(database))).await;
    // The same shopper (the same token) retries there.
    let sent = there
        .app
        .post_as(&shop.app.token, "/charges", &key, &visa(3200))
        .await;
    let retry = Reply::read(sent).await;
    assert!(retry.replayed, "{}", String::from_utf8_lossy(&retry.body));
    assert_eq!(retry.body, first.body);
    assert!(there.ledger().await.is_empty(), "nothing charged there");
}
