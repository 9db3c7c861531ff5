#!/usr/bin/env bash
# Benchmarks of docs/BENCHMARKS.md: the release server on a fresh temp
# SQLite database per case (default --durability full), driven by loadgen.
#   scripts/bench.sh                 all cases, 10 s each
#   DURATION=5s CONNECTIONS=32 scripts/bench.sh
#   BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:PORT/postgres SWEEP=0 scripts/bench.sh
#       the same cases on a fresh PostgreSQL database each (scripts/postgres.sh
#       starts a throwaway cluster)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-32}
DURABILITY=${DURABILITY:-full}
cargo build --release -p server --features bench --bins -q
BIN=${CARGO_TARGET_DIR:-target}/release

run_case() { # scenario [extra server flags...]
  local scenario=$1; shift
  local dir; dir=$(mktemp -d)
  local database="sqlite://$dir/shop.db"
  if [ -n "${BENCH_POSTGRES_URL:-}" ]; then
    local name="bench_$(date +%s%N)"
    psql -q "$BENCH_POSTGRES_URL" -c "CREATE DATABASE $name"
    database="${BENCH_POSTGRES_URL%/*}/$name"
  fi
  RUST_LOG=warn "$BIN/server" --listen 127.0.0.1:0 --database "$database" \
    --durability "$DURABILITY" --www "$dir" "$@" >"$dir/out" 2>"$dir/err" &
  local pid=$!
  for _ in $(seq 100); do grep -q listening "$dir/out" 2>/dev/null && break; sleep 0.05; done
  local addr; addr=$(sed -n 's#^listening on http://##p' "$dir/out")
  "$BIN/loadgen" --addr "$addr" --scenario "$scenario" --connections "$CONNECTIONS" --duration "$DURATION" \
    ${REQUESTS:+--requests "$REQUESTS"}
  kill "$pid"; wait "$pid" || true
  rm -rf "$dir"
}

echo "# ${BENCH_POSTGRES_URL:+postgres }durability=$DURABILITY connections=$CONNECTIONS duration=$DURATION $(nproc) cores"
run_case read
run_case new-key
run_case unrecorded --bench-unrecorded
run_case replay
run_case storm

if [ "${SWEEP:-1}" = 1 ]; then
  # The sweeper under load: new-key p99 while 1 000 000 expired records are
  # deleted, against the same load without the backlog.
  RECORDS=${RECORDS:-1000000}
  dir=$(mktemp -d)
  "$BIN/server" --listen 127.0.0.1:0 --database "sqlite://$dir/shop.db" --www "$dir" >"$dir/out" 2>/dev/null &
  pid=$!; for _ in $(seq 100); do grep -q listening "$dir/out" 2>/dev/null && break; sleep 0.05; done
  kill "$pid"; wait "$pid" || true
  "$BIN/loadgen" --scenario fill-expired --addr unused --database "$dir/shop.db" --requests "$RECORDS"
  RUST_LOG=warn "$BIN/server" --listen 127.0.0.1:0 --database "sqlite://$dir/shop.db" --durability "$DURABILITY" \
    --sweep-interval 1s --www "$dir" >"$dir/out2" 2>"$dir/err" &
  pid=$!; for _ in $(seq 100); do grep -q listening "$dir/out2" 2>/dev/null && break; sleep 0.05; done
  addr=$(sed -n 's#^listening on http://##p' "$dir/out2")
  sleep 1.2 # the first sweep starts
  echo "# new-key while the sweeper deletes $RECORDS expired records:"
  "$BIN/loadgen" --addr "$addr" --scenario new-key --connections "$CONNECTIONS" --duration "$DURATION"
  curl -s "http://$addr/metrics" | grep '^idempotency_records_expired_total' || true
  kill "$pid"; wait "$pid" || true
  rm -rf "$dir"
fi
