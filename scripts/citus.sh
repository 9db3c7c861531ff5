#!/usr/bin/env bash
# A Citus cluster on this machine for the tests: a coordinator and workers,
# each its own PostgreSQL cluster (scripts/postgres.sh) with the extension.
#   scripts/citus.sh start DIR [WORKERS]  # WORKERS defaults to 2; prints the
#                                         # coordinator's URL
#   scripts/citus.sh stop DIR
#   scripts/citus.sh stop-node DIR NODE   # NODE: coordinator, worker1, worker2…
#   scripts/citus.sh start-node DIR NODE  # starts a stopped node again
#   scripts/citus.sh kill-node DIR NODE   # SIGKILL to every process of the node at once
#   scripts/citus.sh add-worker DIR       # one more worker, registered; prints its URL
#   scripts/citus.sh errors DIR           # each node's last errors from its log (after a failed test)
#   scripts/citus.sh install              # only makes sure Citus is installed
#   scripts/citus.sh available            # exit 0 when Citus is installed or a source to build it is
#
# Citus is taken from PostgreSQL's own directories when it is installed
# (`pg_config --pkglibdir`/citus.so). Otherwise it is built from a source
# tarball, CITUS_TARBALL, else the newest citus-*.tar.gz in ../shared/vendor/
# beside the checkout (a development checkout's last fallback), with the
# patch beside the tarball (citus-VERSION-postgresql-*.patch) applied when
# the installed PostgreSQL's headers need it. It is built once into
# ${XDG_CACHE_HOME:-~/.cache}/exactly-once/citus-VERSION-pgMAJOR/ and later
# runs only copy the files from there. The build's Debian packages are
# installed when missing (the server headers at the installed server's
# exact version).
set -Eeuo pipefail
say() { echo "citus: $*" >&2; }
trap 'say "FAILED (exit $?) at line $LINENO: $BASH_COMMAND"' ERR
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
as_pg() { # runs a command as the postgres user when we are root
  if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi
}
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
pg_major() { basename "$(dirname "$(pg_bin)")"; }
pg_config_() { "$(pg_bin)/pg_config" "$@" 2>/dev/null || pg_config "$@"; }

installed() {
  [ -f "$(pg_config_ --pkglibdir)/citus.so" ] &&
    [ -f "$(pg_config_ --sharedir)/extension/citus.control" ]
}

apt_install() { # installs Debian packages, one apt at a time on this machine
  as_root flock /tmp/apt.lock env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >&2 ||
    { as_root flock /tmp/apt.lock apt-get update >&2 &&
      as_root flock /tmp/apt.lock env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >&2; }
}

build_packages() {
  local major server_version
  major=$(pg_major)
  # The headers must be those of the server that will load the library.
  server_version=$(dpkg-query -W -f='${Version}' "postgresql-$major" 2>/dev/null || true)
  local wanted=(libkrb5-dev liblz4-dev libzstd-dev libxml2-dev libxslt1-dev libselinux1-dev
    libpam0g-dev libreadline-dev libssl-dev zlib1g-dev flex make gcc patch)
  local missing=()
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  local dev="postgresql-server-dev-$major"
  if ! dpkg-query -W -f='${Status} ${Version}' "$dev" 2>/dev/null |
    grep -q "ok installed ${server_version:-.}"; then
    missing+=("$dev${server_version:+=$server_version}")
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing the build's packages: ${missing[*]} (Debian)"
    apt_install "${missing[@]}"
  fi
}

tarball() {
  if [ -n "${CITUS_TARBALL:-}" ]; then
    [ -f "$CITUS_TARBALL" ] || { say "CITUS_TARBALL=$CITUS_TARBALL: no such file"; exit 1; }
    echo "$CITUS_TARBALL"
    return
  fi
  local found
  found=$(ls "$repo"/../shared/vendor/citus-*.tar.gz 2>/dev/null | sort -V | tail -n 1 || true)
  [ -n "$found" ] || {
    say "Citus is not installed and there is no source to build it from: set CITUS_TARBALL to a" \
      "Citus release tarball (github.com/citusdata/citus/releases), or install Citus's packages"
    exit 1
  }
  echo "$found"
}

