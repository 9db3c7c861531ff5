#!/usr/bin/env bash
# Benchmarks of docs/BENCHMARKS.md: each product case beside its floor (a
# server doing the same insert or read with no idempotency at all:
# bench/src/bin/floor.rs), back to back in one run, each on a fresh
# database, and the ratio between them. New keys are also measured against
# the minimal idempotent floor (`floor --keyed`: the key in a UNIQUE
# (caller, key) column of the charge row, one insert per request), req/s and
# p99 both, and CPU per request (the server process's user and system time
# from /proc over the run, divided by the requests answered; the load
# generator's own is printed beside it). Release builds, driven by loadgen
# and, for new keys, by wrk as a second generator.
#   scripts/bench.sh                 all cases, 10 s each, SQLite
#   PROVIDER=0 LIVE=0 SWEEP=0 scripts/bench.sh
#       without the provider, the file of 2 M live records, the sweeper
#   DURATION=5s CONNECTIONS=32 scripts/bench.sh
#   BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:PORT/postgres SWEEP=0 scripts/bench.sh
#       the same cases on a fresh PostgreSQL database each (scripts/postgres.sh
#       starts a throwaway cluster), the 2 M live records written by SQL
#   BUILD=0 scripts/bench.sh
#       without building first (the binaries already built, e.g. under a
#       machine-wide build lock)
#   BENCH_POSTGRES_URL=… BASE=0 PROVIDER=0 LIVE=0 RECEIPTS=0 scripts/bench.sh
#       only the TLS pair: PostgreSQL new keys over TLS (sslmode=verify-full,
#       a CA and certificate made here with openssl, ssl switched on by
#       ALTER SYSTEM for the run) against the same run with sslmode=disable,
#       by turns (TLS_PAIRS=2 pairs), p99 beside; TLS=0 skips it
#   BENCH_POSTGRES_URL=… BASE=0 TLS=0 PROVIDER=0 LIVE=0 RECEIPTS=0 scripts/bench.sh
#       only the PgBouncer runs: PostgreSQL new keys direct with a plain URL,
#       direct with pgbouncer=true (the pooler-safe session: SET LOCAL in
#       every transaction, no startup options), and through Debian's
#       PgBouncer in transaction mode (PGBOUNCER_POOL=16 server
#       connections), by turns (BOUNCER_ROUNDS=2), p99 beside;
#       BOUNCER=0 skips them
#   WRK=0 scripts/bench.sh
#       without the second load generator: new keys driven by Debian's wrk
#       (bench/wrk/new-key.lua, a UUID v4 key per request) on the server and
#       on the minimal idempotent floor, by turns (WRK_ROUNDS=2)
#   AB=/path/to/server BASE=0 WRK=0 TLS=0 BOUNCER=0 PROVIDER=0 LIVE=0 SWEEP=0 RECEIPTS=0 scripts/bench.sh
#       only the A/B pair: new keys and replays on this build's server and on
#       the server binary AB (another build: the commit before a change, say
#       `git worktree add /tmp/before HEAD~1 && cargo build --release -p server`
#       there), by turns (AB_ROUNDS=3), each on a fresh database, with the
#       CPU per request beside; works with BENCH_POSTGRES_URL too
#   BENCH_POSTGRES_URL=… BASE=0 WRK=0 TLS=0 BOUNCER=0 PROVIDER=0 LIVE=0 RECEIPTS=0 scripts/bench.sh
#       with BACKENDS=1 (on by default with PostgreSQL): the engine alone
#       (bench/src/bin/backends.rs: one row per key) on tokio-postgres and on
#       sqlx, new keys by turns (BACKEND_ROUNDS=3), p99 and CPU beside
#   AB_FLAGS="--caller-rate 0" BASE=0 WRK=0 TLS=0 BOUNCER=0 PROVIDER=0 LIVE=0 SWEEP=0 RECEIPTS=0 scripts/bench.sh
#       the A/B pair on this build alone: the "before" side started with the
#       extra server flags AB_FLAGS (here the per-caller rate limiter off),
#       the "after" side as every run of this build (SERVER_FLAGS); with AB,
#       AB_FLAGS go to the AB binary instead
#   SERVER_FLAGS (default "--caller-rate 1000000000"): the flags every run
#       of this build's server gets. loadgen is one caller, so the
#       contract's 100 requests a second per caller would cap every case:
#       the limiter stays on, its limit out of reach
#   RECEIPTS=0 scripts/bench.sh
#       without the receipts cases at the end (scripts/bench-receipts.sh:
#       receipts/s against MailDev's own intake, and the provider case's
#       outbox backlog; RECEIPT_MESSAGES sets their size)
# Nothing else may run on the machine meanwhile: the figures are CPU-bound.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-32}
DURABILITY=${DURABILITY:-full}
SERVER_FLAGS=${SERVER_FLAGS---caller-rate 1000000000}
export SERVER_FLAGS
if [ "${BUILD:-1}" = 1 ]; then cargo build --release -p server -p psp -p bench --bins -q; fi
BIN=${CARGO_TARGET_DIR:-target}/release

