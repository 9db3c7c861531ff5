#!/usr/bin/env bash
# Tests the browser client end to end:
#
#   1. host tests: `cargo test -p exactly-once-retry -p client-wasm` (retry
#      policy, backoff, Retry-After, record format, messages);
#   2. the release build into client-wasm/pkg and www/pkg
#      (scripts/build-wasm.sh, with sizes);
#   3. browser tests: `wasm-pack test --headless --chrome client-wasm`, then
#      `--firefox`, then in WebKit (below), against a real `server --chaos` that this script starts
#      on a free port, with a temporary SQLite database, CORS for the test
#      runner's origin (the same address in both runs) and the release
#      build at /pkg/; beside it client-wasm/browser-support/portal.mjs, a
#      captive portal and a gateway in maintenance;
#   4. a smoke test of the release build (after wasm-opt, which wasm-pack
#      test never runs): headless Chromium, driven through chromedriver by
#      client-wasm/smoke/run.mjs, loads client-wasm/smoke/index.html and
#      www/pkg from that server and posts a charge twice.
#
# Installs what is missing first (scripts/wasm-tools.sh). Idempotent.
#
#   scripts/test-wasm.sh                      everything, every engine
#   TEST_WASM_BROWSERS=webkit scripts/test-wasm.sh abort
#                                             one engine, tests whose name
#                                             contains "abort"
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

. scripts/wasm-tools.sh

step() { printf '\n== %s\n' "$*"; }

step "host tests"
cargo test --locked -p exactly-once-retry -p client-wasm

step "release build into client-wasm/pkg and www/pkg"
scripts/build-wasm.sh

step "server"
. scripts/browser-env.sh
temp_env

# wasm-bindgen-test-runner serves the test page on WASM_BINDGEN_TEST_ADDRESS;
# pinning it tells the server which origin to allow.
runner_port="$(free_port)"
runner_origin="http://127.0.0.1:$runner_port"

# The release build is served at /pkg/: the smoke test and the browser
# tests that open other windows and frames load it from there.
mkdir -p "$tmp/www"
cp -r www/pkg "$tmp/www/pkg"
start_server "$tmp" "$tmp/www" --cors-origin "$runner_origin"
node client-wasm/browser-support/portal.mjs "$runner_origin" "$server_url" >"$tmp/portal.out" 2>&1 &
portal_pid=$!
if ! portal_url="$(listening "$portal_pid" "$tmp/portal.out")"; then
    echo "test-wasm: the portal did not start:" >&2
    cat "$tmp/portal.out" >&2
    exit 1
fi
echo "server at $server_url (chaos on, CORS for $runner_origin), portal at $portal_url"

# IDEM_TEST_SERVER and IDEM_TEST_PORTAL are read at compile time by the
# tests (option_env!). geckodriver serves one session at a time, and the
# runner's address is fixed (the server's CORS origin), so the engines run
# one after the other. TEST_WASM_BROWSERS picks the engines; arguments to
# this script are passed to the test binary (a name filter).
#
# WebKit: wasm-bindgen-test-runner knows no WebKitGTK driver by name, but
# it drives any W3C WebDriver server given as GECKODRIVER_REMOTE, opening
# its session with the capabilities of WASM_BINDGEN_TEST_WEBDRIVER_JSON as
# W3C `alwaysMatch` (WebKitWebDriver ignores the `moz:firefoxOptions` the
# runner adds). (Its Safari route sends no capabilities at all, and
# MiniBrowser's defaults block the windows the tab tests open.) So this
# script starts WebKitWebDriver on a virtual display
# (scripts/browser-env.sh), hands it over that way with MiniBrowser's
# options, and stops both after the run; `--firefox --geckodriver` only
# picks wasm-pack's W3C route, the runner uses the remote driver.
for browser in ${TEST_WASM_BROWSERS:-chrome firefox webkit}; do
    driver=("--$browser")
    remote=()
    if [ "$browser" = webkit ]; then
        step "browser tests (WebKit, MiniBrowser on Xvfb)"
        # The browser is the driver's child: the time zone is set here.
        TZ="${TEST_WASM_TZ:-America/New_York}" start_webkitdriver "$tmp"
        # --automation: MiniBrowser under WebDriver, with its data in
        # memory; windows opened by script allowed (Safari asks the user).
        cat >"$tmp/webdriver-webkit.json" <<JSON
{"webkitgtk:browserOptions": {
  "binary": "/usr/lib/$(uname -m)-linux-gnu/webkit2gtk-4.1/MiniBrowser",
  "args": ["--automation", "--javascript-can-open-windows-automatically=true"]}}
JSON
        driver=(--firefox --geckodriver "$(command -v WebKitWebDriver)")
        remote=(GECKODRIVER_REMOTE="$webkit_url" WASM_BINDGEN_TEST_WEBDRIVER_JSON="$tmp/webdriver-webkit.json")
        echo "WebKitWebDriver (MiniBrowser) at $webkit_url: the runner's \"Firefox\" below is this driver"
    else
        step "browser tests (headless $browser)"
    fi
    # Chromium only: a test page that never loaded is loaded once more.
    # The runner's HTTP server (tiny_http) can leave one of the page's
    # requests unread while its other connections sit idle, kept alive:
    # the page then never runs (the runner says "Loading scripts...Failed
    # to detect test as having been run") and chromedriver gives up after
    # 300 s. Seen on a loaded machine, with every test filter; no test
    # has run, so nothing is counted twice.
    for attempt in 1 2; do
        # TZ: a zone that is not GMT, so that an HTTP-date read as local
        # time shows (a_retry_after_date_is_waited_until).
        set +e
        env "${remote[@]}" \
            TZ="${TEST_WASM_TZ:-America/New_York}" \
            IDEM_TEST_SERVER="$server_url" \
            IDEM_TEST_PORTAL="$portal_url" \
            WASM_BINDGEN_TEST_ADDRESS="127.0.0.1:$runner_port" \
            WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-180}" \
            wasm-pack test --headless "${driver[@]}" client-wasm --locked -- "$@" 2>&1 |
            tee "$tmp/browser-tests.log"
        status=${PIPESTATUS[0]}
        set -e
        if [ "$status" != 0 ] && [ "$browser" = chrome ] && [ "$attempt" = 1 ] &&
            grep -q 'Loading scripts\.\.\.Failed to detect test as having been run' "$tmp/browser-tests.log"; then
            echo "test-wasm: the test page never loaded in $browser; loading it once more" >&2
            continue
        fi
        break
    done
    stop_webkitdriver
    if [ "$status" != 0 ]; then
        echo "test-wasm: browser tests failed in $browser; server log:" >&2
        tail -n 50 "$tmp/server.log" >&2
        exit "$status"
    fi
done

step "release build smoke test (headless Chromium, www/pkg)"
cp client-wasm/smoke/index.html "$tmp/www/smoke.html"
cp client-wasm/smoke/smoke.js "$tmp/www/smoke.js"
start_chromedriver "$tmp"
status=0
node client-wasm/smoke/run.mjs "$driver_url" "$server_url/smoke.html" || status=$?
# The result line cargo's runners print, so scripts/test-total.sh counts it.
if [ "$status" = 0 ]; then
    echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out (the release smoke test)"
else
    echo "test-wasm: the release build failed in the browser" >&2
    echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out (the release smoke test)"
    exit 1
fi
