//! What an operator does to the database: a restore, a
//! point-in-time recovery or an asynchronous failover sets it back and it
//! forgets answered work; a backup renamed over the live SQLite file. None
//! of it charges a card twice.
//!
//! A run the database forgot sends the provider the downstream key it sent
//! before (derived from caller, key, request and the key's generation, a
//! counter an expired record's tombstone keeps), with the same request, so
//! the provider answers it with the charge it made: one provider charge per
//! operation. A key sent again after its record expired is the key's next
//! generation, a new operation (CONTRACT section 3), and a new charge.

use crate::helpers::{assert_charged, visa, Checkout, TestApp};
use serde_json::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use testkit::new_key;

/// The tables a restore sets back: the keys' records and tombstones, the
/// charges, the outbox.
const TABLES: [&str; 3] = ["idempotency_keys", "charges", "outbox"];

/// A backup of the database, taken behind the server's back (each table
/// copied beside it, on either backend).
async fn back_up(shop: &Checkout) {
    let sql: String = TABLES
        .iter()
        .map(|t| {
            format!(
                "DROP TABLE IF EXISTS backup_{t}; CREATE TABLE backup_{t} AS SELECT * FROM {t};"
            )
        })
        .collect();
    shop.app.sql(&sql, &sql).await;
}

/// The backup restored while the server is stopped, as an operator
/// restores one (or a point-in-time recovery, or the promotion of an
/// asynchronous standby, sets the database back): everything written
/// since is forgotten.
async fn restore(shop: &mut Checkout) {
    shop.app.server.kill().unwrap();
    let sql: String = TABLES
        .iter()
        .map(|t| format!("DELETE FROM {t}; INSERT INTO {t} SELECT * FROM backup_{t};"))
        .collect();
    shop.app.sql(&sql, &sql).await;
    shop.app.server.restart().unwrap();
}

/// A charge the database forgot (a restore to a backup from before it) is
/// retried by the shopper: one provider charge, adopted; one charge row;
/// the retry answers the provider's charge it made the first time. An
/// earlier release sent a new downstream key and charged the card again.
#[tokio::test]
async fn a_retry_of_a_charge_the_database_forgot_charges_the_card_once() {
    let mut shop = Checkout::start(&[]).await;
    back_up(&shop).await;
    let key = new_key();
    let first = shop.pay(&key, &visa(4200)).await;
    let made = shop.assert_charged_once(&first).await;

    restore(&mut shop).await;
    let retry = shop.pay(&key, &visa(4200)).await;
    assert!(!retry.replayed, "the record was forgotten: it ran again");
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1, "one provider charge: {ledger:?}");
    let charge = assert_charged(&retry, &ledger[0].id);
    assert_eq!(charge["provider_charge"], made["provider_charge"]);
    assert_eq!(shop.app.charges().await, vec![charge]);
}

/// The key's lives: a key sent again after its record expired (and was
/// swept to a tombstone) is a new operation and a new provider charge;
/// that second life, forgotten in turn, is retried without a third.
#[tokio::test]
async fn a_key_sent_again_after_its_record_expired_is_a_new_charge_and_its_retry_is_not() {
    let mut shop = Checkout::start(&["--key-ttl", "1s", "--sweep-interval", "1s"]).await;
    let key = new_key();
    let first = shop.pay(&key, &visa(900)).await;
    shop.assert_charged_once(&first).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while shop.app.records().await > 0 {
        assert!(Instant::now() < deadline, "the record was never swept");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(shop.app.count("idempotency_keys").await, 1, "its tombstone");

    back_up(&shop).await;
    let second = shop.pay(&key, &visa(900)).await;
    assert!(!second.replayed, "a new operation");
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 2, "a new charge: {ledger:?}");
    let second_charge = assert_charged(&second, &ledger[0].id);
    assert_ne!(
        second_charge["provider_charge"],
        first.json()["provider_charge"]
    );

    // A restore to the backup between the two lives forgets the second
    // (its tombstone of the first stays), and the shopper retries it.
    restore(&mut shop).await;
    let retry = shop.pay(&key, &visa(900)).await;
    assert_eq!(shop.ledger().await.len(), 2, "no third charge");
    assert_eq!(
        assert_charged(&retry, &ledger[0].id)["provider_charge"],
        second_charge["provider_charge"]
    );
}

