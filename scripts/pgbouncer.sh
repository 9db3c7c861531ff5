#!/usr/bin/env bash
# Debian's PgBouncer in transaction mode, with a small pool, in front of a
# PostgreSQL cluster of the tests (scripts/postgres.sh):
#   scripts/pgbouncer.sh start DIR POSTGRES_URL   # installs PgBouncer if missing,
#                                                 # prints the URL to reach the
#                                                 # cluster through it
#   scripts/pgbouncer.sh stop DIR
#   PGBOUNCER_POOL=16 scripts/pgbouncer.sh start …  # server connections per
#                                                 # database (4 by default)
# Every database name is passed through (`* =`), so the suites' own
# databases (CREATE DATABASE t_…) are reached through it too. The URL it
# prints carries `pgbouncer=true`, which tells the server to send no
# startup options, keep no session state and name no statement.
set -euo pipefail
cmd=${1:?start or stop}
dir=${2:?a folder for PgBouncer}

case "$cmd" in
start)
  target=${3:?the PostgreSQL URL to put it in front of}
  if ! command -v pgbouncer >/dev/null; then
    echo "pgbouncer: installing PgBouncer (Debian)" >&2
    flock /tmp/apt.lock apt-get install -y pgbouncer >&2 ||
      { flock /tmp/apt.lock apt-get update >&2 && flock /tmp/apt.lock apt-get install -y pgbouncer >&2; }
  fi
  # postgres://USER@HOST:PORT/DB
  hostport=${target#*@}; hostport=${hostport%%/*}
  user=${target#postgres://}; user=${user%%@*}
  pg_host=${hostport%:*}; pg_port=${hostport##*:}
  mkdir -p "$dir"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  printf '"%s" ""\n' "$user" >"$dir/users.txt"
  cat >"$dir/pgbouncer.ini" <<EOF
[databases]
* = host=$pg_host port=$pg_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
; small on purpose: transactions of many clients share a few server
; connections, so a client's consecutive transactions land on others
; (PGBOUNCER_POOL sets it: the benchmark's pool is a production one)
default_pool_size = ${PGBOUNCER_POOL:-4}
reserve_pool_size = 0
max_client_conn = 2000
max_db_connections = $((2 * ${PGBOUNCER_POOL:-4}))
; the suites make a database per test: idle server connections of the
; finished ones close at once, and all of them together stay well under
; the cluster's max_connections (clients wait for a free one meanwhile)
server_idle_timeout = 1
max_user_connections = 64
server_reset_query =
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
  if [ "$(id -u)" = 0 ]; then
    chown -R postgres "$dir"
    p=$dir; while [ "$p" != / ]; do chmod o+x "$p"; p=$(dirname "$p"); done
    su postgres -s /bin/sh -c "pgbouncer -d '$dir/pgbouncer.ini'" >&2
  else
    pgbouncer -d "$dir/pgbouncer.ini" >&2
  fi
  for _ in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null && break
    sleep 0.1
  done
  echo "postgres://$user@127.0.0.1:$port/postgres?pgbouncer=true"
  ;;
stop)
  if [ -f "$dir/pgbouncer.pid" ]; then
    kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true
  fi
  ;;
esac
