#!/usr/bin/env bash
# The demo: builds the browser client (www/pkg/) and the release server,
# then runs the server with --chaos on http://127.0.0.1:3000 and
# sqlite://data/shop.db, restarting it whenever it exits, as an orchestrator
# would, until Ctrl-C. So "Kill the server" in the page's chaos panel shows
# the page's retries reaching a new process.
#
#   scripts/demo.sh                      the defaults above
#   scripts/demo.sh --listen 0.0.0.0:8080 --database sqlite:///tmp/shop.db
#                                        any other server flags are passed on
#   LISTEN=127.0.0.1:4000 scripts/demo.sh   (the server's env variables work too)
#
# How to replay each failure by hand: docs/DEMO.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf 'demo: %s\n' "$*" >&2; }

say "building the browser client into www/pkg/"
scripts/build-wasm.sh >/dev/null
say "building the release server"
cargo build --release -p server

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
stop() {
    stopping=1
    # Background jobs of a script ignore SIGINT: ask the server with SIGTERM,
    # which drains in-flight requests and exits 0.
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
}
trap stop INT TERM

printf '\n  Once Shop demo: open http://%s  (Ctrl-C stops)\n\n' "$listen" >&2
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
        say "stopped"
        exit 0
    fi
    if [ "$code" = 137 ]; then
        say "the server exited with 137 (killed after commit by chaos): restarting it on the same database"
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
