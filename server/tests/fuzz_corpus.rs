//! Replays the committed `cargo fuzz` corpus (`fuzz/corpus/<target>/`)
//! through the same checks the fuzzers run (`server::fuzzing`), so every
//! input the fuzzers found interesting stays a regression test in
//! `cargo test -p server`. A missing or empty corpus folder fails: the
//! replay never passes by finding nothing. See docs/FUZZING.md.

use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the corpus {} is missing: {e}", dir.display()));
    let mut files: Vec<(PathBuf, Vec<u8>)> = entries
        .map(|entry| entry.expect("a readable corpus entry").path())
        .filter(|path| path.is_file())
        .map(|path| {
            let data = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            (path, data)
        })
        .collect();
    assert!(
        !files.is_empty(),
        "the corpus {} is empty: run the fuzzer (docs/FUZZING.md)",
        dir.display()
    );
    files.sort();
    files
}

/// Runs `check` on every input, naming the file of the first that fails.
fn replay(target: &str, check: fn(&[u8])) {
    for (path, data) in corpus(target) {
        if let Err(panic) = std::panic::catch_unwind(|| check(&data)) {
            eprintln!("corpus input {} failed", path.display());
            std::panic::resume_unwind(panic);
        }
    }
}

/// One test per fuzz target, named after it: its corpus replayed through
/// the check of the same name.
macro_rules! corpus_tests {
    ($($test:ident: $target:ident),* $(,)?) => {$(
        #[test]
        fn $test() {
            replay(stringify!($target), server::fuzzing::$target);
        }
    )*};
}

corpus_tests! {
    idempotency_key_corpus: idempotency_key,
    caller_corpus: caller,
    fingerprint_corpus: fingerprint,
    request_corpus: request,
}
