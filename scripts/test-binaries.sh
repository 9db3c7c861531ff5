#!/usr/bin/env bash
# Every binary of the workspace starts when built beside the others. One
# cargo invocation builds them all, so Cargo unifies their dependencies'
# features (the shop's reqwest brings rustls without a crypto provider);
# then each is started and must print `listening on http://ADDR`: a binary
# that left the choice of provider to the features would panic at start
# with "No provider set".
#
#   scripts/test-binaries.sh        (TEST_POSTGRES_URL: a cluster for
#                                    orders, which runs on PostgreSQL only;
#                                    without it orders counts as ignored)
#
# Ends with cargo's result line, so that scripts/test-total.sh counts each
# binary that started as a test.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

cargo build --locked -p server -p psp -p orders -p bookings --bins
bin="${CARGO_TARGET_DIR:-target}/debug"

work="$(mktemp -d)"
pids=()
database=""
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "$database" ]; then
        psql -q "$TEST_POSTGRES_URL" -c "DROP DATABASE IF EXISTS $database" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

passed=0 failed=0 ignored=0
address=""
# start NAME ARGS...: starts the binary, waits for its listening line.
start() {
    local name="$1"
    shift
    RUST_BACKTRACE=0 "$bin/$name" "$@" >"$work/$name.out" 2>"$work/$name.err" &
    local pid=$!
    pids+=("$pid")
    for _ in $(seq 600); do
        if grep -q '^listening on http' "$work/$name.out"; then
            address="$(sed -n 's/^listening on //p' "$work/$name.out" | head -n1)"
            echo "test $name starts ... ok ($address)"
            passed=$((passed + 1))
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            break
        fi
        sleep 0.1
    done
    echo "test $name starts ... FAILED; its stderr:"
    tail -n 20 "$work/$name.err"
    failed=$((failed + 1))
    return 1
}

start psp --listen 127.0.0.1:0 --database "sqlite://$work/psp/psp.db" || true
psp="$address"
start server --listen 127.0.0.1:0 --database "sqlite://$work/shop/shop.db" --www www \
    --psp-url "${psp:-http://127.0.0.1:9}" || true
start bookings --listen 127.0.0.1:0 --database "sqlite://$work/bookings.db" || true
start partner --listen 127.0.0.1:0 || true
if [ -n "${TEST_POSTGRES_URL:-}" ]; then
    database="binaries_start_$$"
    psql -q "$TEST_POSTGRES_URL" -c "CREATE DATABASE $database"
    start orders --listen 127.0.0.1:0 --database-url "${TEST_POSTGRES_URL%/*}/$database" \
        --provider-url "${psp:-http://127.0.0.1:9}" || true
else
    echo "test orders starts ... ignored (no TEST_POSTGRES_URL)"
    ignored=$((ignored + 1))
fi

result=ok
[ "$failed" -eq 0 ] || result=FAILED
echo "test result: $result. $passed passed; $failed failed; $ignored ignored; 0 measured; 0 filtered out"
[ "$failed" -eq 0 ]
