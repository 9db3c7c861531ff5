#!/usr/bin/env bash
# The shop on Citus beside one PostgreSQL, by turns: new keys and replays
# (loadgen), with the instances in both of Citus's shapes (one through
# the coordinator; one on each worker, past the coordinator), their p99, and
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
# Which shapes, in turn: one PostgreSQL, Citus through the coordinator,
# Citus with an instance on each worker.
TARGETS=${TARGETS:-postgres citus citus-workers}
if [ "${BUILD:-1}" = 1 ]; then cargo build --release -p server -p bench --bins -q; fi
BIN=${CARGO_TARGET_DIR:-target}/release
TICKS=$(getconf CLK_TCK)

dir=$(mktemp -d)
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
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

# start_server DATABASE: a server instance on DATABASE, in the
# background; its pid appended to `servers`, its address to `addrs`.
start_server() {
  local www; www=$(mktemp -d -p "$dir")
  RUST_LOG=warn "$BIN/server" --listen 127.0.0.1:0 --database "$1" \
    --durability full --www "$www" --caller-rate 1000000000 >"$www/out" 2>"$www/err" &
  servers+=($!)
  for _ in $(seq 200); do grep -q listening "$www/out" 2>/dev/null && break; sleep 0.05; done
  grep -q listening "$www/out" || { cat "$www/err" >&2; exit 1; }
  addrs+=("$(sed -n 's#^listening on http://##p' "$www/out")")
}

# on_node NODE URL: the database of URL (made through the coordinator)
# reached through NODE of the Citus cluster instead.
on_node() { local node_url; node_url=$(cat "$dir/citus/$1/url"); echo "${node_url%/*}/${2##*/}"; }

# measure TARGET SCENARIO: one loadgen run on a fresh database of TARGET
# (`postgres`; `citus`: one instance through the coordinator;
# `citus-workers`: one instance on each worker, each loaded by a loadgen
# of its own with its share of the connections, after `server migrate`
# through the coordinator); prints a line with req/s, p99 (the worst
# loadgen's) and the CPU per request of the servers and of each node.
measure() {
  local target=$1 scenario=$2 database node
  servers=(); addrs=()
  database=$(fresh_database "${target%-workers}")
  if [ "$target" = citus-workers ]; then
    RUST_LOG=warn "$BIN/server" migrate --database "$database" >/dev/null
    for node in "${nodes[@]:1}"; do start_server "$(on_node "$node" "$database")"; done
  else
    start_server "$database"
  fi
  local data=("$dir/pg/data") names=(postgres)
  if [ "$target" != postgres ]; then
    data=(); names=("${nodes[@]}")
    for node in "${nodes[@]}"; do data+=("$dir/citus/$node/data"); done
  fi
  local before=() after=() i server_before=0 server_after=0 pid addr
  for i in "${!data[@]}"; do before[i]=$(node_ticks "${data[i]}"); done
  for pid in "${servers[@]}"; do server_before=$((server_before + $(pid_ticks "$pid"))); done
  local lines gens=(); lines=$(mktemp -p "$dir")
  for addr in "${addrs[@]}"; do
    "$BIN/loadgen" --addr "$addr" --scenario "$scenario" \
      --connections "$((CONNECTIONS / ${#addrs[@]}))" --duration "$DURATION" \
      --callers "$CALLERS" >>"$lines" &
    gens+=($!)
  done
  wait "${gens[@]}"
  for i in "${!data[@]}"; do after[i]=$(node_ticks "${data[i]}"); done
  for pid in "${servers[@]}"; do server_after=$((server_after + $(pid_ticks "$pid"))); done
  local requests rps p99 non_2xx
  requests=$(sed -n 's/.* requests=\([0-9]*\).*/\1/p' "$lines" | awk '{ s += $1 } END { print s }')
  rps=$(sed -n 's/.* rps=\([0-9]*\).*/\1/p' "$lines" | awk '{ s += $1 } END { print s }')
  p99=$(sed -n 's/.* p99_ms=\([0-9.]*\).*/\1/p' "$lines" | sort -g | tail -1)
  non_2xx=$(sed -n 's/.* non_2xx=\([0-9]*\).*/\1/p' "$lines" | awk '{ s += $1 } END { print s }')
  local report="target=$target scenario=$scenario rps=$rps p99_ms=$p99 non_2xx=$non_2xx"
  report+=" server_us=$(us_per_request "$((server_after - server_before))" "$requests")"
  for i in "${!data[@]}"; do
    report+=" ${names[i]}_us=$(us_per_request "$((after[i] - before[i]))" "$requests")"
  done
  echo "$report"
  for pid in "${servers[@]}"; do kill "$pid"; wait "$pid" 2>/dev/null || true; done
  servers=()
}

echo "# the shop on one PostgreSQL and on Citus (a coordinator, $WORKERS workers), by turns;" \
  "connections=$CONNECTIONS callers=$CALLERS (new keys) duration=$DURATION $(nproc) cores"
for round in $(seq "$ROUNDS"); do
  for target in $TARGETS; do
    for scenario in new-key replay; do
      echo "round=$round $(measure "$target" "$scenario")"
    done
  done
done | tee "$dir/lines"

# The capacity model of each shape, from the medians of its new-key
# rounds: what one core of each role serves, and what N new keys a second
# would need.
for shape in citus citus-workers; do
awk -v workers="$WORKERS" -v shape="$shape" '
  index($0, " target=" shape " scenario=new-key ") {
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
    printf "# capacity (%s, new keys, medians of %d rounds): CPU per request: server %d us, coordinator %d us, the workers %d us in all\n", shape, n, srv, coord, w
    if (coord * 20 < w) printf "#   the coordinator is out of the path (%d us a request); one core serves %d req/s as a worker (the requests spread over the workers), %d as a server instance\n", coord, 1e6 / w, 1e6 / srv
    else printf "#   one core serves: %d req/s as the coordinator, %d as a worker (with the requests spread over the workers), %d as a server instance\n", 1e6 / coord, 1e6 / w, 1e6 / srv
    split("10000 50000 100000", targets, " ")
    for (t = 1; t <= 3; t++) {
      r = targets[t]
      printf "#   %d new keys/s: %.1f coordinator cores, %.1f worker cores (%d workers of 8 cores), %.1f server cores\n", r, r * coord / 1e6, r * w / 1e6, int(r * w / 1e6 / 8) + 1, r * srv / 1e6
    }
  }' "$dir/lines"
done
