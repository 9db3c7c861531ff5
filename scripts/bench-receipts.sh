#!/usr/bin/env bash
# The receipts cases of docs/BENCHMARKS.md, run by scripts/bench.sh after
# the others (RECEIPTS=0 skips them there), or alone:
#   scripts/bench-receipts.sh
#       receipts/s into MailDev: the floor (a plain lettre sender, pooled,
#       over the relay's connections), the relay, their ratio; then the
#       provider case's backlog: how long after a DURATION of checkouts
#       with receipts until the outbox is empty
#   RECEIPT_MESSAGES=2000 DURATION=10s PROVIDER=1 scripts/bench-receipts.sh
#   BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:PORT/postgres scripts/bench-receipts.sh
#   BIN=target/release scripts/bench-receipts.sh   (binaries already built)
# Each case gets a fresh MailDev (.tools/node_modules/.bin/maildev, or
# MAILDEV_BIN; scripts/maildev.sh installs it) and a fresh database.
# Nothing else may run on the machine meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
MESSAGES=${RECEIPT_MESSAGES:-2000}
DURATION=${DURATION:-10s}
DURABILITY=${DURABILITY:-full}
# The relay's SMTP connections: CONNECTIONS in server/src/outbox.rs.
SMTP_CONNECTIONS=4
MAILDEV=${MAILDEV_BIN:-.tools/node_modules/.bin/maildev}
if [ -z "${BIN:-}" ]; then
  cargo build --release -p server -p psp -p bench --bins -q
  BIN=${CARGO_TARGET_DIR:-target}/release
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

fresh_database() { # DIR -> a database URL
  if [ -n "${BENCH_POSTGRES_URL:-}" ]; then
    local name="bench_$(date +%s%N)"
    psql -q "$BENCH_POSTGRES_URL" -c "CREATE DATABASE $name"
    echo "${BENCH_POSTGRES_URL%/*}/$name"
  else
    echo "sqlite://$1/shop.db"
  fi
}

# start_maildev: a fresh MailDev; sets $mdir, $mpid, $smtp_port, $web_port.
start_maildev() {
  mdir=$(mktemp -d); smtp_port=$(free_port); web_port=$(free_port)
  "$MAILDEV" --smtp "$smtp_port" --web "$web_port" --ip 127.0.0.1 --web-ip 127.0.0.1 \
    --mail-directory "$mdir/mail" >"$mdir/out" 2>&1 &
  mpid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$web_port/api/email" >/dev/null 2>&1 && return
    sleep 0.05
  done
  echo "MailDev did not come up:" >&2; cat "$mdir/out" >&2; exit 1
}
stop_maildev() { kill "$mpid"; wait "$mpid" || true; rm -rf "$mdir"; }

# start_server [flags...]: a server on a fresh database; sets $sdir, $spid, $addr.
start_server() {
  sdir=$(mktemp -d)
  local database; database=$(fresh_database "$sdir")
  # loadgen is one caller: no limit on its rate or its receipts.
  RUST_LOG=warn "$BIN/server" --listen 127.0.0.1:0 --database "$database" \
    --durability "$DURABILITY" --www "$sdir" --caller-rate 0 --caller-receipts 0 \
    "$@" >"$sdir/out" 2>"$sdir/err" &
  spid=$!
  for _ in $(seq 100); do grep -q listening "$sdir/out" 2>/dev/null && break; sleep 0.05; done
  addr=$(sed -n 's#^listening on http://##p' "$sdir/out")
  [ -n "$addr" ] || { echo "the server did not start:" >&2; cat "$sdir/err" >&2; exit 1; }
}
stop_server() { kill "$spid"; wait "$spid" || true; rm -rf "$sdir"; }

per_s() { sed -n 's/.* per_s=\([0-9]*\).*/\1/p' <<<"$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

echo "# receipts into MailDev: ${BENCH_POSTGRES_URL:+postgres }durability=$DURABILITY messages=$MESSAGES smtp_connections=$SMTP_CONNECTIONS"
start_maildev
line=$("$BIN/receipts" floor --smtp "127.0.0.1:$smtp_port" --connections "$SMTP_CONNECTIONS" --messages "$MESSAGES")
echo "$line"; floor=$(per_s "$line")
stop_maildev

start_maildev
start_server --smtp-url "smtp://127.0.0.1:$smtp_port"
line=$("$BIN/receipts" relay --addr "$addr" --maildev "http://127.0.0.1:$web_port" --messages "$MESSAGES")
echo "$line"; relay=$(per_s "$line")
stop_server
stop_maildev
echo "ratio receipts relay / MailDev floor: $(ratio "$relay" "$floor") (target >= 0.8)"

if [ "${PROVIDER:-1}" = 1 ]; then
  # The provider case of scripts/bench.sh (psp --latency 200ms, 256
  # checkouts at once, DURATION), every charge with a receipt_email; then
  # how long until the outbox is empty and the inbox holds every receipt.
  pdir=$(mktemp -d)
  "$BIN/psp" --listen 127.0.0.1:0 --database "sqlite://$pdir/psp.db" --latency 200ms \
    >"$pdir/out" 2>"$pdir/err" &
  ppid=$!
  for _ in $(seq 100); do grep -q listening "$pdir/out" 2>/dev/null && break; sleep 0.05; done
  psp_url=$(sed -n 's#^listening on ##p' "$pdir/out")
  start_maildev
  start_server --psp-url "$psp_url" --smtp-url "smtp://127.0.0.1:$smtp_port"
  echo "# the provider case with a receipt per charge, 256 connections, $DURATION; then the backlog:"
  echo "server $("$BIN/loadgen" --addr "$addr" --scenario new-key --connections 256 --duration "$DURATION" --receipts)"
  "$BIN/receipts" drain --addr "$addr" --maildev "http://127.0.0.1:$web_port"
  stop_server
  stop_maildev
  kill "$ppid"; wait "$ppid" || true
  rm -rf "$pdir"
fi
