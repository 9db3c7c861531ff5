//! The `server` binary as a process: flags, start-up errors, signals,
//! a crash mid-request, and a database that goes away.

use crate::helpers::{assert_problem, new_key, new_token};
use reqwest::Client;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::common::{spawn_server, BIN};

/// A `server` process and the address it printed.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(db: &Path, extra: &[&str]) -> Self {
        let database = format!("sqlite://{}", db.display());
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--durability",
            "relaxed",
            "--www",
            "/nonexistent",
        ];
        args.extend(["--database", &database]);
        args.extend_from_slice(extra);
        let (child, base) = spawn_server(&args).expect("the server starts");
        Self { child, base }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn charge(
    client: &Client,
    server: &Server,
    token: &str,
    key: &str,
    chaos: Option<&str>,
) -> reqwest::Result<reqwest::Response> {
    let mut request = client
        .post(server.url("/charges"))
        .bearer_auth(token)
        .header("Idempotency-Key", key)
        .json(&json!({"amount": 4999, "currency": "usd"}));
    if let Some(chaos) = chaos {
        request = request.header("X-Chaos", chaos);
    }
    request.send().await
}

async fn charges(client: &Client, server: &Server, token: &str) -> Vec<Value> {
    crate::common::list_charges(client, &server.base, token).await
}

fn run_to_exit(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
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

/// A database that cannot be opened: non-zero exit and a one-line error.
#[test]
fn an_unreachable_database_exits_non_zero_with_one_line() {
    let (code, stderr) = run_to_exit(&[
        "--listen",
        "127.0.0.1:0",
        "--database",
        "sqlite:///proc/no/such/dir/shop.db",
    ]);
    assert_ne!(code, 0);
    let lines: Vec<_> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
}

/// SIGTERM lets the request in flight finish, then exits 0.
#[tokio::test]
async fn sigterm_drains_the_request_in_flight_then_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("shop.db"), &["--chaos"]);
    let client = Client::new();
    let token = new_token();
    let key = new_key();
    let slow = {
        let (client, url, token, key) = (
            client.clone(),
            server.url("/charges"),
            token.clone(),
            key.clone(),
        );
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(token)
                .header("Idempotency-Key", key)
                .header("X-Chaos", "delay-after-commit=800")
                .json(&json!({"amount": 4999, "currency": "usd"}))
                .send()
                .await
        })
    };
    // Signal once the charge is committed and its answer is being delayed.
    let deadline = Instant::now() + Duration::from_secs(5);
    while charges(&client, &server, &token).await.is_empty() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.signal("TERM");
    let answer = slow
        .await
        .unwrap()
        .expect("the in-flight request is answered");
    assert_eq!(answer.status(), 201);
    assert!(server.wait(Duration::from_secs(10)).success());
}

/// `exit-after-commit` kills the process after its commit; a new process on
/// the same file replays the charge to the retry.
#[tokio::test]
async fn a_process_killed_after_commit_replays_the_charge_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data/shop.db");
    let client = Client::new();
    let token = new_token();
    let key = new_key();

    let mut first = Server::start(&db, &["--chaos"]);
    let lost = charge(&client, &first, &token, &key, Some("exit-after-commit")).await;
    assert!(lost.is_err(), "no answer from a dead process");
    assert_eq!(first.wait(Duration::from_secs(5)).code(), Some(137));

    let second = Server::start(&db, &["--chaos"]);
    let retry = charge(&client, &second, &token, &key, Some("exit-after-commit"))
        .await
        .unwrap();
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(charges(&client, &second, &token).await.len(), 1);
}

/// The database file goes away: 503 with Retry-After, /healthz 503, nothing
/// runs. It comes back: the same key runs, once.
#[tokio::test]
async fn a_missing_database_file_answers_503_and_the_key_runs_once_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shop.db");
    let aside = dir.path().join("aside.db");
    let server = Server::start(&db, &[]);
    let client = Client::new();
    let token = new_token();
    assert_eq!(
        charge(&client, &server, &token, &new_key(), None)
            .await
            .unwrap()
            .status(),
        201
    );

    std::fs::rename(&db, &aside).unwrap();
    let key = new_key();
    for _ in 0..3 {
        let r = charge(&client, &server, &token, &key, None).await.unwrap();
        assert!(r.headers().contains_key("retry-after"));
        assert_problem(r, 503, "unavailable").await;
    }
    let health = client.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 503);

    std::fs::rename(&aside, &db).unwrap();
    let r = charge(&client, &server, &token, &key, None).await.unwrap();
    assert_eq!(r.status(), 201);
    assert!(
        r.headers().get("idempotent-replayed").is_none(),
        "it had never run"
    );
    let r = charge(&client, &server, &token, &key, None).await.unwrap();
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(charges(&client, &server, &token).await.len(), 2);
    // Writes commit again, so the server says it is healthy again.
    let health = client.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
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
    let db = dir.path().join("mnt/shop.db");
    let server = Server::start(&db, &[]);
    let client = Client::new();
    let token = new_token();
    assert_eq!(
        charge(&client, &server, &token, &new_key(), None)
            .await
            .unwrap()
            .status(),
        201
    );

    let filler = disk.fill();
    let (mut answered, mut refused) = (Vec::new(), Vec::new());
    for _ in 0..500 {
        let key = new_key();
        let r = charge(&client, &server, &token, &key, None).await.unwrap();
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
    assert_eq!(
        client
            .get(server.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        503
    );
    // Nothing half-written: every charge has its record and vice versa, and
    // only the answered keys (plus the first) made charges.
    {
        let conn =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let count = |sql: &str| conn.query_row(sql, [], |row| row.get::<_, i64>(0)).unwrap();
        assert_eq!(
            count("SELECT count(*) FROM charges"),
            count("SELECT count(*) FROM idempotency_keys")
        );
        assert_eq!(
            count("SELECT count(*) FROM charges"),
            answered.len() as i64 + 1
        );
    }

    std::fs::remove_file(filler).unwrap();
    for key in &refused {
        let r = charge(&client, &server, &token, key, None).await.unwrap();
        assert_eq!(r.status(), 201);
        assert!(
            r.headers().get("idempotent-replayed").is_none(),
            "it never ran while the disk was full"
        );
        let again = charge(&client, &server, &token, key, None).await.unwrap();
        assert_eq!(again.headers()["idempotent-replayed"], "true");
    }
    assert_eq!(
        charges(&client, &server, &token).await.len(),
        answered.len() + 1 + refused.len()
    );
    // Writes commit again, so the server says it is healthy again.
    assert_eq!(
        client
            .get(server.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}
