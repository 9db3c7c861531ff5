#!/usr/bin/env bash
# The end-to-end stories (tests/, package e2e): the real server process and
# the checkout page in a real headless Chromium, one story per test.
#
# Installs what is missing (wasm target and tools, chromium and
# chromium-driver from apt), builds the browser client into www/pkg/ and the
# debug server, then runs the stories one at a time: they time the page's
# 3 s client timeout and restart servers, which a loaded 2-core machine must
# not skew. Screenshots and server logs land in target/e2e/.
#
#   scripts/test-e2e.sh                   every story
#   scripts/test-e2e.sh two_tabs          the stories whose name contains it
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf 'test-e2e: %s\n' "$*" >&2; }

# wasm target, wasm-pack, wasm-bindgen-cli, binaryen, chromium, chromedriver.
. scripts/wasm-tools.sh

say "building the browser client into www/pkg/"
scripts/build-wasm.sh >/dev/null
say "building the server"
cargo build -p server

say "running the stories (screenshots in ${CARGO_TARGET_DIR:-target}/e2e/)"
cargo test -p e2e -- --test-threads=1 "$@"
