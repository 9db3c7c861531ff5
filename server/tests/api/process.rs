//! The `server` binary as a process: flags, start-up errors, signals,
//! a crash mid-request, and a database that goes away.

use crate::helpers::{assert_problem, assert_ran, new_key};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use testkit::{Binary, Caller, Database, Server};
use tokio::task::JoinHandle;

/// `POST /charges` of 49.99 usd as `caller` with `key`, and `X-Chaos` when
/// given.
async fn charge(
    caller: &Caller,
    key: &str,
    chaos: Option<&str>,
) -> reqwest::Result<reqwest::Response> {
    let headers: &[(&str, &str)] = match &chaos {
        Some(chaos) => &[("X-Chaos", chaos)],
        None => &[],
    };
    caller
        .post_keyed_with(
            "/charges",
            key,
            &json!({"amount": 4999, "currency": "usd"}),
            headers,
        )
        .await
}

/// A caller's charges; panics when they cannot be listed.
async fn charges(caller: &Caller) -> Vec<serde_json::Value> {
    caller
        .charges()
        .await
        .unwrap_or_else(|e| panic!("listing the charges: {e:#}"))
}

/// A chaos server and a charge whose answer is delayed `delay_ms` after
/// its commit, in flight: it has committed by the time this returns.
async fn server_with_a_delayed_answer(
    delay_ms: u64,
) -> (Server, JoinHandle<reqwest::Result<reqwest::Response>>) {
    let server = Server::builder().chaos().start().await.unwrap();
    let alice = server.caller();
    let chaos = format!("delay-after-commit={delay_ms}");
    let slow = {
        let alice = alice.clone();
        tokio::spawn(async move { charge(&alice, &new_key(), Some(&chaos)).await })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while charges(&alice).await.is_empty() {
        assert!(Instant::now() < deadline, "the charge never committed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (server, slow)
}

/// The delayed answer comes, a 201, then the server exits 0.
async fn assert_answered_then_exited_zero(
    mut server: Server,
    slow: JoinHandle<reqwest::Result<reqwest::Response>>,
) {
    let answer = slow
        .await
        .unwrap()
        .expect("the in-flight request is answered");
    assert_eq!(answer.status(), 201);
    let status = server.wait_for_exit(Duration::from_secs(10)).unwrap();
    assert!(status.success(), "{status}");
}

fn run_to_exit(args: &[&str]) -> (i32, String) {
    let out = Command::new(Binary::server().path().unwrap())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the server with `args`, which it must refuse: its exit code and
/// stderr; a server still running after 10 s is stopped and fails the test.
fn refused_within(args: &[&str]) -> (i32, String) {
    let mut child = Command::new(Binary::server().path().unwrap())
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: started instead of being refused");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the server with `args` to its exit: asserts a non-zero exit and
/// exactly one `error:` line on stderr, which names each cause once.
fn assert_exits_non_zero_with_one_error_line(args: &[&str]) {
    let (code, stderr) = run_to_exit(args);
    assert_ne!(code, 0, "{args:?}");
    let lines: Vec<_> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
    serve::assert_each_cause_once(lines[0]);
}

/// A bad flag: non-zero exit and a one-line error.
#[test]
fn a_bad_flag_exits_non_zero_with_one_line() {
    for args in [
        &["--key-ttl", "forever"][..],
        &["--durability", "sometimes"],
        &["--bogus"],
    ] {
        let (code, stderr) = run_to_exit(args);
        assert_ne!(code, 0, "{args:?}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
    }
}

/// SMTP credentials without required TLS (`tls=opportunistic`, where
/// whoever strips STARTTLS reads the password, or plain `smtp://`) end the
/// start with one line naming the TLS to use.
#[test]
fn smtp_credentials_without_required_tls_are_refused_at_start_with_one_line() {
    for url in [
        "smtp://shop:secret@127.0.0.1:2525?tls=opportunistic",
        "smtp://shop:secret@127.0.0.1:2525",
    ] {
        let (code, stderr) = refused_within(&["--listen", "127.0.0.1:0", "--smtp-url", url]);
        assert_ne!(code, 0, "{url}");
        assert_eq!(stderr.trim().lines().count(), 1, "{url}: {stderr}");
        assert!(
            stderr.contains("smtps://") && stderr.contains("tls=required"),
            "{url}: {stderr}"
        );
    }
}

/// `--chaos` (or `CHAOS=1`) on an address that is not loopback ends the
/// start with one line naming `--chaos-on-any-address`, before anything
/// is opened or bound.
#[test]
fn chaos_off_loopback_is_refused_at_start_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("shop.db").display());
    for (args, env) in [
        (&["--chaos", "--listen", "0.0.0.0:0"][..], &[][..]),
        (&[], &[("CHAOS", "1"), ("LISTEN", "0.0.0.0:0")]),
    ] {
        let out = Command::new(Binary::server().path().unwrap())
            .args(args)
            .args(["--database", &database])
            .env_remove("CHAOS_ON_ANY_ADDRESS")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} {env:?}: {stderr}");
        let lines: Vec<_> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(lines.len(), 1, "{args:?} {env:?}: {stderr}");
        assert!(lines[0].contains("--chaos-on-any-address"), "{}", lines[0]);
        assert!(
            !dir.path().join("shop.db").exists(),
            "refused before the database is opened"
        );
    }
}

/// An address it cannot listen on: non-zero exit and a one-line error.
#[test]
fn an_unusable_listen_address_exits_non_zero_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("shop.db").display());
    assert_exits_non_zero_with_one_error_line(&[
        "--listen",
        "256.0.0.1:1",
        "--database",
        &database,
    ]);
}

/// A database that cannot be opened: non-zero exit and a one-line error.
#[test]
fn an_unreachable_database_exits_non_zero_with_one_line() {
    assert_exits_non_zero_with_one_error_line(&[
        "--listen",
        "127.0.0.1:0",
        "--database",
        "sqlite:///proc/no/such/dir/shop.db",
    ]);
}

/// SIGTERM while an answer is delayed after its commit: the server stops
/// accepting at once (a new connection is refused while that answer is
/// still pending, so the signal arrived first), then sends the answer,
/// then exits 0.
#[tokio::test]
async fn sigterm_stops_accepting_then_drains_the_request_in_flight_then_exits_zero() {
    // Signal once the charge is committed and its answer is being delayed.
    let (mut server, slow) = server_with_a_delayed_answer(4000).await;
    server.signal("TERM").unwrap();

    let addr = server.addr();
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        use std::io::ErrorKind::{ConnectionRefused, ConnectionReset};
        let connect = tokio::net::TcpStream::connect(addr);
        match tokio::time::timeout(Duration::from_millis(200), connect).await {
            Ok(Err(e)) if e.kind() == ConnectionRefused => break,
            Ok(Err(e)) if e.kind() != ConnectionReset => panic!("connecting during the drain: {e}"),
            // Accepted, left waiting in the backlog, or reset as the
            // listener closed: not refused yet.
            _ => assert!(
                Instant::now() < deadline,
                "new connections are not refused 2 s after SIGTERM"
            ),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !slow.is_finished(),
        "the delayed answer came before the server stopped accepting"
    );
    assert_answered_then_exited_zero(server, slow).await;
}

/// Ctrl-C (SIGINT) is a graceful stop too: the answer being delayed after
/// its commit is sent, then the process exits 0.
#[tokio::test]
async fn sigint_drains_the_request_in_flight_then_exits_zero() {
    let (mut server, slow) = server_with_a_delayed_answer(1500).await;
    server.signal("INT").unwrap();
    assert!(!slow.is_finished(), "the answer came before the signal");
    assert_answered_then_exited_zero(server, slow).await;
}

/// PostgreSQL that cannot be reached at start: the server exits non-zero
/// with one `error:` line (after the connect timeout), serving nothing.
#[test]
fn an_unreachable_postgresql_at_start_exits_non_zero_with_one_line() {
    let started = Instant::now();
    assert_exits_non_zero_with_one_error_line(&[
        "--listen",
        "127.0.0.1:0",
        "--database",
        "postgres://postgres@127.0.0.1:1/nowhere",
    ]);
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// The database file is replaced while the server runs (a backup restored
/// over it, taken after one charge and before another): the server writes
/// to the new file from then on, replays what the new file holds, and does
/// not replay from memory a record the new file does not have.
#[tokio::test]
async fn a_replaced_database_file_is_the_one_written_and_replayed_from() {
    let database = Database::sqlite().unwrap();
    let db = database.sqlite_path().unwrap().to_owned();
    let backup = db.with_file_name("backup.db");
    let server = Server::builder()
        .database(database.clone())
        .start()
        .await
        .unwrap();
    let alice = server.caller();
    let (kept, lost) = (new_key(), new_key());
    assert_eq!(charge(&alice, &kept, None).await.unwrap().status(), 201);
    database
        .sql(&format!("VACUUM INTO '{}'", backup.display()), "")
        .await
        .unwrap();
    assert_eq!(charge(&alice, &lost, None).await.unwrap().status(), 201);
    // Both are replayed from memory now.
    for key in [&kept, &lost] {
        let r = charge(&alice, key, None).await.unwrap();
        assert_eq!(r.headers()["idempotent-replayed"], "true");
    }

    std::fs::rename(&backup, &db).unwrap();
    let _ = std::fs::remove_file(db.with_file_name("shop.db-wal"));
    // The next write notices the new file.
    assert_eq!(
        charge(&alice, &new_key(), None).await.unwrap().status(),
        201
    );
    let r = charge(&alice, &kept, None).await.unwrap();
    assert_eq!(
        r.headers()["idempotent-replayed"],
        "true",
        "the backup's record"
    );
    let r = charge(&alice, &lost, None).await.unwrap();
    assert_eq!(r.status(), 201);
    assert!(
        r.headers().get("idempotent-replayed").is_none(),
        "a record the new file does not have was replayed from memory"
    );
    // kept, the write that noticed, lost again: all in the new file.
    assert_eq!(database.count("charges").await.unwrap(), 3);
    assert_eq!(charges(&alice).await.len(), 3);
    assert_eq!(server.health().await.unwrap(), 200);
}

/// `exit-after-commit` kills the process after its commit; a new process on
/// the same address and database replays the charge to the retry.
#[tokio::test]
async fn a_process_killed_after_commit_replays_the_charge_after_restart() {
    let mut server = Server::builder().chaos().start().await.unwrap();
    let alice = server.caller();
    let key = new_key();

    let lost = charge(&alice, &key, Some("exit-after-commit")).await;
    assert!(lost.is_err(), "no answer from a dead process");
    let status = server.wait_for_exit(Duration::from_secs(5)).unwrap();
    assert_eq!(status.code(), Some(137));

    server.restart().unwrap();
    let retry = charge(&alice, &key, Some("exit-after-commit"))
        .await
        .unwrap();
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(charges(&alice).await.len(), 1);
}

/// The database file goes away: 503 with Retry-After, /healthz 503, nothing
/// runs. It comes back: the same key runs, once.
#[tokio::test]
async fn a_missing_database_file_answers_503_and_the_key_runs_once_when_it_returns() {
    let database = Database::sqlite().unwrap();
    let db = database.sqlite_path().unwrap().to_owned();
    let aside = db.with_file_name("aside.db");
    let server = Server::builder().database(database).start().await.unwrap();
    let alice = server.caller();
    let first = charge(&alice, &new_key(), None).await.unwrap();
    assert_eq!(first.status(), 201);

    std::fs::rename(&db, &aside).unwrap();
    let key = new_key();
    for _ in 0..3 {
        let r = charge(&alice, &key, None).await.unwrap();
        assert!(r.headers().contains_key("retry-after"));
        assert_problem(r, 503, "unavailable").await;
    }
    assert_eq!(server.health().await.unwrap(), 503);

    std::fs::rename(&aside, &db).unwrap();
    assert_ran(
        &charge(&alice, &key, None).await.unwrap(),
        "it had never run",
    );
    let r = charge(&alice, &key, None).await.unwrap();
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(charges(&alice).await.len(), 2);
    // Writes commit again, so the server says it is healthy again.
    assert_eq!(server.health().await.unwrap(), 200);
}

/// A tmpfs of a few MB, unmounted on drop.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(at: &Path) -> Self {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
            .arg(at)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(
            ok,
            "mounting a tmpfs needs root (this test simulates a full disk)"
        );
        Self(at.to_owned())
    }

    /// Writes a file until the disk is full.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 4096];
        while file.write_all(&chunk).is_ok() {}
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The disk fills mid-load: 503 with Retry-After, /healthz 503, nothing
/// half-written; when space comes back the same keys finish exactly once.
#[tokio::test]
async fn a_full_disk_answers_503_writes_nothing_half_and_the_keys_finish_once_after() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SmallDisk::mount(&dir.path().join("mnt"));
    let database = Database::sqlite_at(dir.path().join("mnt/shop.db"));
    let server = Server::builder().database(database).start().await.unwrap();
    let alice = server.caller();
    let first = charge(&alice, &new_key(), None).await.unwrap();
    assert_eq!(first.status(), 201);

    let filler = disk.fill();
    let (mut answered, mut refused) = (Vec::new(), Vec::new());
    for _ in 0..500 {
        let key = new_key();
        let r = charge(&alice, &key, None).await.unwrap();
        match r.status().as_u16() {
            201 => answered.push(key),
            503 => {
                assert!(r.headers().contains_key("retry-after"));
                assert_problem(r, 503, "unavailable").await;
                refused.push(key);
                if refused.len() == 3 {
                    break;
                }
            }
            other => panic!("unexpected {other}: {}", r.text().await.unwrap()),
        }
    }
    assert_eq!(refused.len(), 3, "a full disk must refuse writes");
    assert_eq!(server.health().await.unwrap(), 503);
    // Nothing half-written: every charge has its record and vice versa, and
    // only the answered keys (plus the first) made charges.
    let count = |table| server.database().count(table);
    let stored = count("charges").await.unwrap();
    assert_eq!(stored, count("idempotency_keys").await.unwrap());
    assert_eq!(stored, answered.len() as i64 + 1);

    std::fs::remove_file(filler).unwrap();
    for key in &refused {
        let r = charge(&alice, key, None).await.unwrap();
        assert_ran(&r, "it never ran while the disk was full");
        let again = charge(&alice, key, None).await.unwrap();
        assert_eq!(again.headers()["idempotent-replayed"], "true");
    }
    assert_eq!(
        charges(&alice).await.len(),
        answered.len() + 1 + refused.len()
    );
    // Writes commit again, so the server says it is healthy again.
    assert_eq!(server.health().await.unwrap(), 200);
}

