#!/usr/bin/env bash
# Installs what the Patroni failover test needs, from Debian, when
# missing: Patroni, etcd (its server) and psycopg2 for Patroni's Python.
# PostgreSQL itself comes from scripts/postgres.sh. etcd's own service
# stays stopped (the test starts an etcd of its own).
#   scripts/patroni.sh
set -Eeuo pipefail
say() { echo "patroni: $*" >&2; }
trap 'say "FAILED (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
command -v patroni >/dev/null 2>&1 || missing+=(patroni)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
/usr/bin/python3 -c 'import psycopg2' 2>/dev/null || missing+=(python3-psycopg2)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} (Debian)"
    as_root apt-get update >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >&2
fi