fresh_database() { # DIR -> a database URL
  if [ -n "${BENCH_POSTGRES_URL:-}" ]; then
    local name="bench_$(date +%s%N)"
    psql -q "$BENCH_POSTGRES_URL" -c "CREATE DATABASE $name"
    echo "${DB_BASE:-${BENCH_POSTGRES_URL%/*}}/$name${DB_PARAMS:+?$DB_PARAMS}"
  else
    echo "sqlite://$1/shop.db"
  fi
}

# start PROGRAM DATABASE DIR OUT [server flags...]: starts PROGRAM (server,
# floor or floor-keyed) on DATABASE, its output in DIR/OUT, and waits until
# it listens; sets $pid and $addr.
start() {
  local program=$1 database=$2 dir=$3 out=$4; shift 4
  if [ "$program" = floor ] || [ "$program" = floor-keyed ]; then
    "$BIN/floor" --listen 127.0.0.1:0 --database "$database" --durability "$DURABILITY" \
      $([ "$program" = floor-keyed ] && echo --keyed) >"$dir/$out" 2>"$dir/err" &
  elif [ "$program" = backends-postgres ] || [ "$program" = backends-sqlx ]; then
    RUST_LOG=warn "$BIN/backends" --listen 127.0.0.1:0 --database "$database" \
      --backend "${program#backends-}" >"$dir/$out" 2>"$dir/err" &
  else
    local own=()
    # SERVER_FLAGS go to this build's server, except on an A/B pair's
    # "before" side, whose flags are AB_FLAGS alone (a flag twice is refused).
    if [ "${SERVER:-$BIN/server}" = "$BIN/server" ] && [ -z "${AB_BEFORE:-}" ]; then read -ra own <<<"$SERVER_FLAGS"; fi
    RUST_LOG=warn "${SERVER:-$BIN/server}" --listen 127.0.0.1:0 --database "$database" \
      --durability "$DURABILITY" --www "$dir" "${own[@]}" "$@" >"$dir/$out" 2>"$dir/err" &
  fi
  pid=$!
  for _ in $(seq 100); do grep -q listening "$dir/$out" 2>/dev/null && break; sleep 0.05; done
  addr=$(sed -n 's#^listening on http://##p' "$dir/$out")
}

# cpu_ticks PID: the process's user and system time so far, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
TICKS=$(getconf CLK_TCK)

# cpu_per_request TICKS REQUESTS: microseconds of CPU per request.
cpu_per_request() { awk -v t="$1" -v n="$2" -v hz="$TICKS" 'BEGIN { printf "%.0f", (n > 0 ? t * 1e6 / hz / n : 0) }'; }

