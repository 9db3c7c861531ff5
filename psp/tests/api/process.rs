//! The process: flags and environment, latency, restarts, signals.

use crate::helpers::{command, visa, Psp};
use reqwest::StatusCode;
use std::time::{Duration, Instant};

/// `--latency` delays every charge by at least that long.
#[tokio::test]
async fn latency_delays_a_charge() {
    let psp = Psp::start(&["--latency", "300ms"]);
    for _ in 0..2 {
        let started = Instant::now();
        let reply = psp.charge("k", &visa(1)).await;
        assert_eq!(reply.status, StatusCode::CREATED);
        assert!(started.elapsed() >= Duration::from_millis(300));
    }
}

/// The ledger and the stored answers survive a SIGKILL and a restart on
/// the same file.
#[tokio::test]
async fn the_ledger_survives_a_kill_and_a_restart() {
    let mut psp = Psp::start(&[]);
    let first = psp.charge("k", &visa(1234)).await;
    assert_eq!(first.status, StatusCode::CREATED);
    psp.kill();

    let again = Psp::start_on(&psp.db, &[]);
    let ledger = again.ledger().await;
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0]["id"], first.json["id"]);
    let replay = again.charge("k", &visa(1234)).await;
    assert!(replay.replayed);
    assert_eq!(replay.bytes, first.bytes);
}

/// A bad flag, or a database or address it cannot use, exits non-zero
/// with one line on stderr, naming each cause once, and nothing on stdout.
#[test]
fn a_bad_flag_exits_non_zero_with_one_line_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let a_folder = format!("sqlite://{}", dir.path().display());
    let database = format!("sqlite://{}", dir.path().join("psp.db").display());
    for args in [
        &["--latency", "soon"][..],
        &["--latency", "1h"],
        &["--database", "postgres://localhost/psp"],
        &["--no-such-flag"],
        &["--listen", "127.0.0.1:0", "--database", &a_folder],
        &["--listen", "not-an-address", "--database", &database],
    ] {
        let output = command(args)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        serve::assert_each_cause_once(stderr.trim_end());
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

/// `PSP_LISTEN`, `PSP_DATABASE_URL` and `PSP_LATENCY` configure the
/// simulator; a flag wins over its variable.
#[test]
fn environment_variables_configure_it_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let from_env = dir.path().join("env/psp.db");
    let from_flag = dir.path().join("flag/psp.db");
    let with_env = |args: &[&str], latency: &str| {
        let mut command = command(args);
        command
            .env("PSP_LISTEN", "127.0.0.2:0")
            .env(
                "PSP_DATABASE_URL",
                format!("sqlite://{}", from_env.display()),
            )
            .env("PSP_LATENCY", latency);
        command
    };
    // The first stdout line of a started simulator.
    let first_line = |mut command: std::process::Command| {
        let mut child = command.spawn().unwrap();
        let mut line = String::new();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        line
    };

    let refused = with_env(&[], "soon").status().unwrap();
    assert!(!refused.success(), "PSP_LATENCY is read (and refused)");
    assert!(
        first_line(with_env(&[], "10ms")).starts_with("listening on http://127.0.0.2:"),
        "PSP_LISTEN names the address"
    );
    assert!(from_env.exists(), "PSP_DATABASE_URL names the file");

    let flag = format!("sqlite://{}", from_flag.display());
    let flags = [
        "--listen",
        "127.0.0.1:0",
        "--database",
        &flag,
        "--latency",
        "0s",
    ];
    assert!(
        first_line(with_env(&flags, "soon")).starts_with("listening on http://127.0.0.1:"),
        "--listen and --latency win"
    );
    assert!(from_flag.exists(), "--database wins");
}

/// SIGTERM lets the charge in flight finish, then exits 0; stdout held
/// only the `listening on` line.
#[tokio::test]
async fn sigterm_drains_the_charge_in_flight_and_exits_0() {
    let mut psp = Psp::start(&["--latency", "1s"]);
    let in_flight = {
        let request = crate::helpers::client()
            .post(psp.url("/v1/charges"))
            .header("Idempotency-Key", "k")
            .body(visa(1).to_string())
            .send();
        tokio::spawn(request)
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    psp.signal("TERM");
    let response = in_flight.await.unwrap().expect("an answer before the exit");
    assert_eq!(response.status(), StatusCode::CREATED);
    let (status, rest) = psp.wait(Duration::from_secs(10));
    assert!(status.success(), "{status}");
    assert_eq!(rest, "", "nothing else on stdout");
}