/// SQLite keeps a savepoint's journal in memory only up to 64 KiB and then
/// spills it to a file in its temporary directory. A container with a
/// read-only root filesystem, or a full `/tmp`, has nowhere to put it, so
/// every job that changes many pages at once (a sweep of 100 records, a
/// charge that splits B-tree pages) failed with its whole batch. The
/// server keeps its temporary files in memory: with a full temporary
/// directory, expired records are still swept and charges still commit.
#[tokio::test]
async fn a_full_temporary_directory_fails_no_sweep_and_no_charge() {
    const EXPIRED: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let temp = SmallDisk::mount(&dir.path().join("tmp"));
    temp.fill();
    let database = Database::sqlite_at(dir.path().join("shop.db"));
    let server = Server::builder()
        .database(database)
        .env("SQLITE_TMPDIR", dir.path().join("tmp"))
        .flags(["--sweep-interval", "1s"])
        .start()
        .await
        .unwrap();
    let alice = server.caller();
    assert_eq!(
        charge(&alice, &new_key(), None).await.unwrap().status(),
        201
    );
    // Random keys and 2 KB answers: one sweep of 100 records changes about
    // as many pages, far past what SQLite journals in memory by default.
    let sql = format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {EXPIRED})
         INSERT INTO idempotency_keys
           (caller, key, fingerprint, recovery_point, status, body, created_at, expires_at)
         SELECT randomblob(32), hex(randomblob(16)), randomblob(32), 'finished', 201,
                randomblob(2000), 0, 1
         FROM n;"
    );
    server.database().sql(&sql, "SQLite only").await.unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    while server.database().records().await.unwrap() > 1 {
        assert!(
            Instant::now() < deadline,
            "expired records were not swept:\n{}",
            server.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for _ in 0..20 {
        assert_eq!(
            charge(&alice, &new_key(), None).await.unwrap().status(),
            201
        );
    }
}
