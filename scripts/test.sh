#!/usr/bin/env bash
# The test command: installs whatever a fresh Debian machine lacks (wasm
# target, wasm-pack, wasm-bindgen-cli, binaryen, Node.js, Chromium,
# chromedriver, PostgreSQL, schemathesis), then runs every test: lints, the
# server's API and crash tests on SQLite and on a throwaway PostgreSQL
# cluster, schemathesis against the server's OpenAPI document, the client's
# host and browser tests, and the end-to-end stories in headless
# Chromium.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

step() { printf '\n== %s\n' "$*"; }

# Everything is also logged, to count the tests at the end.
log="$(mktemp)"
exec > >(tee "$log") 2>&1

step "toolchain"
. scripts/wasm-tools.sh

step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -q -- -D warnings

step "server and test kit: unit, property, API, fuzz-corpus and crash tests on SQLite"
cargo test -p server -p testkit --features server/fuzzing

step "payment provider simulator: charges, idempotency, faults, restarts"
cargo test -p psp

# The same API and crash suites again, on PostgreSQL: a second run of them,
# counted under its own name in the total.
step "server: the API, crash and instances suites again, on PostgreSQL"
pgdir="$(mktemp -d)"
trap 'scripts/postgres.sh stop "$pgdir/cluster" 2>/dev/null; rm -rf "$pgdir"' EXIT
pgurl="$(scripts/postgres.sh start "$pgdir/cluster")"
TEST_POSTGRES_URL="$pgurl" cargo test -p server --test api --test crash --test instances -- --include-ignored

step "server: schemathesis against its own OpenAPI document"
scripts/schemathesis.sh

step "client: host tests, release build, browser tests"
scripts/test-wasm.sh

step "end to end: the checkout page in headless Chromium"
scripts/test-e2e.sh

step "all tests passed"
scripts/postgres.sh stop "$pgdir/cluster" 2>/dev/null
# One line per step that ran tests, then the total (every run once).
scripts/test-total.sh "$log"
