//! Rolling releases (docs/CONTRACT.md section 7: `server
//! migrate`, `--no-migrate`, "a database migrated by a later release"):
//! two real binaries on one database, this release and the next.
//!
//! The next release is this one built with the `next-release` feature
//! (one more expand migration on each backend: a nullable column, and an
//! index, built `CONCURRENTLY` outside any transaction on PostgreSQL), at
//! `target/debug/server-next` (`SERVER_NEXT_BIN` overrides).
//! `scripts/test.sh` builds it:
//!
//! ```sh
//! cargo build -p server --features next-release
//! cp target/debug/server target/debug/server-next
//! ```
//!
//! On SQLite (one file, two processes), and on PostgreSQL with
//! `TEST_POSTGRES_URL`.

use reqwest::Client;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use testkit::load::AnswerKinds;
use testkit::{Binary, Database, Psp, Server};

/// The next release: this one with one more (expand) migration.
const NEXT: Binary = Binary::new(
    "server-next",
    "server --features next-release",
    "SERVER_NEXT_BIN",
);

/// Senders of the load: each runs one operation at a time, retrying it
/// with its key until it is answered 201.
const SENDERS: usize = 8;
/// How long an operation may take, retries included, before the test
/// calls it lost.
const OPERATION_DEADLINE: Duration = Duration::from_secs(60);

