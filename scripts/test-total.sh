#!/usr/bin/env bash
# The closing lines of scripts/test.sh, from its log: one line per step
# that ran tests (the `== STEP` headers that test.sh and the scripts it
# calls print), with that step's passed and failed runs, then the total.
#
# Every runner ends with cargo's result line (`test result: ok. N passed;
# M failed; ...`): cargo test, wasm-bindgen-test, and the release smoke
# test (scripts/test-wasm.sh prints one for it). A suite that runs twice
# (the API and crash suites on SQLite, then again on PostgreSQL) is two
# runs, each counted once under the step that ran it.
#
# A test that does not apply to its run's database (a SQLite-only test in
# the PostgreSQL run, and the other way round) passes after writing
# `skipped: TEST: WHY` (testkit::skipped): it is counted as skipped, not
# passed.
#
#   scripts/test-total.sh LOG
set -euo pipefail
awk '
    /^== / { step = substr($0, 4); next }
    /^skipped: / {
        if (!(step in seen)) { seen[step] = 1; order[++steps] = step }
        skipped[step]++; total_skipped++
        passed[step]--; total_passed--
        next
    }
    /^test result:/ {
        if (!(step in seen)) { seen[step] = 1; order[++steps] = step }
        for (i = 1; i < NF; i++) {
            if ($(i + 1) == "passed;") { passed[step] += $i; total_passed += $i }
            if ($(i + 1) == "failed;") { failed[step] += $i; total_failed += $i }
        }
    }
    END {
        for (s = 1; s <= steps; s++)
            printf "  %-66s %4d passed, %d failed, %d skipped\n", order[s], passed[order[s]], failed[order[s]], skipped[order[s]]
        printf "total: %d passed, %d failed, %d skipped\n", total_passed, total_failed, total_skipped
    }' "${1:?usage: scripts/test-total.sh LOG}"
