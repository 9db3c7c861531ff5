//! The server's API tests: the real `server` binary on port 0 with a fresh
//! database per test (SQLite, or PostgreSQL with `TEST_POSTGRES_URL`),
//! started by the test kit and driven over HTTP; with the payment provider
//! simulator and MailDev where a test needs them.

mod caller_limits;
mod chaos;
mod charges;
mod clocks;
mod configuration;
mod dead_letters;
mod errors;
mod group_commit;
mod health_gauges;
mod helpers;
mod idempotency;
mod later_phases;
mod listener;
mod migration;
mod openapi;
mod operator_guards;
mod operators;
mod postgres;
mod process;
mod provider;
mod rate_limits;
mod receipts;
mod recovery;
mod releases;
mod reservations;
mod restores;
mod secrets;
mod sweeper;