# generator COMMAND...: runs a load generator, prints its line, and keeps
# the server's CPU per request in $cpu and the generator's in $gen_cpu
# (bash's `times`: the CPU this shell's children used, read around it).
generator() {
  local before after line gen_before gen_after
  before=$(cpu_ticks "$pid"); children_seconds; gen_before=$children
  line=$("$@")
  after=$(cpu_ticks "$pid"); children_seconds; gen_after=$children
  local requests; requests=$(requests_of "$line")
  cpu=$(cpu_per_request "$((after - before))" "$requests")
  gen_cpu=$(awk -v a="$gen_after" -v b="$gen_before" -v n="$requests" 'BEGIN { printf "%.0f", (n > 0 ? (a - b) * 1e6 / n : 0) }')
  echo "$line server_cpu_us_per_request=$cpu gen_cpu_us_per_request=$gen_cpu"
}

# children_seconds: sets $children to the user and system seconds of this
# shell's finished children so far (`times` in this shell: in a pipeline
# or a $(…) it would read a subshell's).
TIMES_FILE=$(mktemp)
children_seconds() {
  local user system
  times >"$TIMES_FILE"
  read -r user system < <(tail -1 "$TIMES_FILE")
  children=$(awk -v u="$user" -v s="$system" 'function secs(t, m) { split(t, m, "m"); sub("s", "", m[2]); return m[1] * 60 + m[2] } BEGIN { printf "%.3f", secs(u) + secs(s) }')
}

# server_tail: the server's own view of its POST /charges answers (its
# http_request_duration_seconds histogram, from request to response head):
# the bucket its p99 falls in and the share slower than 10 and 50 ms. A
# third measure beside the generators', which it does not depend on.
server_tail() {
  curl -s "http://$addr/metrics" | awk '
    /^http_request_duration_seconds_bucket/ && /route="\/charges"/ && /method="POST"/ {
      match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5); n[le] += $NF
    }
    END {
      total = n["+Inf"]; if (total == 0) exit
      split("0.0005 0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1.0 2.5 10.0", les, " ")
      for (i = 1; i <= 13; i++) if (n[les[i]] >= 0.99 * total) { p99 = les[i] * 1000; break }
      printf "server_histogram: requests=%d p99_ms<=%s over_10ms=%.2f%% over_50ms=%.2f%%\n", total, p99, 100 * (total - n["0.01"]) / total, 100 * (total - n["0.05"]) / total
    }'
}

# run PROGRAM SCENARIO [flags...]: prints loadgen's line, keeps its rps in
# $rps, its p99 in $p99 and the server's CPU per request in $cpu. PROGRAM
# is server, floor or floor-keyed (the minimal idempotent floor).
run() {
  local program=$1 scenario=$2; shift 2
  local dir; dir=$(mktemp -d)
  start "$program" "$(fresh_database "$dir")" "$dir" out "$@"
  local line
  line=$(generator "$BIN/loadgen" --addr "$addr" --scenario "$scenario" --connections "$CONNECTIONS" \
    --duration "$DURATION" ${REQUESTS:+--requests "$REQUESTS"})
  echo "$program $line"
  if [ "$program" = server ] && [ "$scenario" = new-key ]; then echo "  $(server_tail)"; fi
  rps=$(rps_of "$line"); p99=$(p99_of "$line"); cpu=$(cpu_of "$line")
  kill "$pid"; wait "$pid" || true
  rm -rf "$dir"
  # A run whose answers were refusals measured the refusals: an A/B
  # binary whose per-caller rate limit is on by default (AB_FLAGS), say.
  local refused requests
  refused=$(sed -n 's/.* non_2xx=\([0-9]*\).*/\1/p' <<<"$line")
  requests=$(sed -n 's/.* requests=\([0-9]*\).*/\1/p' <<<"$line")
  if [ "$scenario" != storm ] && [ "$((${refused:-0} * 100))" -gt "${requests:-0}" ]; then
    echo "bench: $program --scenario $scenario: $refused of $requests answers were not 2xx" \
      "(a rate limit? a flag the binary lacks?): not a measurement" >&2
    exit 1
  fi
}

