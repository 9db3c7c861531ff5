# Helpers for the scripts that test the browser client against a real
# server (scripts/test-wasm.sh, scripts/test-package.sh). Source it from a
# bash script with `set -euo pipefail`; it defines functions only.
#
#   temp_env                   makes a temporary folder $tmp; on exit, ends
#                              the processes in server_pid, driver_pid and
#                              portal_pid and removes the folder
#   free_port                  prints a free TCP port on 127.0.0.1
#   listening PID FILE         waits until process PID prints "listening on
#                              URL" into FILE; prints the URL
#   start_server DIR WWW ARGS  starts `server` (the debug build; the release
#                              one with SERVER_PROFILE=release) on a free
#                              port with a SQLite database in DIR, chaos
#                              mode, relaxed durability, WWW served as
#                              static files and ARGS added; sets server_pid
#                              and server_url
#   start_chromedriver DIR     starts chromedriver on a free port, logging
#                              into DIR; sets driver_pid and driver_url
#   start_webkitdriver DIR     starts WebKitWebDriver on a virtual display
#                              (xvfb-run -a), both in a process group of
#                              their own, on a free port, logging into DIR;
#                              sets webkit_group and webkit_url
#   stop_webkitdriver          ends that group: driver, display, browser
#   stop_pids PID...           ends those processes (the ones started here)

temp_env() {
    tmp="$(mktemp -d)"
    server_pid=""
    driver_pid=""
    portal_pid=""
    webkit_group=""
    trap 'stop_webkitdriver; stop_pids "$server_pid" "$driver_pid" "$portal_pid"; rm -rf "$tmp"' EXIT
}

free_port() {
    node -e 'const s = require("net").createServer();
             s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

listening() {
    local url=""
    for _ in $(seq 1 300); do
        url="$(sed -n 's/^listening on //p' "$2" | head -n 1)"
        if [ -n "$url" ]; then
            echo "$url"
            return 0
        fi
        kill -0 "$1" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

start_server() {
    local dir="$1" www="$2"
    shift 2
    local profile="${SERVER_PROFILE:-debug}"
    if [ "$profile" = release ]; then
        cargo build --locked --quiet --release -p server
    else
        cargo build --locked --quiet -p server
    fi
    "${CARGO_TARGET_DIR:-$ROOT/target}/$profile/server" \
        --listen 127.0.0.1:0 \
        --database "sqlite://$dir/db/shop.db" \
        --chaos \
        --durability relaxed \
        --www "$www" \
        "$@" \
        >"$dir/server.out" 2>"$dir/server.log" &
    server_pid=$!
    if ! server_url="$(listening "$server_pid" "$dir/server.out")"; then
        echo "the server did not start:" >&2
        cat "$dir/server.log" >&2
        return 1
    fi
}

start_chromedriver() {
    local port
    port="$(free_port)"
    chromedriver --port="$port" >"$1/chromedriver.log" 2>&1 &
    driver_pid=$!
    driver_url="http://127.0.0.1:$port"
    for _ in $(seq 1 100); do
        node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
            "$driver_url/status" && return 0
        sleep 0.1
    done
    echo "chromedriver did not start:" >&2
    cat "$1/chromedriver.log" >&2
    return 1
}

start_webkitdriver() {
    local port
    port="$(free_port)"
    # setsid: a new process group (and session) led by xvfb-run, so that
    # Xvfb, the driver and the MiniBrowser it starts end together.
    setsid xvfb-run -a WebKitWebDriver --port="$port" >"$1/webkitdriver.log" 2>&1 &
    webkit_group=$!
    webkit_url="http://127.0.0.1:$port"
    for _ in $(seq 1 100); do
        node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
            "$webkit_url/status" && return 0
        sleep 0.1
    done
    echo "WebKitWebDriver did not start:" >&2
    cat "$1/webkitdriver.log" >&2
    return 1
}

stop_webkitdriver() {
    if [ -n "${webkit_group:-}" ]; then
        # SIGTERM, and time for the whole group to end: Xvfb removes its
        # display's lock file as it does (after a SIGKILL the file stays,
        # and the display number with it).
        kill -TERM -- "-$webkit_group" 2>/dev/null || true
        wait "$webkit_group" 2>/dev/null || true
        for _ in $(seq 1 60); do
            kill -0 -- "-$webkit_group" 2>/dev/null || break
            sleep 0.05
        done
        kill -KILL -- "-$webkit_group" 2>/dev/null || true
        webkit_group=""
    fi
}

stop_pids() {
    local pid
    for pid in "$@"; do
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
}
