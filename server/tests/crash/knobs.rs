//! What a run reads from the environment (`CRASH_KILLS`, `CRASH_SEED`,
//! `CRASH_STARTS`), and the seed repeated when a run fails.

use std::str::FromStr;

/// The variable `name` parsed, else `default()`.
pub(crate) fn knob<T: FromStr>(name: &str, default: impl FnOnce() -> T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(default)
}

/// The seed of a run's schedule: `CRASH_SEED`, else a random one. Printed
/// again if the test panics while this lives, so the schedule can be
/// replayed; `std::mem::forget` it once the run passed.
pub(crate) struct Seed(pub(crate) u64);

impl Seed {
    pub(crate) fn from_env() -> Self {
        Self(knob("CRASH_SEED", rand::random))
    }
}

impl Drop for Seed {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("crash harness FAILED; replay with CRASH_SEED={}", self.0);
        }
    }
}
