//! The sweeper: expired records go in small batches, each leaving a
//! tombstone (its key's generation) that goes in turn after
//! `--tombstone-ttl`; live ones stay.

use crate::helpers::{new_key, TestApp};
use std::time::{Duration, Instant};
use testkit::Server;

/// Records expired long ago, written behind the server's back.
const EXPIRED: usize = 350;

/// 350 expired records are swept in batches of at most 100 (each a short
/// writer job, so requests go between them), the metric counts all of
/// them, their tombstones go after `--tombstone-ttl`, and a live record
/// survives every round.
#[tokio::test]
async fn expired_records_are_swept_in_batches_and_live_ones_stay() {
    let app = TestApp::start(
        Server::builder()
            .flags(["--sweep-interval", "1s", "--tombstone-ttl", "2s"])
            .env("RUST_LOG", "info,exactly_once::sweeper=debug"),
    )
    .await;
    let live = new_key();
    assert_eq!(app.charge(&live, 100).await.status(), 201);
    app.sql(
        &format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {EXPIRED})
             INSERT INTO idempotency_keys
               (caller, key, fingerprint, recovery_point, status, body, created_at, expires_at)
             SELECT randomblob(32), 'expired-' || i, randomblob(32), 'finished', 201, x'7b7d', 0, 1
             FROM n;"
        ),
        &format!(
            "INSERT INTO idempotency_keys
               (caller, key, fingerprint, recovery_point, status, body, created_at, expires_at)
             SELECT decode(md5(i::text) || md5(i::text), 'hex'), 'expired-' || i,
                    decode(md5(i::text) || md5(i::text), 'hex'), 'finished', 201, '\\x7b7d'::bytea,
                    now() - interval '2 days', now() - interval '1 day'
             FROM generate_series(1, {EXPIRED}) AS i;"
        ),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.counter("idempotency_records_expired_total", &[]).await < EXPIRED as f64 {
        assert!(Instant::now() < deadline, "the backlog was not swept");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        app.counter("idempotency_records_expired_total", &[]).await,
        EXPIRED as f64
    );
    assert_eq!(app.records().await, 1, "the live record");
    // Their tombstones go once their own time is up (the records expired
    // long ago, so at once).
    while app.count("idempotency_keys").await > 1 {
        assert!(Instant::now() < deadline, "the tombstones stayed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let replay = app.charge(&live, 100).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");

    let log = app.server.log_text();
    let batches: Vec<u64> = log
        .lines()
        .filter(|line| line.contains("swept a batch"))
        .filter_map(|line| {
            line.split("deleted=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .filter(|n| *n > 0)
        .collect();
    assert!(batches.len() >= 4, "{batches:?}");
    assert!(batches.iter().all(|n| *n <= 100), "{batches:?}");
    assert_eq!(batches.iter().sum::<u64>(), EXPIRED as u64);
}
