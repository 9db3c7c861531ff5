#!/usr/bin/env bash
# The shop on Citus beside one PostgreSQL, by turns: new keys and replays
# (loadgen, one server instance through the coordinator), their p99, and
# the CPU per request of the server and of each PostgreSQL node (its
# postmaster's time, its finished children's and every live backend's,
# read from /proc around the run); then a capacity model from those
# figures (docs/BENCHMARKS.md, "Citus").
#   scripts/bench-citus.sh                    # 2 workers, 3 rounds of 8 s
#   ROUNDS=5 DURATION=10s WORKERS=2 BUILD=0 scripts/bench-citus.sh
# Everything runs on this machine, the nodes included: nothing else may
# run meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-8s}
CONNECTIONS=${CONNECTIONS:-32}
# New keys from this many callers (loadgen --callers): one caller is one
# shard on Citus, so loadgen's usual single caller would load one worker.
CALLERS=${CALLERS:-64}
ROUNDS=${ROUNDS:-3}
WORKERS=${WORKERS:-2}
if [ "${BUILD:-1}" = 1 ]; then cargo build --release -p server -p bench --bins -q; fi
BIN=${CARGO_TARGET_DIR:-target}/release
TICKS=$(getconf CLK_TCK)

dir=$(mktemp -d)
cleanup() {
  [ -n "${server:-}" ] && kill "$server" 2>/dev/null || true
  scripts/citus.sh stop "$dir/citus" >/dev/null 2>&1 || true
  scripts/postgres.sh stop "$dir/pg" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
plain=$(scripts/postgres.sh start "$dir/pg")
coordinator=$(scripts/citus.sh start "$dir/citus" "$WORKERS")
nodes=(coordinator $(seq -f 'worker%g' "$WORKERS"))

# node_ticks DATADIR: the CPU ticks of a PostgreSQL node so far: its
# postmaster's own and its reaped children's, and every live child's.
node_ticks() {
  local postmaster; postmaster=$(head -1 "$1/postmaster.pid")
  awk '{ print $14 + $15 + $16 + $17 }' "/proc/$postmaster/stat" | {
    read -r own
    local children=0 pid
    for pid in $(pgrep -P "$postmaster"); do
      children=$((children + $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    echo $((own + children))
  }
}
pid_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
us_per_request() { awk -v t="$1" -v n="$2" -v hz="$TICKS" 'BEGIN { printf "%.0f", (n > 0 ? t * 1e6 / hz / n : 0) }'; }

# fresh_database TARGET: a new database's URL on plain PostgreSQL or on
# the Citus cluster (created through the coordinator, which creates it on
# every node; the extension and the nodes' registration are per database).
fresh_database() {
  local name="bench_$(date +%s%N)"
  if [ "$1" = postgres ]; then
    psql -q "$plain" -c "CREATE DATABASE $name"
    echo "${plain%/*}/$name"
    return
  fi
  psql -q "$coordinator" -c "CREATE DATABASE $name"
  local node url
  for node in "${nodes[@]}"; do
    url=$(cat "$dir/citus/$node/url")
    psql -q "${url%/*}/$name" -c "CREATE EXTENSION IF NOT EXISTS citus"
  done
  local host_port
  host_port=$(sed -E 's#^postgres://[^@]*@([^:/]*):([0-9]*)/.*#\1 \2#' "$dir/citus/coordinator/url")
  read -r host port <<<"$host_port"
  psql -q "${coordinator%/*}/$name" -c "SELECT citus_set_coordinator_host('$host', $port)" >/dev/null
  for node in "${nodes[@]:1}"; do
    host_port=$(sed -E 's#^postgres://[^@]*@([^:/]*):([0-9]*)/.*#\1 \2#' "$dir/citus/$node/url")
    read -r host port <<<"$host_port"
    psql -q "${coordinator%/*}/$name" -c "SELECT citus_add_node('$host', $port)" >/dev/null
  done
  echo "${coordinator%/*}/$name"
}

# measure TARGET SCENARIO: one server on a fresh database of TARGET, one
# loadgen run; prints a line with req/s, p99 and the CPU per request of
# the server and of each node.
measure() {
  local target=$1 scenario=$2 www; www=$(mktemp -d -p "$dir")
  RUST_LOG=warn "$BIN/server" --listen 127.0.0.1:0 --database "$(fresh_database "$target")" \
    --durability full --www "$www" --caller-rate 1000000000 >"$www/out" 2>"$www/err" &
  server=$!
  for _ in $(seq 200); do grep -q listening "$www/out" 2>/dev/null && break; sleep 0.05; done
  local addr; addr=$(sed -n 's#^listening on http://##p' "$www/out")
  local data=("$dir/pg/data") names=(postgres)
  if [ "$target" = citus ]; then
    data=(); names=("${nodes[@]}")
    for node in "${nodes[@]}"; do data+=("$dir/citus/$node/data"); done
  fi
  local before=() after=() i server_before line
  for i in "${!data[@]}"; do before[i]=$(node_ticks "${data[i]}"); done
  server_before=$(pid_ticks "$server")
  line=$("$BIN/loadgen" --addr "$addr" --scenario "$scenario" --connections "$CONNECTIONS" \
    --duration "$DURATION" --callers "$CALLERS")
  for i in "${!data[@]}"; do after[i]=$(node_ticks "${data[i]}"); done
  local requests; requests=$(sed -n 's/.* requests=\([0-9]*\).*/\1/p' <<<"$line")
  local report
  report="target=$target scenario=$scenario rps=$(sed -n 's/.* rps=\([0-9]*\).*/\1/p' <<<"$line")"
  report+=" p99_ms=$(sed -n 's/.* p99_ms=\([0-9.]*\).*/\1/p' <<<"$line")"
  report+=" non_2xx=$(sed -n 's/.* non_2xx=\([0-9]*\).*/\1/p' <<<"$line")"
  report+=" server_us=$(us_per_request "$(($(pid_ticks "$server") - server_before))" "$requests")"
  for i in "${!data[@]}"; do
    report+=" ${names[i]}_us=$(us_per_request "$((after[i] - before[i]))" "$requests")"
  done
  echo "$report"
  kill "$server"; wait "$server" 2>/dev/null || true
  server=
}

echo "# the shop on one PostgreSQL and on Citus (a coordinator, $WORKERS workers), by turns;" \
  "connections=$CONNECTIONS callers=$CALLERS (new keys) duration=$DURATION $(nproc) cores"
for round in $(seq "$ROUNDS"); do
  for target in postgres citus; do
    for scenario in new-key replay; do
      echo "round=$round $(measure "$target" "$scenario")"
    done
  done
done | tee "$dir/lines"

# The capacity model, from the medians of the Citus new-key rounds: what
# one core of each role serves, and what N new keys a second would need.
awk -v workers="$WORKERS" '
  / target=citus scenario=new-key / {
    n++
    for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1], n] = kv[2] }
  }
  function median(key,   a, i, j, t, m) {
    for (i = 1; i <= n; i++) a[i] = v[key, i]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    m = int((n + 1) / 2); return a[m]
  }
  END {
    if (n == 0) exit
    coord = median("coordinator_us"); srv = median("server_us"); w = 0
    for (k = 1; k <= workers; k++) w += median("worker" k "_us")
    printf "# capacity (Citus new keys, medians of %d rounds): CPU per request: server %d us, coordinator %d us, the workers %d us in all\n", n, srv, coord, w
    printf "#   one core serves: %d req/s as the coordinator, %d as a worker (with the requests spread over the workers), %d as a server instance\n", 1e6 / coord, 1e6 / w, 1e6 / srv
    split("10000 50000 100000", targets, " ")
    for (t = 1; t <= 3; t++) {
      r = targets[t]
      printf "#   %d new keys/s: %.1f coordinator cores, %.1f worker cores (%d workers of 8 cores), %.1f server cores\n", r, r * coord / 1e6, r * w / 1e6, int(r * w / 1e6 / 8) + 1, r * srv / 1e6
    }
  }' "$dir/lines"
