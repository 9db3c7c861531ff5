#!/usr/bin/env bash
# Installs what building and testing client-wasm needs, one step after the
# other, stopping at the first that fails (and naming it). Run it as its own
# process, never as a function or subshell of a script that tests its
# outcome: inside `if`, `||`, `&&` or `!` bash ignores `set -e` even where it
# is set again, and every failed step but the last would go unnoticed.
# scripts/wasm-tools.sh runs it and sets PATH; see there for the steps.
set -Eeuo pipefail
WASM_TOOLS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BINARYEN_VERSION=132
ESBUILD_VERSION=0.28.2
GECKODRIVER_VERSION=0.37.1
cd "$WASM_TOOLS_ROOT"
export PATH="$WASM_TOOLS_ROOT/.tools/node_modules/.bin:$HOME/.cargo/bin:$PATH"
say() { echo "wasm-tools: $*" >&2; }
# The step that broke, by name, before set -e ends the script.
trap 'say "FAILED (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# 1. The wasm target.
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    say "adding the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown >&2
fi

# 2. wasm-pack.
if ! command -v wasm-pack >/dev/null 2>&1; then
    say "installing wasm-pack (about 2.5 min)"
    cargo install wasm-pack --locked >&2
fi

# 3. wasm-bindgen CLI at the version of the crate in Cargo.lock: wasm-pack
#    uses the one on PATH only when the versions are equal.
local_version="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock 2>/dev/null || true)"
if [ -z "$local_version" ]; then
    cargo metadata --format-version 1 >/dev/null # writes Cargo.lock
    local_version="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)"
fi
if [ "$(wasm-bindgen --version 2>/dev/null || true)" != "wasm-bindgen $local_version" ]; then
    say "installing wasm-bindgen-cli $local_version (about 3 min)"
    # Not --locked: one of its locked dependencies is missing from the
    # registry mirror here.
    cargo install wasm-bindgen-cli --version "$local_version" --force >&2
fi

# 4. wasm-opt >= 116 from npm, first on PATH (Node.js and npm from
#    Debian if the machine has none).
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    say "installing nodejs and npm"
    as_root apt-get update >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y nodejs npm >&2
fi
opt_version="$("$WASM_TOOLS_ROOT/.tools/node_modules/.bin/wasm-opt" --version 2>/dev/null | awk '{ print $3 }' || true)"
if ! [[ "$opt_version" =~ ^[0-9]+$ ]] || ((opt_version < 116)); then
    say "installing binaryen@$BINARYEN_VERSION from npm into .tools/"
    mkdir -p "$WASM_TOOLS_ROOT/.tools"
    npm install --prefix "$WASM_TOOLS_ROOT/.tools" --no-audit --no-fund --loglevel=error \
        "binaryen@$BINARYEN_VERSION" >&2
fi

# 4b. esbuild from npm into .tools/: bundles and minifies the package's
#     JavaScript (client-wasm/package/build.mjs).
if [ "$("$WASM_TOOLS_ROOT/.tools/node_modules/.bin/esbuild" --version 2>/dev/null || true)" != "$ESBUILD_VERSION" ]; then
    say "installing esbuild@$ESBUILD_VERSION from npm into .tools/"
    mkdir -p "$WASM_TOOLS_ROOT/.tools"
    npm install --prefix "$WASM_TOOLS_ROOT/.tools" --no-audit --no-fund --loglevel=error \
        "esbuild@$ESBUILD_VERSION" >&2
fi

# 5. Chromium and its driver, for wasm-pack test --chrome.
if [ "${WASM_TOOLS_BROWSER:-1}" != 0 ]; then
    if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
        say "installing chromium and chromium-driver (about 35 s)"
        as_root apt-get update >&2
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver >&2
    fi
    # 6. Firefox ESR and geckodriver, for wasm-pack test --firefox and the
    #    stories in Firefox (client-wasm/webdriver.json points at
    #    /usr/bin/firefox-esr). geckodriver from crates.io: its npm package
    #    downloads from the internet.
    if ! command -v firefox-esr >/dev/null 2>&1; then
        say "installing firefox-esr (about 20 s)"
        as_root apt-get update >&2
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y firefox-esr >&2
    fi
    if ! command -v geckodriver >/dev/null 2>&1; then
        say "installing geckodriver $GECKODRIVER_VERSION (about 3.5 min)"
        cargo install geckodriver --version "$GECKODRIVER_VERSION" >&2
    fi
    # 7. WebKit (Safari's engine): Debian's WebKitWebDriver, which drives
    #    WebKitGTK's MiniBrowser, and Xvfb, the virtual display MiniBrowser
    #    needs (it has no headless mode), for the browser tests and the
    #    stories in WebKit; xauth by name, which xvfb-run needs and xvfb
    #    only recommends.
    if ! command -v WebKitWebDriver >/dev/null 2>&1 || ! command -v xvfb-run >/dev/null 2>&1 ||
        ! command -v xauth >/dev/null 2>&1; then
        say "installing webkit2gtk-driver, xvfb and xauth"
        as_root apt-get update >&2
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y webkit2gtk-driver xvfb xauth >&2
    fi
fi
