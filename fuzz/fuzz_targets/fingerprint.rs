//! `cargo fuzz run fingerprint`: see `server::fuzzing::fingerprint` and docs/FUZZING.md.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| server::fuzzing::fingerprint(data));
