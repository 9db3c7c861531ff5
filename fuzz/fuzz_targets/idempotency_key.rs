//! `cargo fuzz run idempotency_key`: see `server::fuzzing::idempotency_key` and docs/FUZZING.md.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| server::fuzzing::idempotency_key(data));
