//! `cargo fuzz run caller`: see `server::fuzzing::caller` and docs/FUZZING.md.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| server::fuzzing::caller(data));
