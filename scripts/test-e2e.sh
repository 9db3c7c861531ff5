#!/usr/bin/env bash
# The end-to-end stories (tests/, package e2e): the real server process
# (with the payment provider simulator and MailDev for the provider
# stories) and the checkout page in real browsers (headless Chromium and
# Firefox, WebKit's MiniBrowser on a virtual display), one story per test,
# every story in each engine.
#
# Installs what is missing (wasm target and tools, chromium and
# chromium-driver, firefox-esr and geckodriver, webkit2gtk-driver and xvfb,
# MailDev, axe-core), builds the
# browser client into www/pkg/, the debug server and the psp simulator,
# then runs the stories one at a time, all of them in Chromium, then in
# Firefox, then in WebKit: they time the page's 3 s client timeout and restart
# servers, which a loaded 2-core machine must not skew. Prints each
# engine's wall time. Screenshots (STORY-ENGINE.png) and the logs of the
# server and the drivers land in target/e2e/.
#
#   scripts/test-e2e.sh                          every story, every engine
#   scripts/test-e2e.sh two_tabs                 the stories whose name contains it
#   E2E_BROWSERS=firefox scripts/test-e2e.sh     one engine
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf 'test-e2e: %s\n' "$*" >&2; }

# wasm target, wasm-pack, wasm-bindgen-cli, binaryen, chromium,
# chromedriver, firefox-esr, geckodriver, WebKitWebDriver, xvfb-run.
. scripts/wasm-tools.sh
scripts/maildev.sh
# axe-core, which the accessibility story runs in the browser.
AXE_VERSION=4.14.1
if [ "$(node -p "require('$ROOT/.tools/node_modules/axe-core/package.json').version" 2>/dev/null)" != "$AXE_VERSION" ]; then
    say "installing axe-core@$AXE_VERSION from npm into .tools/"
    npm install --prefix "$ROOT/.tools" --no-audit --no-fund --loglevel=error "axe-core@$AXE_VERSION" >&2
fi

say "building the browser client into www/pkg/"
scripts/build-wasm.sh >/dev/null
say "building the server and the payment provider simulator"
cargo build --locked -p server -p psp

# `== STEP` headers: scripts/test-total.sh counts each engine's stories
# under its own name in scripts/test.sh's closing total.
printf '\n== %s\n' "end to end: the harness's own tests"
cargo test --locked -p e2e --lib --test scripts -- "$@"

engines="${E2E_BROWSERS:-chromium,firefox,webkit}"
failed=()
timings=()
for engine in ${engines//,/ }; do
    printf '\n== %s\n' "end to end: the stories in $engine"
    say "screenshots and logs in ${CARGO_TARGET_DIR:-target}/e2e/"
    started=$SECONDS
    if E2E_BROWSERS="$engine" cargo test --locked -p e2e --test stories -- --test-threads=1 "$@"; then
        timings+=("$engine: passed in $((SECONDS - started)) s")
    else
        timings+=("$engine: FAILED after $((SECONDS - started)) s")
        failed+=("$engine")
    fi
done
for line in "${timings[@]}"; do say "$line"; done
if ((${#failed[@]})); then
    say "stories failed in: ${failed[*]}"
    exit 1
fi