# run_wrk PROGRAM: new keys from wrk (two threads, $CONNECTIONS
# connections); the same variables as `run`.
run_wrk() {
  local program=$1
  local dir; dir=$(mktemp -d)
  start "$program" "$(fresh_database "$dir")" "$dir" out
  local line
  line=$(generator wrk_new_keys)
  echo "$program $line"
  if [ "$program" = server ]; then echo "  $(server_tail)"; fi
  rps=$(rps_of "$line"); p99=$(p99_of "$line"); cpu=$(cpu_of "$line")
  kill "$pid"; wait "$pid" || true
  rm -rf "$dir"
}
wrk_new_keys() {
  wrk -t2 -c"$CONNECTIONS" -d"$DURATION" -s bench/wrk/new-key.lua "http://$addr" | grep '^wrk '
}

rps_of() { sed -n 's/.* rps=\([0-9]*\).*/\1/p' <<<"$1"; }
p99_of() { sed -n 's/.* p99_ms=\([0-9.]*\).*/\1/p' <<<"$1"; }
requests_of() { sed -n 's/.* requests=\([0-9]*\).*/\1/p' <<<"$1"; }
cpu_of() { sed -n 's/.* server_cpu_us_per_request=\([0-9]*\).*/\1/p' <<<"$1"; }

# filled_server FILL N [server flags...]: a server on a fresh SQLite file
# that a first server run migrated and `loadgen --scenario FILL` then gave
# N records; sets $dir, $pid and $addr.
filled_server() {
  local fill=$1 records=$2; shift 2
  dir=$(mktemp -d)
  "$BIN/server" --listen 127.0.0.1:0 --database "sqlite://$dir/shop.db" --www "$dir" >"$dir/out" 2>/dev/null &
  pid=$!; for _ in $(seq 100); do grep -q listening "$dir/out" 2>/dev/null && break; sleep 0.05; done
  kill "$pid"; wait "$pid" || true
  "$BIN/loadgen" --scenario "$fill" --addr unused --database "$dir/shop.db" --requests "$records"
  RUST_LOG=warn "$BIN/server" --listen 127.0.0.1:0 --database "sqlite://$dir/shop.db" --durability "$DURABILITY" \
    --www "$dir" "$@" >"$dir/out2" 2>"$dir/err" &
  pid=$!; for _ in $(seq 100); do grep -q listening "$dir/out2" 2>/dev/null && break; sleep 0.05; done
  addr=$(sed -n 's#^listening on http://##p' "$dir/out2")
}

# filled_floor N: the minimal idempotent floor on a fresh SQLite file that
# a first floor run created and `loadgen --scenario fill-keyed` then gave N
# charges; sets $dir, $pid and $addr.
filled_floor() {
  local records=$1
  dir=$(mktemp -d)
  "$BIN/floor" --listen 127.0.0.1:0 --database "sqlite://$dir/shop.db" --keyed >"$dir/out" 2>/dev/null &
  pid=$!; for _ in $(seq 100); do grep -q listening "$dir/out" 2>/dev/null && break; sleep 0.05; done
  kill "$pid"; wait "$pid" || true
  "$BIN/loadgen" --scenario fill-keyed --addr unused --database "$dir/shop.db" --requests "$records"
  "$BIN/floor" --listen 127.0.0.1:0 --database "sqlite://$dir/shop.db" --durability "$DURABILITY" --keyed \
    >"$dir/out2" 2>"$dir/err" &
  pid=$!; for _ in $(seq 100); do grep -q listening "$dir/out2" 2>/dev/null && break; sleep 0.05; done
  addr=$(sed -n 's#^listening on http://##p' "$dir/out2")
}

