#!/usr/bin/env bash
# Checks the running server against its own OpenAPI document with
# schemathesis (docs/OPENAPI.md): every check, every phase (examples,
# coverage, fuzzing, and the stateful phase along the document's links),
# a fixed seed and a bounded number of examples so that a run takes well
# under two minutes. Exits non-zero on any finding.
#
# Installs schemathesis 4.x into .tools/venv when it is not there, builds
# and starts the debug server on a free port with a temporary SQLite
# database (chaos mode off: X-Chaos would exit the process), runs, and
# stops the server. Arguments are passed on to `schemathesis run`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# The version the seed and the settings were tuned with.
version=4.32.5
venv=.tools/venv
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -qF "version $version"; then
    rm -rf "$venv"
    if ! python3 -m venv "$venv" 2>/dev/null; then
        # Debian's python3 keeps venv in a package of its own.
        as_root apt-get install -y python3-venv >&2 ||
            { as_root apt-get update >&2 && as_root apt-get install -y python3-venv >&2; }
        rm -rf "$venv"
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet "schemathesis==$version"
fi

cargo build --locked --quiet -p server

work="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
# Hypothesis keeps its files here, not in the checkout.
export HYPOTHESIS_STORAGE_DIRECTORY="$work/hypothesis"

mkdir -p "$work/www"
echo '<!doctype html><title>schemathesis</title>' > "$work/www/index.html"
# Stdout carries only the `listening on http://ADDR` line. The fuzzer is
# one caller sending thousands of requests: no per-caller rate limit, or
# its 429s would stand in for the answers it checks.
exec 3< <(exec target/debug/server \
    --listen 127.0.0.1:0 \
    --database "sqlite://$work/shop.db" \
    --durability relaxed \
    --www "$work/www" \
    --caller-rate 0 \
    2> "$work/server.log")
server_pid=$!
if ! read -r -t 60 line <&3 || [[ "$line" != "listening on http://"* ]]; then
    cat "$work/server.log" >&2
    echo "schemathesis.sh: the server did not start" >&2
    exit 1
fi
addr="${line#listening on http://}"

token="schemathesis-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
status=0
"$venv/bin/schemathesis" --config-file scripts/schemathesis.toml --no-color run \
    "http://$addr/openapi.json" \
    --header "Authorization: Bearer $token" \
    "$@" || status=$?
if [ "$status" -ne 0 ]; then
    echo "schemathesis.sh: findings above; the server's log follows" >&2
    tail -n 50 "$work/server.log" >&2
fi
exit "$status"
