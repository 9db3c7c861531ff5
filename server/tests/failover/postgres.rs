//! What the orchestrator does to PostgreSQL beyond the test kit: the WAL
//! sender's pid and signals, the sessions waiting for the standby, and
//! waiting for replication to stream.

use crate::Standby;
use std::time::{Duration, Instant};
use testkit::{Database, Postgres};

/// `pg_terminate_backend` for every session whose COMMIT waits for the
/// synchronous standby; the statements they waited in (the start of each),
/// so a run shows which phases it ended.
pub(crate) async fn terminate_sync_waiters(primary: &Postgres) -> Vec<String> {
    signal_sync_waiters(primary, "pg_terminate_backend").await
}

/// `pg_cancel_backend` for every session whose COMMIT waits for the
/// synchronous standby: PostgreSQL then answers each COMMIT with success
/// and a WARNING (committed locally only). The statements they waited in.
pub(crate) async fn cancel_sync_waiters(primary: &Postgres) -> Vec<String> {
    signal_sync_waiters(primary, "pg_cancel_backend").await
}

/// `function(pid)` for every session waiting for the synchronous standby;
/// the statements they waited in.
async fn signal_sync_waiters(primary: &Postgres, function: &str) -> Vec<String> {
    let (client, connection) = tokio_postgres::connect(&primary.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let rows = client
        .query(
            &format!(
                "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 40), {function}(pid) \
                 FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
            ),
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|row| row.get::<_, String>(0)).collect()
}

/// The pid of the primary's WAL sender (its one standby's).
pub(crate) async fn walsender(primary: &Postgres) -> u32 {
    let (client, connection) = tokio_postgres::connect(&primary.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let row = client
        .query_one("SELECT pid FROM pg_stat_replication", &[])
        .await
        .unwrap();
    u32::try_from(row.get::<_, i32>(0)).unwrap()
}

pub(crate) fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// Waits until the standby streams (and, synchronous, is the sync one).
pub(crate) async fn wait_for_replication(primary: &Postgres, standby: Standby) {
    let (client, connection) = tokio_postgres::connect(&primary.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let want = match standby {
        Standby::Synchronous => "sync",
        Standby::Asynchronous => "async",
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = client
            .query(
                "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'",
                &[],
            )
            .await
            .unwrap();
        if rows.iter().any(|r| r.get::<_, &str>(0) == want) {
            return;
        }
        assert!(Instant::now() < deadline, "the standby never streamed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A primary with a standby (`standby`: its commits wait for it, or not),
/// a fresh database on it, and the URL that names both hosts.
pub(crate) async fn cluster(standby: Standby) -> (Postgres, Postgres, Database) {
    let settings: &[&str] = match standby {
        Standby::Synchronous => &["synchronous_standby_names=*"],
        Standby::Asynchronous => &[],
    };
    let primary = Postgres::start_with(settings).unwrap();
    // A standby that looks for new WAL often: its promotion is quick.
    let replica = primary
        .standby(&["wal_retrieve_retry_interval=100ms"])
        .unwrap();
    wait_for_replication(&primary, standby).await;
    let made = Database::postgres_on(&primary.url()).await.unwrap();
    let url = format!(
        "postgres://postgres@{},{}/{}?target_session_attrs=read-write",
        primary.addr(),
        replica.addr(),
        made.postgres_name().unwrap()
    );
    (primary, replica, Database::postgres_url(url))
}