# sudo_apt PACKAGE: installs a Debian package (as root here).
sudo_apt() { DEBIAN_FRONTEND=noninteractive apt-get install -y "$1" >&2; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

echo "# ${BENCH_POSTGRES_URL:+postgres }durability=$DURABILITY connections=$CONNECTIONS duration=$DURATION $(nproc) cores"
if [ "${BASE:-1}" = 1 ]; then
run floor read;       read_floor=$rps
run server read;      read_server=$rps
run floor new-key;    insert_floor=$rps; insert_floor_p99=$p99
run floor-keyed new-key; keyed_floor=$rps; keyed_floor_p99=$p99; keyed_floor_cpu=$cpu
run server new-key;   new_key=$rps; new_key_p99=$p99; new_key_cpu=$cpu
run server replay;    replay=$rps
run server storm
echo "ratio new-key / insert floor: $(ratio "$new_key" "$insert_floor")"
echo "ratio new-key / minimal idempotent floor: $(ratio "$new_key" "$keyed_floor")"
echo "ratio new-key p99 / insert floor p99: $(ratio "$new_key_p99" "$insert_floor_p99")"
echo "ratio new-key p99 / minimal idempotent floor p99: $(ratio "$new_key_p99" "$keyed_floor_p99")"
echo "ratio new-key CPU per request / minimal idempotent floor's: $(ratio "$new_key_cpu" "$keyed_floor_cpu") ($new_key_cpu us against $keyed_floor_cpu us)"
echo "ratio replay / read floor:    $(ratio "$replay" "$read_floor")"
echo "ratio read / read floor:      $(ratio "$read_server" "$read_floor")"
fi

if [ "${BACKENDS:-1}" = 1 ] && [ -n "${BENCH_POSTGRES_URL:-}" ]; then
  echo "# the engine alone, one row per key: tokio-postgres against sqlx, by turns"
  for round in $(seq "${BACKEND_ROUNDS:-3}"); do
    run backends-postgres new-key >/dev/null; pg=$rps; pg_p99=$p99; pg_cpu=$cpu
    run backends-sqlx new-key >/dev/null
    echo "backends round=$round tokio_postgres_rps=$pg p99_ms=$pg_p99 cpu_us=$pg_cpu sqlx_rps=$rps p99_ms=$p99 cpu_us=$cpu ratio_sqlx/tokio_postgres=$(ratio "$rps" "$pg")"
  done
fi

if [ -n "${AB:-}" ] || [ -n "${AB_FLAGS:-}" ]; then
  echo "# A/B: before=${AB:-$BIN/server} ${AB_FLAGS:-} after=$BIN/server $SERVER_FLAGS, by turns"
  for round in $(seq "${AB_ROUNDS:-3}"); do
    for side in before after; do
      flags=()
      if [ "$side" = before ]; then
        SERVER=${AB:-$BIN/server}; AB_BEFORE=1; read -ra flags <<<"${AB_FLAGS:-}"
      else
        SERVER=$BIN/server; AB_BEFORE=
      fi
      run server new-key "${flags[@]}" >/dev/null; nk=$rps; nk_p99=$p99; nk_cpu=$cpu
      run server replay "${flags[@]}" >/dev/null
      echo "ab round=$round $side new_key_rps=$nk new_key_p99_ms=$nk_p99 new_key_cpu_us=$nk_cpu replay_rps=$rps replay_p99_ms=$p99"
    done
  done
  unset SERVER AB_BEFORE
fi

if [ "${WRK:-1}" = 1 ]; then
  # The second load generator: wrk's event loop keeps every connection
  # busy, where loadgen runs one request at a time per connection on tokio.
  command -v wrk >/dev/null || sudo_apt wrk
  echo "# new keys driven by wrk (2 threads, $CONNECTIONS connections), server and minimal idempotent floor by turns:"
  for _ in $(seq "${WRK_ROUNDS:-2}"); do
    run_wrk server; wrk_rps+=("$rps"); wrk_p99+=("$p99"); wrk_cpu+=("$cpu")
    run_wrk floor-keyed; wrk_floor_rps+=("$rps"); wrk_floor_p99+=("$p99"); wrk_floor_cpu+=("$cpu")
  done
  for i in "${!wrk_rps[@]}"; do
    echo "ratio wrk new-key / minimal idempotent floor (round $((i + 1))): $(ratio "${wrk_rps[$i]}" "${wrk_floor_rps[$i]}"); p99 $(ratio "${wrk_p99[$i]}" "${wrk_floor_p99[$i]}")x (${wrk_p99[$i]} ms against ${wrk_floor_p99[$i]} ms); CPU per request $(ratio "${wrk_cpu[$i]}" "${wrk_floor_cpu[$i]}")x"
  done
fi

if [ "${TLS:-1}" = 1 ] && [ -n "${BENCH_POSTGRES_URL:-}" ]; then
  # PostgreSQL new keys over TLS (rustls, sslmode=verify-full against a CA
  # made here) against the same run in clear (sslmode=disable), by turns.
  # The cluster gets ssl = on for the run (ALTER SYSTEM, reset after).
  tdir=$(mktemp -d); chmod 755 "$tdir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=bench CA" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    -keyout "$tdir/ca.key" -out "$tdir/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$tdir/server.key" -out "$tdir/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$tdir/ext"
  openssl x509 -req -in "$tdir/server.csr" -CA "$tdir/ca.pem" -CAkey "$tdir/ca.key" -CAcreateserial \
    -days 2 -extfile "$tdir/ext" -out "$tdir/server.pem" 2>/dev/null
  chmod 600 "$tdir/server.key"
  if [ "$(id -u)" = 0 ]; then chown postgres "$tdir/server.key" "$tdir/server.pem"; fi
  psql -q "$BENCH_POSTGRES_URL" -c "ALTER SYSTEM SET ssl_cert_file = '$tdir/server.pem'" \
    -c "ALTER SYSTEM SET ssl_key_file = '$tdir/server.key'" -c "ALTER SYSTEM SET ssl = on" \
    -c "SELECT pg_reload_conf()" >/dev/null
  sleep 0.5
  echo "# PostgreSQL new keys over TLS (sslmode=verify-full) and in clear (sslmode=disable), by turns:"
  for _ in $(seq "${TLS_PAIRS:-2}"); do
    DB_PARAMS=sslmode=disable run server new-key; clear_rps+=("$rps"); clear_p99+=("$p99")
    DB_PARAMS="sslmode=verify-full&sslrootcert=$tdir/ca.pem" run server new-key
    tls_rps+=("$rps"); tls_p99+=("$p99")
  done
  for i in "${!tls_rps[@]}"; do
    echo "ratio new-key over TLS / in clear (pair $((i + 1))): $(ratio "${tls_rps[$i]}" "${clear_rps[$i]}") (target >= 0.9); p99 ${tls_p99[$i]} ms against ${clear_p99[$i]} ms"
  done
  psql -q "$BENCH_POSTGRES_URL" -c "ALTER SYSTEM RESET ssl" -c "ALTER SYSTEM RESET ssl_cert_file" \
    -c "ALTER SYSTEM RESET ssl_key_file" -c "SELECT pg_reload_conf()" >/dev/null
  rm -rf "$tdir"
fi

if [ "${BOUNCER:-1}" = 1 ] && [ -n "${BENCH_POSTGRES_URL:-}" ]; then
  # PostgreSQL new keys through PgBouncer (transaction mode) against the
  # same runs direct, by turns; and direct with pgbouncer=true, which is
  # what a plain URL would cost if it were pooler-safe by default.
  bdir=$(mktemp -d)
  bouncer=$(PGBOUNCER_POOL=${PGBOUNCER_POOL:-16} scripts/pgbouncer.sh start "$bdir" "$BENCH_POSTGRES_URL")
  bouncer_base=${bouncer%/*}
  echo "# PostgreSQL new keys direct, direct with pgbouncer=true, and through PgBouncer (transaction mode, pool ${PGBOUNCER_POOL:-16}), by turns:"
  for _ in $(seq "${BOUNCER_ROUNDS:-2}"); do
    run server new-key; direct_rps+=("$rps"); direct_p99+=("$p99")
    DB_PARAMS=pgbouncer=true run server new-key; safe_rps+=("$rps"); safe_p99+=("$p99")
    DB_BASE=$bouncer_base DB_PARAMS=pgbouncer=true run server new-key
    pooled_rps+=("$rps"); pooled_p99+=("$p99")
  done
  for i in "${!pooled_rps[@]}"; do
    echo "ratio new-key through PgBouncer / direct (round $((i + 1))): $(ratio "${pooled_rps[$i]}" "${direct_rps[$i]}") (target >= 0.8); p99 ${pooled_p99[$i]} ms against ${direct_p99[$i]} ms"
    echo "ratio new-key direct with pgbouncer=true / plain URL (round $((i + 1))): $(ratio "${safe_rps[$i]}" "${direct_rps[$i]}"); p99 ${safe_p99[$i]} ms against ${direct_p99[$i]} ms"
  done
  scripts/pgbouncer.sh stop "$bdir"
  rm -rf "$bdir"
fi

if [ "${PROVIDER:-1}" = 1 ]; then
  # Charges through the payment provider simulator at 200 ms latency, 256
  # checkouts at once: no writer or transaction waits on the network, so
  # throughput is concurrency / latency (1 280/s at best), not the
  # database's.
  pdir=$(mktemp -d)
  "$BIN/psp" --listen 127.0.0.1:0 --database "sqlite://$pdir/psp.db" --latency 200ms \
    >"$pdir/out" 2>"$pdir/err" &
  ppid=$!
  for _ in $(seq 100); do grep -q listening "$pdir/out" 2>/dev/null && break; sleep 0.05; done
  psp_url=$(sed -n 's#^listening on ##p' "$pdir/out")
  echo "# through the provider (psp --latency 200ms), 256 connections:"
  CONNECTIONS=256 run server new-key --psp-url "$psp_url"
  provider=$rps
  echo "provider charges/s: $provider (target >= 1000)"
  kill "$ppid"; wait "$ppid" || true
  rm -rf "$pdir"
fi

if [ "${LIVE:-1}" = 1 ] && [ -z "${BENCH_POSTGRES_URL:-}" ]; then
  # New keys on a file that already holds a day of records (LIVE_RECORDS
  # live ones of loadgen's caller, random keys): each new key lands among
  # them, as in production, where the fresh file of the case above flatters
  # the record's B-tree. The floor appends its charges, so the size of its
  # file does not change what an insert costs it.
  LIVE_RECORDS=${LIVE_RECORDS:-2000000}
  filled_server fill-live "$LIVE_RECORDS"
  echo "# new-key on a file of $LIVE_RECORDS live records:"
  line=$("$BIN/loadgen" --addr "$addr" --scenario new-key --connections "$CONNECTIONS" --duration "$DURATION")
  echo "server $line"
  live=$(rps_of "$line"); live_p99=$(p99_of "$line")
  echo "ratio new-key on $LIVE_RECORDS records / insert floor: $(ratio "$live" "$insert_floor")"
  kill "$pid"; wait "$pid" || true
  rm -rf "$dir"
  # The minimal idempotent floor on a file of as many charges under random
  # keys: its UNIQUE (caller, key) index is as large as the product's.
  filled_floor "$LIVE_RECORDS"
  line=$("$BIN/loadgen" --addr "$addr" --scenario new-key --connections "$CONNECTIONS" --duration "$DURATION")
  echo "floor-keyed $line"
  live_floor=$(rps_of "$line"); live_floor_p99=$(p99_of "$line")
  echo "ratio new-key on $LIVE_RECORDS records / minimal idempotent floor on as many: $(ratio "$live" "$live_floor")"
  echo "ratio new-key p99 on $LIVE_RECORDS records / minimal idempotent floor p99 on as many: $(ratio "$live_p99" "$live_floor_p99")"
  kill "$pid"; wait "$pid" || true
  rm -rf "$dir"
fi

if [ "${LIVE:-1}" = 1 ] && [ -n "${BENCH_POSTGRES_URL:-}" ]; then
  # The same on PostgreSQL: a fresh database that a first run migrated,
  # given LIVE_RECORDS rows by one INSERT ... SELECT (the records under
  # loadgen's caller, finished and live for a day; the floor's charges
  # under as many keys), then VACUUM ANALYZE, as a day of traffic and
  # autovacuum would leave it, and a CHECKPOINT, so the run does not also
  # write back the fill's dirty pages.
  LIVE_RECORDS=${LIVE_RECORDS:-2000000}
  caller="sha256(convert_to('bench-token-0123456789', 'UTF8'))"
  # pg_filled PROGRAM SQL: sets $dir, $pid and $addr.
  pg_filled() {
    local program=$1 sql=$2
    dir=$(mktemp -d)
    local database; database=$(fresh_database "$dir")
    start "$program" "$database" "$dir" out; kill "$pid"; wait "$pid" || true
    psql -q "$database" -c "$sql" -c "VACUUM ANALYZE" -c "CHECKPOINT"
    start "$program" "$database" "$dir" out2
  }
  pg_filled server "INSERT INTO idempotency_keys
      (caller, key, fingerprint, recovery_point, status, body, created_at, expires_at)
    SELECT $caller, gen_random_uuid()::text, '\\x$(printf '0%.0s' $(seq 64))'::bytea, 'finished', 201,
      convert_to('{\"id\":\"ch_0\",\"amount\":1999,\"currency\":\"usd\",\"status\":\"succeeded\"}', 'UTF8'),
      now(), now() + interval '1 day'
    FROM generate_series(1, $LIVE_RECORDS)"
  echo "# new-key on a database of $LIVE_RECORDS live records:"
  line=$("$BIN/loadgen" --addr "$addr" --scenario new-key --connections "$CONNECTIONS" --duration "$DURATION")
  echo "server $line"
  live=$(rps_of "$line"); live_p99=$(p99_of "$line")
  kill "$pid"; wait "$pid" || true
  rm -rf "$dir"
  pg_filled floor-keyed "INSERT INTO keyed_charges (id, caller, key, amount, currency, description, created)
    SELECT 'ch_' || replace(gen_random_uuid()::text, '-', ''), $caller, gen_random_uuid()::text,
      1999, 'usd', 'cart 42', extract(epoch FROM now())::bigint
    FROM generate_series(1, $LIVE_RECORDS)"
  line=$("$BIN/loadgen" --addr "$addr" --scenario new-key --connections "$CONNECTIONS" --duration "$DURATION")
  echo "floor-keyed $line"
  live_floor=$(rps_of "$line"); live_floor_p99=$(p99_of "$line")
  echo "ratio new-key on $LIVE_RECORDS records / minimal idempotent floor on as many: $(ratio "$live" "$live_floor")"
  echo "ratio new-key p99 on $LIVE_RECORDS records / minimal idempotent floor p99 on as many: $(ratio "$live_p99" "$live_floor_p99")"
  kill "$pid"; wait "$pid" || true
  rm -rf "$dir"
fi

if [ "${SWEEP:-1}" = 1 ] && [ -z "${BENCH_POSTGRES_URL:-}" ]; then
  # The sweeper under load: new-key p99 while 1 000 000 expired records are
  # deleted, against the same load without the backlog.
  RECORDS=${RECORDS:-1000000}
  filled_server fill-expired "$RECORDS" --sweep-interval 1s
  sleep 1.2 # the first sweep starts
  echo "# new-key while the sweeper deletes $RECORDS expired records:"
  "$BIN/loadgen" --addr "$addr" --scenario new-key --connections "$CONNECTIONS" --duration "$DURATION"
  curl -s "http://$addr/metrics" | grep '^idempotency_records_expired_total' || true
  kill "$pid"; wait "$pid" || true
  rm -rf "$dir"
fi

if [ "${RECEIPTS:-1}" = 1 ]; then
  BIN="$BIN" DURATION="$DURATION" DURABILITY="$DURABILITY" scripts/bench-receipts.sh
fi