install() {
  if installed; then return; fi
  local tar version major cache
  tar=$(tarball)
  version=$(basename "$tar" .tar.gz) # citus-13.2.2
  major=$(pg_major)
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/exactly-once/$version-pg$major
  if [ ! -f "$cache/staged" ]; then
    build_packages
    say "building $version for PostgreSQL $major once, into $cache (about 2 minutes on 2 cores)"
    rm -rf "$cache" && mkdir -p "$cache"
    tar -xzf "$tar" -C "$cache"
    local src
    src=$(ls -d "$cache"/citus-*/ | head -n 1)
    local includes
    includes=$(pg_config_ --includedir-server)
    for p in "${tar%.tar.gz}"-postgresql-*.patch; do
      [ -f "$p" ] || continue
      # PostgreSQL 15.20 declares have_createdb_privilege itself; older minors do not.
      if grep -q have_createdb_privilege "$includes/commands/dbcommands.h" 2>/dev/null &&
        (cd "$src" && patch -p1 --dry-run -s <"$p" >/dev/null); then
        say "applying $(basename "$p")"
        (cd "$src" && patch -p1 -s <"$p")
      fi
    done
    (cd "$src" && ./configure --without-libcurl PG_CONFIG="$(pg_bin)/pg_config" >"$cache/configure.log" 2>&1) ||
      { tail -n 30 "$cache/configure.log" >&2; exit 1; }
    (cd "$src" && nice -n 10 make -j"$(nproc)" >"$cache/make.log" 2>&1) ||
      { grep -m 20 -i error "$cache/make.log" >&2; exit 1; }
    (cd "$src" && make install DESTDIR="$cache/stage" >"$cache/install.log" 2>&1) ||
      { tail -n 30 "$cache/install.log" >&2; exit 1; }
    rm -rf "$src" # keep only the staged files
    touch "$cache/staged"
  fi
  say "installing $version from $cache"
  as_root cp -a "$cache/stage/." /
  installed || { say "Citus still missing after installing it"; exit 1; }
}

psql_on() { # psql_on URL SQL: one statement, unaligned, no headers
  "$(pg_bin)/psql" "$1" -X -q -At -v ON_ERROR_STOP=1 -c "$2"
}

# Starts one node, NAME, in DIR/NAME (its URL in DIR/NAME/url), with Citus
# loaded and the extension created.
start_node_new() {
  local dir=$1 name=$2 url
  # Each test's server holds a pool on the coordinator, whose sessions
  # each hold connections to the workers.
  url=$(POSTGRES_MAX_CONNECTIONS=800 "$here/postgres.sh" start "$dir/$name")
  # Loaded at start: set, then restart once (pg_ctl restart keeps the
  # options postgres.sh started it with, port included).
  psql_on "$url" "ALTER SYSTEM SET shared_preload_libraries = 'citus'" >/dev/null
  psql_on "$url" "ALTER SYSTEM SET max_prepared_transactions = 200" >/dev/null
  # Citus runs a maintenance worker per database with the extension: the
  # tests make a database each.
  psql_on "$url" "ALTER SYSTEM SET max_worker_processes = 300" >/dev/null
  # A node started after a crash first syncs its data folder; with a
  # database per test and a shard per table and caller group, that is
  # over 100 000 files. One syncfs() of the file system instead of an
  # fsync() per file: the per-file way kept a killed worker's restart
  # past 60 s in a full run.
  psql_on "$url" "ALTER SYSTEM SET recovery_init_sync_method = 'syncfs'" >/dev/null
  restart_node "$dir" "$name"
  psql_on "$url" "CREATE EXTENSION IF NOT EXISTS citus" >/dev/null
  echo "$url" >"$dir/$name/url"
  echo "$url"
}

restart_node() { # also starts a stopped node, with the options of its first start
  local dir=$1 name=$2
  as_pg "'$(pg_bin)/pg_ctl' -D '$dir/$name/data' -l '$dir/$name/server.log' -w -t 120 restart" >/dev/null 2>&1 ||
    { say "$name did not start within 120 s; its log, without the clients turned away meanwhile:"
      grep -vE 'the database system is (starting up|not yet accepting connections)' "$dir/$name/server.log" | tail -n 30 >&2
      exit 1; }
}

