//! The repository's own scripts, run with bash the way a fresh machine
//! runs them: the tool installer must stop loudly at the step that broke,
//! and the closing total of `scripts/test.sh` must count every test run
//! once, under a name that says which run it was.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    e2e::paths::workspace()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes an executable shell script.
fn script(path: &Path, body: &str) {
    fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A fresh machine in a folder: a copy of the installer scripts, a
/// Cargo.lock naming a wasm-bindgen version, and a PATH of stand-ins that
/// log their calls to `calls`. `rustup target add` fails, as a first step
/// can on a fresh machine; every later step would succeed.
struct FreshMachine {
    dir: tempfile::TempDir,
}

impl FreshMachine {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("repo/scripts")).unwrap();
        for entry in fs::read_dir(repo().join("scripts")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.contains("wasm-tools") {
                fs::copy(&path, root.join("repo/scripts").join(&name)).unwrap();
            }
        }
        fs::write(
            root.join("repo/Cargo.lock"),
            "[[package]]\nname = \"wasm-bindgen\"\nversion = \"0.2.100\"\n",
        )
        .unwrap();
        let bin = root.join("bin");
        fs::create_dir_all(&bin).unwrap();
        fs::create_dir_all(root.join("home")).unwrap();
        let calls = root.join("calls");
        let log = |name: &str| format!("echo \"{name} $*\" >> '{}'", calls.display());
        script(
            &bin.join("rustup"),
            &format!(
                "{}\ncase \"$*\" in\n  'target list --installed') exit 0 ;;\n  \
                 'target add'*) echo 'error: simulated: no network' >&2; exit 1 ;;\nesac",
                log("rustup")
            ),
        );
        for name in ["cargo", "npm", "apt-get", "sudo"] {
            script(&bin.join(name), &log(name));
        }
        for name in ["node", "chromium", "chromedriver"] {
            script(&bin.join(name), "exit 0");
        }
        Self { dir }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `bash -c COMMAND` in the copy of the repository, with only the
    /// stand-ins and the system's basic tools on PATH.
    fn run(&self, command: &str) -> Output {
        let path = format!("{}:/usr/bin:/bin", self.root().join("bin").display());
        Command::new("bash")
            .arg("-c")
            .arg(command)
            .current_dir(self.root().join("repo"))
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.root().join("home"))
            .output()
            .unwrap()
    }

    fn calls(&self) -> String {
        fs::read_to_string(self.root().join("calls")).unwrap_or_default()
    }
}

/// Run as a command, the installer exits non-zero at the first failed
/// step, says which one, and runs no step after it.
#[test]
fn the_tool_installer_stops_at_the_step_that_failed() {
    let machine = FreshMachine::new();
    let out = machine.run("scripts/wasm-tools.sh");
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success(),
        "a failed `rustup target add` passed unnoticed:\n{stderr}"
    );
    assert!(
        stderr.contains("rustup target add wasm32-unknown-unknown"),
        "the error does not name the failed step:\n{stderr}"
    );
    let calls = machine.calls();
    assert!(
        !calls.contains("cargo install"),
        "steps after the failed one ran:\n{calls}"
    );
}

/// Sourced by a script (as test.sh, test-e2e.sh and build-wasm.sh do), a
/// failed step fails the caller, whether or not the caller checks it.
#[test]
fn a_failed_step_fails_the_script_that_sources_the_installer() {
    let machine = FreshMachine::new();
    for caller in [
        "set -e; . scripts/wasm-tools.sh; echo CARRIED ON",
        ". scripts/wasm-tools.sh || exit 3; echo CARRIED ON",
        "if . scripts/wasm-tools.sh; then echo CARRIED ON; fi",
    ] {
        let out = machine.run(caller);
        let stdout = text(&out.stdout);
        assert!(
            !stdout.contains("CARRIED ON"),
            "{caller}: went on after a failed step:\n{}",
            text(&out.stderr)
        );
    }
    assert!(
        !machine.calls().contains("cargo install"),
        "steps after the failed one ran:\n{}",
        machine.calls()
    );
}

