//! The server's API tests: the real application on port 0, a fresh SQLite
//! file per test, driven over HTTP.

#[path = "../common/mod.rs"]
mod common;

mod chaos;
mod charges;
mod errors;
mod helpers;
mod idempotency;
mod openapi;
mod process;
mod reservations;
