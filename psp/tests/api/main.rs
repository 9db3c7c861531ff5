//! The simulator's API, tested through the real `psp` binary: each test
//! starts its own process on port 0 with a fresh SQLite file.

mod charges;
mod faults;
mod helpers;
mod idempotency;
mod process;