/// The closing lines of `scripts/test.sh`, given a log of its steps.
fn closing_total(log: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("test.log");
    fs::write(&path, log).unwrap();
    let out = Command::new("bash")
        .arg(repo().join("scripts/test-total.sh"))
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// A log in the shape `scripts/test.sh` writes: its steps, cargo's and
/// wasm-bindgen-test's result lines, and the release smoke test's.
const LOG: &str = "\
== server: unit, property, API and crash tests on SQLite
test result: ok. 25 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.14s
test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
test result: ok. 39 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 2.49s
test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 6.81s
test result: ok. 0 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.00s

== server: the API, crash and instances suites again, on PostgreSQL
skipped: a_restore_is_undone_on_sqlite: SQLite only
test result: ok. 40 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 6.95s
test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 9.80s
test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.56s

== client: host tests, release build, browser tests

== host tests
test result: ok. 28 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.96s

== browser tests (headless Chromium)
test result: ok. 16 passed; 0 failed; 0 ignored; 0 filtered out; finished in 2.00s

== release build smoke test (headless Chromium, www/pkg)
SMOKE OK {\"first\":{\"status\":201}}
test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out (the release smoke test)

== end to end: the checkout page in headless Chromium
test result: ok. 10 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 66.89s

== all tests passed
";

/// Every run counted once, under the step that ran it: the PostgreSQL run
/// of the same suites is its own line, the release smoke test counts, and a
/// test that said `skipped:` counts as skipped, not passed.
#[test]
fn the_closing_total_counts_every_run_once_under_its_step() {
    let total = closing_total(LOG);
    let lines: Vec<&str> = total.lines().collect();
    let row = |step: &str| {
        lines
            .iter()
            .find(|line| line.contains(step))
            .unwrap_or_else(|| panic!("no line for {step:?} in:\n{total}"))
            .to_string()
    };
    assert!(row("on SQLite").contains("65 passed, 0 failed"), "{total}");
    assert!(
        row("again, on PostgreSQL").contains("42 passed, 0 failed, 1 skipped"),
        "{total}"
    );
    assert!(row("host tests").contains("28 passed, 0 failed"), "{total}");
    assert!(
        row("browser tests").contains("16 passed, 0 failed"),
        "{total}"
    );
    assert!(
        row("release build smoke test").contains("1 passed, 0 failed"),
        "{total}"
    );
    assert!(row("end to end").contains("10 passed, 1 failed"), "{total}");
    assert_eq!(
        lines.last().copied(),
        Some("total: 162 passed, 1 failed, 1 skipped"),
        "{total}"
    );
}

/// The real scripts print the lines the total reads: the release smoke
/// test's result line is cargo's, every browser engine (WebKit too) runs
/// under a step of its own, and test.sh names its PostgreSQL run as the
/// second run of the same suites.
#[test]
fn the_scripts_print_what_the_total_reads() {
    let wasm = fs::read_to_string(repo().join("scripts/test-wasm.sh")).unwrap();
    assert!(
        wasm.contains("echo \"test result: ok. 1 passed; 0 failed;")
            && wasm.contains("echo \"test result: FAILED. 0 passed; 1 failed;"),
        "test-wasm.sh does not print the smoke test's result as cargo does"
    );
    // Each engine is a step of its own in both browser scripts, so the
    // total has a line for WebKit's runs.
    assert!(
        wasm.contains("${TEST_WASM_BROWSERS:-chrome firefox webkit}")
            && wasm.contains("step \"browser tests (WebKit"),
        "test-wasm.sh does not run the browser tests in WebKit by default, under a step of its own"
    );
    let e2e = fs::read_to_string(repo().join("scripts/test-e2e.sh")).unwrap();
    assert!(
        e2e.contains("${E2E_BROWSERS:-chromium,firefox,webkit}")
            && e2e.contains("printf '\\n== %s\\n' \"end to end: the stories in $engine\""),
        "test-e2e.sh does not run the stories in WebKit by default, under a step per engine"
    );
    let test = fs::read_to_string(repo().join("scripts/test.sh")).unwrap();
    assert!(
        test.lines().any(|line| line.starts_with("step \"server: ")
            && line.contains("again")
            && line.contains("on PostgreSQL")),
        "test.sh does not name its PostgreSQL run of the server's suites apart"
    );
    assert!(
        test.contains("scripts/test-total.sh \"$log\""),
        "test.sh does not close with scripts/test-total.sh"
    );
}
