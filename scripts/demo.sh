#!/usr/bin/env bash
# The demo: builds the browser client (www/pkg/), the release server and
# the payment provider simulator, installs MailDev when it is missing, then
# runs, until Ctrl-C:
#
#   - psp, the payment provider simulator, on 127.0.0.1:3001 with 300 ms of
#     latency per charge (sqlite://data/psp.db; log data/psp.log);
#   - MailDev, where the receipts go: SMTP on 127.0.0.1:1025, its inbox on
#     http://127.0.0.1:1080/ (mail in data/maildev/; log data/maildev.log);
#   - the server with --chaos on http://127.0.0.1:3000 and
#     sqlite://data/shop.db, charging cards at psp and e-mailing receipts
#     to MailDev, restarted whenever it exits, as an orchestrator would: so
#     "Kill the server" in the page's chaos panel shows the page's retries
#     reaching a new process.
#
# The server is wired to psp and MailDev through its environment
# (PSP_URL, SMTP_URL, and OPERATION_LEASE=5s, COMPLETE_INTERVAL=2s so that
# an operation a killed server left behind is taken over within seconds),
# so any server flag after the command still wins:
#
#   scripts/demo.sh                      the defaults above
#   scripts/demo.sh --listen 127.0.0.1:8080 --database sqlite:///tmp/shop.db
#                                        any other server flags are passed on
#                                        (off loopback, --chaos needs
#                                        --chaos-on-any-address as well)
#   PSP_LISTEN=127.0.0.1:4001 MAILDEV_SMTP_PORT=2025 MAILDEV_WEB_PORT=2080 scripts/demo.sh
#                                        other local ports for psp and MailDev
#
# The shop's address is printed with `?inbox=` MailDev's inbox, which the
# page links from each receipt. How to replay each failure by hand:
# docs/DEMO.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf 'demo: %s\n' "$*" >&2; }

psp_listen="${PSP_LISTEN:-127.0.0.1:3001}"
smtp_port="${MAILDEV_SMTP_PORT:-1025}"
inbox_port="${MAILDEV_WEB_PORT:-1080}"
inbox="http://127.0.0.1:${inbox_port}/"

say "building the browser client into www/pkg/"
scripts/build-wasm.sh >/dev/null
say "building the release server and psp"
cargo build --release -p server -p psp
scripts/maildev.sh

# The address to show: the last --listen given, else LISTEN, else the default.
listen="${LISTEN:-127.0.0.1:3000}"
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
        --listen) listen="${args[i + 1]:-$listen}" ;;
        --listen=*) listen="${args[i]#--listen=}" ;;
    esac
done

stopping=0
pid=
psp_pid=
maildev_pid=
stop() {
    stopping=1
    # Background jobs of a script ignore SIGINT: ask each with SIGTERM (the
    # server and psp drain in-flight requests and exit 0).
    for p in "$pid" "$psp_pid" "$maildev_pid"; do
        [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true
    done
}
trap stop INT TERM
trap 'stopping=1; stop' EXIT

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Waits up to 20 s for `check` while process `pid` lives; else gives up
# naming `what` and showing its log.
wait_for() {
    local what=$1 pid=$2 log=$3
    shift 3
    for _ in $(seq 200); do
        "$@" && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    say "$what did not start (is its port taken?); the end of $log:"
    tail -n 20 "$log" >&2 || true
    exit 1
}

mkdir -p data/maildev
say "starting psp on $psp_listen"
: >data/psp.out
target/release/psp --listen "$psp_listen" --database sqlite://data/psp.db --latency 300ms \
    >data/psp.out 2>>data/psp.log &
psp_pid=$!
wait_for psp "$psp_pid" data/psp.log grep -q '^listening on ' data/psp.out
psp_url="$(sed -n 's/^listening on //p' data/psp.out)"

say "starting MailDev: SMTP on 127.0.0.1:$smtp_port, inbox on $inbox"
.tools/node_modules/.bin/maildev --ip 127.0.0.1 --web-ip 127.0.0.1 \
    --smtp "$smtp_port" --web "$inbox_port" --mail-directory data/maildev \
    >>data/maildev.log 2>&1 &
maildev_pid=$!
wait_for MailDev "$maildev_pid" data/maildev.log port_open "$inbox_port"

export PSP_URL="${PSP_URL:-$psp_url}"
export SMTP_URL="${SMTP_URL:-smtp://127.0.0.1:$smtp_port}"
export OPERATION_LEASE="${OPERATION_LEASE:-5s}"
export COMPLETE_INTERVAL="${COMPLETE_INTERVAL:-2s}"

printf '\n  Once Shop demo: open http://%s/?inbox=%s\n' "$listen" "$inbox" >&2
printf '  receipts (MailDev inbox): %s\n' "$inbox" >&2
printf '  payment provider (psp):   %s/v1/charges is its ledger\n' "$psp_url" >&2
printf '  (Ctrl-C stops all three)\n\n' >&2
fast_failures=0
while :; do
    started=$SECONDS
    target/release/server --chaos "$@" &
    pid=$!
    code=0
    # `wait` returns early when a trapped signal arrives: wait until the
    # server has really exited.
    while kill -0 "$pid" 2>/dev/null; do
        wait "$pid" && code=0 || code=$?
    done
    pid=
    if [ "$stopping" = 1 ]; then
        wait "$psp_pid" "$maildev_pid" 2>/dev/null || true
        say "stopped"
        exit 0
    fi
    if [ "$code" = 137 ]; then
        say "the server exited with 137 (killed by chaos): restarting it on the same database"
        fast_failures=0
        continue
    fi
    if ((SECONDS - started < 3)); then
        fast_failures=$((fast_failures + 1))
        if ((fast_failures >= 5)); then
            say "the server keeps exiting at start (code $code); giving up. Is ${listen} already in use?"
            exit 1
        fi
    else
        fast_failures=0
    fi
    say "the server exited with code $code: restarting it in 1 s"
    sleep 1
done
