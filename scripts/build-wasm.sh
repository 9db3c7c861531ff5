#!/usr/bin/env bash
# Builds the browser client into www/pkg/ (www/pkg/client_wasm.js and
# client_wasm_bg.wasm) and prints its size: raw, gzip -9 and brotli -q 11.
#
#   scripts/build-wasm.sh            build and print sizes
#   scripts/build-wasm.sh --check    also fail when wasm + JS glue is over
#                                    the 25 KB brotli budget
#
# Release settings live in the root Cargo.toml's [profile.wasm-release]
# (opt-level z, LTO, one codegen unit, panic abort) so the server's release
# profile stays as it is; wasm-pack then runs wasm-opt -Oz (binaryen from
# .tools/, see scripts/wasm-tools.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

WASM_TOOLS_BROWSER=0 . scripts/wasm-tools.sh

BUDGET_BYTES=$((25 * 1024))
check=0
[ "${1:-}" = --check ] && check=1

# wasm-pack checks crates.io for a newer wasm-pack on every run; nothing else
# is downloaded because wasm-bindgen and wasm-opt are on PATH.
wasm-pack --quiet build client-wasm \
    --target web \
    --profile wasm-release \
    --no-pack \
    --out-dir ../www/pkg

if ! command -v brotli >/dev/null 2>&1; then
    echo "build-wasm: installing brotli for the size report" >&2
    if [ "$(id -u)" = 0 ]; then apt-get install -y brotli >&2 || { apt-get update >&2 && apt-get install -y brotli >&2; }
    else sudo apt-get install -y brotli >&2; fi
fi

size() { wc -c <"$1" | tr -d ' '; }
gz() { gzip -9 -c "$1" | wc -c | tr -d ' '; }
br() { brotli -q 11 -c "$1" | wc -c | tr -d ' '; }

wasm=www/pkg/client_wasm_bg.wasm
js=www/pkg/client_wasm.js
total_br=$(($(br "$wasm") + $(br "$js")))
printf '| file | raw | gzip -9 | brotli -q 11 |\n|---|---:|---:|---:|\n'
for f in "$wasm" "$js"; do
    printf '| %s | %d | %d | %d |\n' "${f#www/pkg/}" "$(size "$f")" "$(gz "$f")" "$(br "$f")"
done
printf '| **wasm + JS** | %d | %d | **%d** |\n' \
    "$(($(size "$wasm") + $(size "$js")))" "$(($(gz "$wasm") + $(gz "$js")))" "$total_br"
printf '\nbudget: %d bytes brotli; used %d (%d.%d KB)\n' \
    "$BUDGET_BYTES" "$total_br" "$((total_br / 1024))" "$(((total_br % 1024) * 10 / 1024))"

if [ "$check" = 1 ] && [ "$total_br" -gt "$BUDGET_BYTES" ]; then
    echo "build-wasm: over the size budget" >&2
    exit 1
fi