/// The instances serving, by name, that the senders spread over.
type Fleet = Arc<RwLock<Vec<(&'static str, String)>>>;

/// What the senders saw, shared.
#[derive(Default)]
struct Load {
    kinds: AnswerKinds,
    /// Answers per instance, by name.
    answered_by: Mutex<BTreeMap<&'static str, usize>>,
    /// Every operation answered 201: (token, key, charge id).
    done: Mutex<Vec<(String, String, String)>>,
    /// Operations that were never answered 201 in time.
    lost: AtomicUsize,
}

/// One caller's charge, sent until answered 201 to whichever instance of
/// the fleet is up, with the same key every time.
async fn operation(http: &Client, fleet: &Fleet, load: &Load, token: &str, key: &str, n: u64) {
    let body =
        json!({"amount": 100 + n % 900, "currency": "usd", "description": format!("op {n}")});
    let deadline = Instant::now() + OPERATION_DEADLINE;
    let mut attempt = 0usize;
    while Instant::now() < deadline {
        let target = {
            let fleet = fleet.read().unwrap();
            fleet[(n as usize + attempt) % fleet.len()].clone()
        };
        attempt += 1;
        let sent = http
            .post(format!("{}/charges", target.1))
            .bearer_auth(token)
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
            .await;
        let (status, answer) = match sent {
            Ok(response) => {
                let status = response.status().as_u16();
                (status, response.json::<Value>().await.unwrap_or_default())
            }
            Err(_) => {
                load.kinds.count("transport error");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        *load
            .answered_by
            .lock()
            .unwrap()
            .entry(target.0)
            .or_default() += 1;
        if status == 201 {
            load.kinds.count("201");
            let id = answer["id"].as_str().unwrap_or_default().to_owned();
            load.done
                .lock()
                .unwrap()
                .push((token.to_owned(), key.to_owned(), id));
            return;
        }
        let kind = answer["type"].as_str().unwrap_or_default().to_owned();
        load.kinds.count(format!("{status} {kind}"));
        if status == 500 || !(status == 409 || status == 503) {
            load.kinds
                .forbid(format!("{key} at {}: {status} {answer}", target.0));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    load.lost.fetch_add(1, Ordering::Relaxed);
}

/// Operations one after another until `stop`, as one customer.
async fn sender(fleet: Fleet, load: Arc<Load>, stop: Arc<AtomicBool>, id: usize) {
    let http = Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let token = testkit::new_token();
    let mut n = id as u64 * 1_000_000;
    while !stop.load(Ordering::Relaxed) {
        let key = testkit::new_key();
        operation(&http, &fleet, &load, &token, &key, n).await;
        n += 1;
    }
}

/// `GET /healthz` of `url` every 50 ms until `stop`: every answer that is
/// not a 200, with its body.
async fn watch_health(url: String, stop: Arc<AtomicBool>) -> Vec<String> {
    let http = Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut unhealthy = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match http.get(format!("{url}/healthz")).send().await {
            Ok(r) if r.status() == 200 => {}
            Ok(r) => {
                let status = r.status();
                unhealthy.push(format!("{status} {}", r.text().await.unwrap_or_default()));
            }
            Err(e) => unhealthy.push(format!("no answer: {e}")),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unhealthy
}

/// The path of the next release's binary, or a panic that says how to
/// build it.
fn next_release() -> std::path::PathBuf {
    NEXT.path().unwrap_or_else(|e| {
        panic!(
            "{e:#}\nbuild the next release with `cargo build -p server --features next-release && \
             cp target/debug/server target/debug/server-next` (scripts/test.sh does)"
        )
    })
}

/// What a binary run to its end printed: exit code, stdout, stderr.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `binary` with `args` (no server variables inherited) until it
/// exits, for at most 60 s.
fn run(binary: &Path, args: &[&str]) -> Ran {
    let mut command = Command::new(binary);
    for name in [
        "DATABASE_URL",
        "NO_MIGRATE",
        "LISTEN",
        "CHAOS",
        "PSP_URL",
        "SMTP_URL",
    ] {
        command.env_remove(name);
    }
    let child = command
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let output = match wait.recv_timeout(Duration::from_secs(60)) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{} {args:?} did not exit within 60 s", binary.display());
        }
    };
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The last line a failed run printed on stderr (its `error:` line).
fn last_line(ran: &Ran) -> &str {
    ran.stderr.lines().last().unwrap_or_default()
}

/// This release serves, under load through the payment provider, while
/// the next release's migration job (`server-next migrate`) migrates the
/// database it serves on; then both serve side by side (the next one
/// started with `--no-migrate`), then the next is stopped (a rollback)
/// and this one goes on. Through all of it this release's `/healthz`
/// stays 200, every operation is answered 201 (none lost, none a 500),
/// each is one charge in the shop and one at the provider, and each
/// customer's charges list them all. An earlier release answered every
/// `/healthz` (and, on SQLite, every request) 503 from the migration on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_deploy_keeps_both_releases_serving_through_migration_overlap_and_rollback() {
    let next = next_release();
    let psp = Psp::start().unwrap();
    let database = Database::fresh().await.unwrap();
    let old = Server::builder()
        .database(database.clone())
        .psp(&psp)
        .start()
        .await
        .unwrap();
    let fleet: Fleet = Arc::new(RwLock::new(vec![("this release", old.base_url())]));
    let load = Arc::new(Load::default());
    let stop_load = Arc::new(AtomicBool::new(false));
    let stop_watch = Arc::new(AtomicBool::new(false));
    let old_health = tokio::spawn(watch_health(old.base_url(), stop_watch.clone()));
    let senders: Vec<_> = (0..SENDERS)
        .map(|i| tokio::spawn(sender(fleet.clone(), load.clone(), stop_load.clone(), i)))
        .collect();
    let started = Instant::now();
    let count = |load: &Load| load.done.lock().unwrap().len();

    // This release alone.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = count(&load);

    // The next release's migration job, under load.
    let url = database.url();
    let migrating = Instant::now();
    let migrated = tokio::task::spawn_blocking({
        let next = next.clone();
        move || run(&next, &["migrate", "--database", &url])
    })
    .await
    .unwrap();
    let migration_took = migrating.elapsed();
    assert_eq!(
        migrated.code,
        Some(0),
        "server-next migrate failed:\n{}",
        migrated.stderr
    );
    assert!(
        migrated.stdout.starts_with("migrated"),
        "{}",
        migrated.stdout
    );
    let (ledger_version, runs_beside) = if database.is_postgres() {
        (5, "runs_beside = 2")
    } else {
        (4, "runs_beside = 3")
    };
    assert_eq!(
        database
            .count_where(
                "schema_migrations",
                &format!("version = {ledger_version} AND {runs_beside}")
            )
            .await
            .unwrap(),
        1,
        "the next release's migration is recorded with what it runs beside"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_migration = count(&load);

    // Both releases serve.
    let mut new = Server::builder()
        .binary(NEXT)
        .database(database.clone())
        .psp(&psp)
        .flag("--no-migrate")
        .start()
        .await
        .unwrap();
    let stop_new_watch = Arc::new(AtomicBool::new(false));
    let new_health = tokio::spawn(watch_health(new.base_url(), stop_new_watch.clone()));
    fleet
        .write()
        .unwrap()
        .push(("the next release", new.base_url()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during_overlap = count(&load);

    // Rollback: the next release goes, this one keeps serving.
    fleet
        .write()
        .unwrap()
        .retain(|(name, _)| *name != "the next release");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop_new_watch.store(true, Ordering::Relaxed);
    let new_unhealthy = new_health.await.unwrap();
    new.signal("TERM").unwrap();
    let exit = new.wait_for_exit(Duration::from_secs(15)).unwrap();
    assert!(exit.success(), "the next release stops cleanly: {exit}");
    tokio::time::sleep(Duration::from_secs(2)).await;

    stop_load.store(true, Ordering::Relaxed);
    for sender in senders {
        sender.await.unwrap();
    }
    stop_watch.store(true, Ordering::Relaxed);
    let old_unhealthy = old_health.await.unwrap();
    let total = started.elapsed();
    let done = load.done.lock().unwrap().clone();
    let answered_by = load.answered_by.lock().unwrap().clone();
    eprintln!(
        "rolling deploy on {}: {} operations in {:.1} s ({} before the migration, {} by the end \
         of it, {} by the end of the overlap); the migration job took {} ms; answers by \
         instance {answered_by:?}\n{}",
        if database.is_postgres() {
            "PostgreSQL"
        } else {
            "SQLite"
        },
        done.len(),
        total.as_secs_f64(),
        before,
        after_migration,
        during_overlap,
        migration_took.as_millis(),
        load.kinds.table()
    );

    assert!(
        old_unhealthy.is_empty(),
        "this release's /healthz answered otherwise than 200 {} times, first: {}",
        old_unhealthy.len(),
        old_unhealthy[0]
    );
    assert!(
        new_unhealthy.is_empty(),
        "the next release's /healthz: {new_unhealthy:?}"
    );
    assert_eq!(load.lost.load(Ordering::Relaxed), 0, "operations lost");
    assert_eq!(load.kinds.forbidden(), Vec::<String>::new());
    assert!(
        after_migration > before && during_overlap > after_migration && done.len() > during_overlap,
        "served in every phase: {before}, {after_migration}, {during_overlap}, {}",
        done.len()
    );
    assert!(
        answered_by.get("the next release").copied().unwrap_or(0) > 0,
        "the next release served: {answered_by:?}"
    );

    // One charge per operation, in the shop and at the provider.
    let ids: HashSet<&str> = done.iter().map(|(_, _, id)| id.as_str()).collect();
    assert_eq!(ids.len(), done.len(), "two operations answered one charge");
    assert_eq!(
        database.count("charges").await.unwrap(),
        done.len() as i64,
        "one charge row per operation"
    );
    let provider = psp.ledger().await.unwrap();
    let provider_keys: HashSet<&str> = provider
        .iter()
        .map(|r| r.idempotency_key.as_str())
        .collect();
    assert_eq!(
        provider.len(),
        done.len(),
        "one provider charge per operation"
    );
    assert_eq!(provider_keys.len(), provider.len());
    let mut tokens: BTreeMap<&str, HashSet<&str>> = BTreeMap::new();
    for (token, _, id) in &done {
        tokens.entry(token).or_default().insert(id);
    }
    for (token, ids) in tokens {
        let listed: HashSet<String> = old
            .bearer(token)
            .charges()
            .await
            .unwrap()
            .iter()
            .filter_map(|c| c["id"].as_str().map(str::to_owned))
            .collect();
        let listed: HashSet<&str> = listed.iter().map(String::as_str).collect();
        assert_eq!(listed, ids, "a customer's charges");
    }
}

/// What a later release's migration job leaves when its migration is a
/// contract one (a column renamed), recorded as running beside nothing
/// older: this release, running, answers `/healthz` 503 naming the
/// migration (and serves no request on it), refuses to start again with
/// one line naming it, and so does its `server migrate`. An earlier
/// release kept starting on such a database and answered every request
/// 503 without saying why.
#[tokio::test]
async fn a_contract_migration_makes_the_earlier_release_refuse_to_start_naming_it() {
    let database = Database::fresh().await.unwrap();
    let old = Server::builder()
        .database(database.clone())
        .start()
        .await
        .unwrap();
    let alice = old.caller();
    let body = json!({"amount": 500, "currency": "usd", "description": "before"});
    assert_eq!(alice.charge(&body).await.unwrap().status(), 201);
    // The same on both backends: each is at version 3 of its ledger.
    let (version, name) = (4, "0004_rename_description");
    // A later release's job gives a ledger that lacks them the columns it
    // records (nothing to do on this release's ledger, which has them).
    for column in ["runs_beside BIGINT", "name TEXT"] {
        let add = format!("ALTER TABLE schema_migrations ADD COLUMN {column}");
        let _already_there = database
            .sql(&add, &add.replace("COLUMN", "COLUMN IF NOT EXISTS"))
            .await;
    }
    let contract = format!(
        "ALTER TABLE charges RENAME COLUMN description TO memo;
         INSERT INTO schema_migrations (version, applied_at, runs_beside, name)
           VALUES ({version}, 0, {version}, '{name}');"
    );
    database.sql(&contract, &contract).await.unwrap();

    let health = old.http().get(old.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 503);
    assert!(health.headers().contains_key("retry-after"));
    let problem: Value = health.json().await.unwrap();
    assert_eq!(problem["type"], "/problems/unavailable", "{problem}");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&format!("version {version} ({name})")),
        "/healthz names the migration: {detail}"
    );

    let this = Binary::server().path().unwrap();
    let www = tempfile::tempdir().unwrap();
    let url = database.url();
    let www_dir = www.path().to_str().unwrap();
    for args in [
        &serving(www_dir, &url)[..],
        &["migrate", "--database", &url][..],
    ] {
        let ran = run(&this, args);
        assert_eq!(
            ran.code,
            Some(1),
            "{args:?} exits 1:\n{}{}",
            ran.stdout,
            ran.stderr
        );
        assert!(!ran.stdout.contains("listening"), "{args:?} served");
        let line = last_line(&ran);
        assert!(
            line.starts_with("error: ") && line.contains(&format!("version {version} ({name})")),
            "{args:?}: one line naming the migration: {line}"
        );
        assert!(line.contains("cannot run beside"), "{line}");
    }
}

/// A release started with `--no-migrate` on a database its migration job
/// has not migrated yet (the next release on this release's database)
/// refuses to start, naming the migration it lacks, and leaves the
/// database as it was; `NO_MIGRATE=1` says the same. Once migrated, it
/// starts.
#[tokio::test]
async fn a_release_that_does_not_migrate_refuses_a_database_behind_it_naming_what_is_missing() {
    let next = next_release();
    let database = Database::fresh().await.unwrap();
    drop(
        Server::builder()
            .database(database.clone())
            .start()
            .await
            .unwrap(),
    );
    let url = database.url();
    let www = tempfile::tempdir().unwrap();
    let www_dir = www.path().to_str().unwrap();
    let (next_version, missing) = (4, "from 4 (0004_charge_note)");
    let serve = serving(www_dir, &url);
    let ran = run(&next, &[&serve[..], &["--no-migrate"]].concat());
    assert_eq!(ran.code, Some(1), "{}{}", ran.stdout, ran.stderr);
    let line = last_line(&ran);
    assert!(line.contains(missing), "names what is missing: {line}");
    let mut via_env = Command::new(&next);
    let out = via_env
        .args(serve)
        .env("NO_MIGRATE", "1")
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "NO_MIGRATE=1 does not migrate");
    assert_eq!(
        database
            .count_where("schema_migrations", &format!("version >= {next_version}"))
            .await
            .unwrap(),
        0,
        "nothing was migrated"
    );

    let migrated = run(&next, &["migrate", "--database", &url]);
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    let server = Server::builder()
        .binary(NEXT)
        .database(database)
        .flag("--no-migrate")
        .start()
        .await
        .unwrap();
    assert_eq!(server.health().await.unwrap(), 200);
}

/// The flags that serve `www` from the database at `url`, on any port.
fn serving<'a>(www: &'a str, url: &'a str) -> [&'a str; 6] {
    ["--listen", "127.0.0.1:0", "--www", www, "--database", url]
}