/// The SQLite restore procedure of docs/OPERATIONS.md, followed to the
/// letter: a backup taken while the server runs (`VACUUM INTO`), then
/// charges made after it, then the server stopped, the database's files
/// (`shop.db`, `-wal`, `-shm`) moved aside and the backup copied in, and
/// the server started. The restored database is the backup, and a retry
/// of a charge made after the backup (which it forgot) charges nothing
/// more.
#[tokio::test]
async fn the_documented_sqlite_restore_restores_the_backup_and_charges_nothing_twice() {
    let mut shop = Checkout::start(&[]).await;
    let Some(path) = shop.app.sqlite_file() else {
        // PostgreSQL restores are pg_basebackup's and PITR's: the tests above.
        testkit::skipped("SQLite only: a copy of the database file");
        return;
    };
    let before = new_key();
    shop.pay(&before, &visa(100)).await;
    let backup = path.with_file_name("backup.db");
    let vacuum = format!("VACUUM INTO '{}';", backup.display());
    shop.app.sql(&vacuum, "SQLite only").await;
    let after = new_key();
    let forgotten = shop.pay(&after, &visa(200)).await;
    assert_eq!(forgotten.status, 201);

    shop.app.server.kill().unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", path.display()));
        if file.exists() {
            std::fs::rename(&file, format!("{}.replaced", file.display())).unwrap();
        }
    }
    std::fs::copy(&backup, &path).unwrap();
    shop.app.server.restart().unwrap();

    let charges: Vec<Value> = shop.app.charges().await;
    assert_eq!(charges.len(), 1, "the backup's charge alone: {charges:#?}");
    let retry = shop.pay(&after, &visa(200)).await;
    assert_eq!(retry.status, 201);
    assert!(
        !retry.replayed,
        "the backup forgot the record: it ran again"
    );
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 2, "no third provider charge: {ledger:?}");
    assert_eq!(
        retry.json()["provider_charge"],
        forgotten.json()["provider_charge"]
    );
}

/// A backup renamed over the live SQLite file while the server runs, with
/// the live file's WAL beside it (frames not yet checkpointed): the server
/// makes the replacement safe, copying the old file's WAL into the old
/// file and emptying it before it opens the new one. The database it then
/// serves is the backup, whole (SQLite's integrity check passes), plus
/// what was written after. An earlier release opened the new file with
/// the old WAL and served the restore mixed with what it was to undo.
#[tokio::test]
async fn a_backup_renamed_over_the_live_file_is_served_as_it_is() {
    let app = TestApp::spawn().await;
    let Some(path) = app.sqlite_file() else {
        testkit::skipped("SQLite only: a file renamed over the live one");
        return;
    };
    for amount in 1..=5 {
        assert_eq!(app.charge(&new_key(), amount).await.status(), 201);
    }
    let backup = path.with_file_name("backup.db");
    let vacuum = format!("VACUUM INTO '{}';", backup.display());
    app.sql(&vacuum, "SQLite only").await;
    // After the backup: frames in the live file's WAL, which the restore
    // is to undo.
    for amount in 6..=40 {
        assert_eq!(app.charge(&new_key(), amount).await.status(), 201);
    }
    assert!(
        charges_in_the_main_file_alone(&path) < 40,
        "every charge was checkpointed into the main file: no WAL frames to undo"
    );
    std::fs::rename(&backup, &path).unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        let answer = app.charge(&new_key(), 41).await;
        if answer.status() == 201 {
            break answer;
        }
        assert_eq!(answer.status(), 503, "{}", answer.text().await.unwrap());
        assert!(
            Instant::now() < deadline,
            "the replacement never became safe"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let after: Value = after.json().await.unwrap();
    let amounts: Vec<i64> = app
        .charges()
        .await
        .iter()
        .map(|c| c["amount"].as_i64().unwrap())
        .collect();
    assert_eq!(
        amounts,
        [41, 5, 4, 3, 2, 1],
        "the backup, then the new charge"
    );
    assert_eq!(after["amount"], 41);
    assert_eq!(app.server.database().integrity().unwrap(), "ok");
}

/// The charges a copy of the SQLite file holds without its WAL: those not
/// checkpointed yet are missing (all of them, and the table too, when
/// nothing was).
fn charges_in_the_main_file_alone(path: &std::path::Path) -> i64 {
    let copy = path.with_file_name("main-file-alone.db");
    std::fs::copy(path, &copy).unwrap();
    let conn = rusqlite::Connection::open(&copy).unwrap();
    let table: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'charges'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    let count = if table == 0 {
        0
    } else {
        conn.query_row("SELECT count(*) FROM charges", [], |row| row.get(0))
            .unwrap()
    };
    drop(conn);
    std::fs::remove_file(&copy).unwrap();
    count
}
