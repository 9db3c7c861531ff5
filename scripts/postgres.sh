#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests.
#   scripts/postgres.sh start DIR   # installs PostgreSQL from Debian if missing,
#                                   # starts a cluster in DIR, prints its URL
#   scripts/postgres.sh stop DIR
#   POSTGRES_MAX_CONNECTIONS=N …          # max_connections (300 by default)
set -euo pipefail
cmd=${1:?start or stop}
dir=${2:?a folder for the cluster}

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
as_pg() { # runs a command as the postgres user when we are root
  if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi
}

case "$cmd" in
start)
  if [ -z "$(pg_bin)" ]; then
    echo "postgres: installing PostgreSQL (Debian)" >&2
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2
  fi
  bin=$(pg_bin)
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then
    chown postgres "$dir"
    # The postgres user must be able to reach DIR (mktemp folders are 0700).
    p=$dir; while [ "$p" != / ]; do chmod o+x "$p"; p=$(dirname "$p"); done
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  as_pg "'$bin/initdb' -D '$dir/data' -A trust -U postgres --no-sync -E UTF8" >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
  as_pg "'$bin/pg_ctl' -D '$dir/data' -l '$dir/server.log' -w -t 30 \
    -o \"-p $port -k '$dir' -c listen_addresses=127.0.0.1 -c max_connections=${POSTGRES_MAX_CONNECTIONS:-300} -c max_wal_size=128MB -c min_wal_size=32MB\" start" >&2 ||
    { cat "$dir/server.log" >&2; exit 1; }
  echo "postgres://postgres@127.0.0.1:$port/postgres"
  ;;
stop)
  bin=$(pg_bin)
  as_pg "'$bin/pg_ctl' -D '$dir/data' -m fast -w stop" >&2 || true
  ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
