//! A test that cannot run on this run's database says so, and is counted
//! as skipped instead of passed.
//!
//! The same test binaries run on SQLite and again on PostgreSQL
//! (`TEST_POSTGRES_URL`), so which tests apply is known only at run time,
//! and libtest has no runtime skip. A test that does not apply calls
//! [`skipped`] and returns: the line it writes, `skipped: TEST: WHY`,
//! bypasses libtest's capture, and scripts/test-total.sh moves each such
//! test from the passed to the skipped count of its step.

use std::io::Write;

/// What a skipped test's line starts with.
pub const SKIPPED: &str = "skipped: ";

/// Writes `skipped: TEST: WHY` on stderr for the running test (libtest
/// names its thread after it); the caller then returns.
pub fn skipped(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    // On a line of its own (libtest may have begun one: `test NAME ... `),
    // straight to the file descriptor: libtest captures only `eprint!`.
    let line = format!("\n{SKIPPED}{test}: {why}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