host_port() { # postgres://USER@HOST:PORT/DB -> HOST PORT
  local hp=${1#*@}
  hp=${hp%%/*}
  echo "${hp%:*} ${hp##*:}"
}

add_worker() {
  local dir=$1 coordinator n url
  coordinator=$(cat "$dir/coordinator/url")
  n=1
  while [ -e "$dir/worker$n" ]; do n=$((n + 1)); done
  url=$(start_node_new "$dir" "worker$n")
  # The engine waits at most 5 s for a key another request holds
  # (lock_timeout, set in its coordinator sessions); Citus does not carry a
  # session's settings to the workers, where the rows are locked.
  psql_on "$url" "ALTER SYSTEM SET lock_timeout = '5s'" >/dev/null
  psql_on "$url" "SELECT pg_reload_conf()" >/dev/null
  read -r host port < <(host_port "$url")
  psql_on "$coordinator" "SELECT citus_add_node('$host', $port)" >/dev/null
  echo "$url"
}

case "${1:-}" in
install) install ;;
available)
  installed && exit 0
  [ -n "${CITUS_TARBALL:-}" ] && [ -f "$CITUS_TARBALL" ] && exit 0
  ls "$repo"/../shared/vendor/citus-*.tar.gz >/dev/null 2>&1
  ;;
start)
  dir=${2:?a folder for the cluster}
  workers=${3:-2}
  [ ! -e "$dir/coordinator" ] || { say "$dir already holds a cluster: stop it and remove the folder"; exit 1; }
  install
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  url=$(start_node_new "$dir" coordinator)
  read -r host port < <(host_port "$url")
  psql_on "$url" "SELECT citus_set_coordinator_host('$host', $port)" >/dev/null
  # A database created on the coordinator is created on the workers too
  # (the tests make one per test; each then needs the extension and the
  # nodes registered in it: testkit does that).
  psql_on "$url" "ALTER SYSTEM SET citus.enable_create_database_propagation = on" >/dev/null
  psql_on "$url" "SELECT pg_reload_conf()" >/dev/null
  for _ in $(seq "$workers"); do add_worker "$dir" >/dev/null; done
  say "a coordinator and $workers workers in $dir"
  echo "$url"
  ;;
stop)
  dir=${2:?the cluster folder}
  for node in "$dir"/worker* "$dir"/coordinator; do
    [ -d "$node/data" ] && "$here/postgres.sh" stop "$node"
  done
  ;;
errors)
  dir=${2:?the cluster folder}
  for node in "$dir"/coordinator "$dir"/worker*; do
    [ -f "$node/server.log" ] || continue
    echo "-- the last errors in ${node##*/}'s log ($node/server.log)"
    grep -E 'UTC \[[0-9]+\] (ERROR|FATAL|PANIC):|terminated by signal' "$node/server.log" |
      grep -vE 'the database system is (starting up|not yet accepting connections|shutting down)' |
      tail -n 25 || true
  done
  ;;
stop-node)
  dir=${2:?the cluster folder}; name=${3:?coordinator, worker1, worker2...}
  "$here/postgres.sh" stop "$dir/$name"
  ;;
start-node)
  dir=${2:?the cluster folder}; name=${3:?coordinator, worker1, worker2...}
  restart_node "$dir" "$name"
  ;;
kill-node)
  # As when the node's machine loses power: the postmaster and every
  # process of it at once (each works in the node's data folder, a
  # background worker forked meanwhile included), until none is left;
  # start-node then runs crash recovery.
  dir=${2:?the cluster folder}; name=${3:?coordinator, worker1, worker2...}
  data=$(cd "$dir/$name/data" && pwd -P)
  for _ in $(seq 400); do
    pids=$(for p in /proc/[0-9]*; do
      if [ "$(readlink "$p/cwd" 2>/dev/null)" = "$data" ]; then echo "${p#/proc/}"; fi
    done)
    [ -z "$pids" ] && break
    kill -9 $pids 2>/dev/null || true
    sleep 0.05
  done
  [ -z "$pids" ] || { say "kill-node: processes of $name left: $pids"; exit 1; }
  ;;
add-worker)
  add_worker "${2:?the cluster folder}"
  ;;
*) echo "usage: $0 start DIR [WORKERS] | stop DIR | stop-node DIR NODE | start-node DIR NODE | kill-node DIR NODE | add-worker DIR | errors DIR | install" >&2; exit 2 ;;
esac
