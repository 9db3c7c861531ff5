//! `cargo fuzz run request`: see `server::fuzzing::request` and docs/FUZZING.md.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| server::fuzzing::request(data));
