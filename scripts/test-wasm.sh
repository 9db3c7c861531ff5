#!/usr/bin/env bash
# Tests the browser client end to end:
#
#   1. host tests: `cargo test -p retry-policy -p client-wasm` (retry
#      policy, backoff, Retry-After, record format);
#   2. the release build into www/pkg (scripts/build-wasm.sh, with sizes);
#   3. browser tests: `wasm-pack test --headless --chrome client-wasm`
#      against a real `server --chaos` that this script starts on a free
#      port, with a temporary SQLite database and CORS for the test runner's
#      origin;
#   4. a smoke test of the release build (after wasm-opt, which wasm-pack
#      test never runs): headless Chromium, driven through chromedriver by
#      client-wasm/smoke/run.mjs, loads client-wasm/smoke/index.html and
#      www/pkg from that server and posts a charge twice.
#
# Installs what is missing first (scripts/wasm-tools.sh). Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

. scripts/wasm-tools.sh

step() { printf '\n== %s\n' "$*"; }

step "host tests"
cargo test -p retry-policy -p client-wasm

step "release build into www/pkg"
scripts/build-wasm.sh

step "server"
cargo build -p server
server_bin="${CARGO_TARGET_DIR:-$ROOT/target}/debug/server"

tmp="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# wasm-bindgen-test-runner serves the test page on WASM_BINDGEN_TEST_ADDRESS;
# pinning it tells the server which origin to allow.
free_port() {
    node -e 'const s = require("net").createServer();
             s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}
runner_port="$(free_port)"
runner_origin="http://127.0.0.1:$runner_port"

mkdir -p "$tmp/www"
"$server_bin" \
    --listen 127.0.0.1:0 \
    --database "sqlite://$tmp/db/shop.db" \
    --chaos \
    --cors-origin "$runner_origin" \
    --durability relaxed \
    --www "$tmp/www" \
    >"$tmp/server.out" 2>"$tmp/server.log" &
server_pid=$!

server_url=""
for _ in $(seq 1 300); do
    server_url="$(sed -n 's/^listening on //p' "$tmp/server.out" | head -n 1)"
    [ -n "$server_url" ] && break
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "test-wasm: the server exited:" >&2
        cat "$tmp/server.log" >&2
        exit 1
    fi
    sleep 0.1
done
if [ -z "$server_url" ]; then
    echo "test-wasm: the server did not print its address within 30 s" >&2
    cat "$tmp/server.log" >&2
    exit 1
fi
echo "server at $server_url (chaos on, CORS for $runner_origin)"

step "browser tests (headless Chromium)"
# IDEM_TEST_SERVER is read at compile time by the tests (option_env!).
status=0
IDEM_TEST_SERVER="$server_url" \
    WASM_BINDGEN_TEST_ADDRESS="127.0.0.1:$runner_port" \
    WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-120}" \
    wasm-pack test --headless --chrome client-wasm || status=$?
if [ "$status" != 0 ]; then
    echo "test-wasm: browser tests failed; server log:" >&2
    tail -n 50 "$tmp/server.log" >&2
    exit "$status"
fi

step "release build smoke test (headless Chromium, www/pkg)"
cp -r www/pkg "$tmp/www/pkg"
cp client-wasm/smoke/index.html "$tmp/www/smoke.html"
driver_port="$(free_port)"
chromedriver --port="$driver_port" >"$tmp/chromedriver.log" 2>&1 &
driver_pid=$!
for _ in $(seq 1 100); do
    node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
        "http://127.0.0.1:$driver_port/status" && break
    sleep 0.1
done
status=0
node client-wasm/smoke/run.mjs "http://127.0.0.1:$driver_port" "$server_url/smoke.html" || status=$?
kill "$driver_pid" 2>/dev/null || true
wait "$driver_pid" 2>/dev/null || true
if [ "$status" = 0 ]; then
    echo "1 passed, 0 failed"
else
    echo "test-wasm: the release build failed in the browser" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
