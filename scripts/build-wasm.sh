#!/usr/bin/env bash
# Builds the browser client: the npm package `exactly-once-client` in
# client-wasm/pkg/ (client_wasm.js, which holds the wasm's bytes,
# client_wasm.d.ts, README.md, package.json), copied into www/pkg/ for the
# demo page; then prints its size: raw, gzip -9 and brotli -q 11.
#
#   scripts/build-wasm.sh            build and print sizes
#   scripts/build-wasm.sh --check    also fail when wasm + JS is over the
#                                    budget (BUDGET_BYTES below, brotli)
#   WASM_FETCH=1 scripts/build-wasm.sh
#                                    the previous layout, for A/B runs: the
#                                    module fetches client_wasm_bg.wasm
#
# Steps, each measured in docs/BENCHMARKS-JOURNAL.md ("Client size levers"):
#   1. cargo build --profile wasm-release (root Cargo.toml: opt-level z,
#      LTO, one codegen unit, panic abort), so the server's release
#      profile stays as it is;
#   2. wasm-bindgen --target web;
#   3. wasm-opt -Oz (binaryen from .tools/, see scripts/wasm-tools.sh),
#      which also gives every import and export a one- or two-letter name,
#      and drops the producers and target-features sections;
#   4. client-wasm/package/build.mjs: the same names in the glue, then
#      esbuild bundles and minifies the glue and client-wasm/js/browser.js
#      into one module, writes the wasm's bytes into it, and writes the
#      package around it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

WASM_TOOLS_BROWSER=0 . scripts/wasm-tools.sh

BUDGET_BYTES=$((20 * 1024))
check=0
[ "${1:-}" = --check ] && check=1

target="${CARGO_TARGET_DIR:-$ROOT/target}"
cargo build --locked --quiet -p client-wasm --target wasm32-unknown-unknown --profile wasm-release
bindgen="$target/client-wasm-bindgen"
rm -rf "$bindgen"
wasm-bindgen --target web --no-typescript --out-dir "$bindgen" \
    "$target/wasm32-unknown-unknown/wasm-release/client_wasm.wasm"
# The features wasm-bindgen's output uses (externref tables, bulk memory,
# multi-value returns); wasm-opt must be told, the custom section that
# would tell it is dropped here.
wasm-opt -Oz \
    --enable-bulk-memory --enable-reference-types --enable-multivalue \
    --enable-nontrapping-float-to-int --enable-sign-ext --enable-mutable-globals \
    --minify-imports-and-exports-and-modules \
    --strip-producers --strip-target-features \
    "$bindgen/client_wasm_bg.wasm" -o "$bindgen/client_wasm_opt.wasm" >"$bindgen/names.json"
node client-wasm/package/build.mjs "$bindgen" "$bindgen/client_wasm_opt.wasm" \
    "$bindgen/names.json" client-wasm/pkg

# The demo page loads the client from www/pkg/.
rm -rf www/pkg
cp -r client-wasm/pkg www/pkg

if ! command -v brotli >/dev/null 2>&1; then
    echo "build-wasm: installing brotli for the size report" >&2
    if [ "$(id -u)" = 0 ]; then apt-get install -y brotli >&2 || { apt-get update >&2 && apt-get install -y brotli >&2; }
    else sudo apt-get install -y brotli >&2; fi
fi

size() { wc -c <"$1" | tr -d ' '; }
gz() { gzip -9 -c "$1" | wc -c | tr -d ' '; }
br() { brotli -q 11 -c "$1" | wc -c | tr -d ' '; }

# What a page loads is client_wasm.js, the wasm's bytes inside it (or,
# built with WASM_FETCH=1, client_wasm.js and client_wasm_bg.wasm beside
# it); the wasm alone is printed for reference.
js=client-wasm/pkg/client_wasm.js
files=("$js")
[ -f client-wasm/pkg/client_wasm_bg.wasm ] && files+=(client-wasm/pkg/client_wasm_bg.wasm)
total_br=0
total_raw=0
total_gz=0
printf '| file | raw | gzip -9 | brotli -q 11 |\n|---|---:|---:|---:|\n'
for f in "${files[@]}"; do
    raw=$(size "$f") gzipped=$(gz "$f") brotlied=$(br "$f")
    printf '| %s | %d | %d | %d |\n' "${f#client-wasm/pkg/}" "$raw" "$gzipped" "$brotlied"
    total_raw=$((total_raw + raw))
    total_gz=$((total_gz + gzipped))
    total_br=$((total_br + brotlied))
done
printf '| **what a page loads** | %d | %d | **%d** |\n' "$total_raw" "$total_gz" "$total_br"
wasm="$bindgen/client_wasm_opt.wasm"
printf '| (the wasm module alone) | %d | %d | %d |\n' "$(size "$wasm")" "$(gz "$wasm")" "$(br "$wasm")"
printf '\nbudget: %d bytes brotli; used %d (%d.%d KB)\n' \
    "$BUDGET_BYTES" "$total_br" "$((total_br / 1024))" "$(((total_br % 1024) * 10 / 1024))"

if [ "$check" = 1 ]; then
    # The result line cargo's runners print, so scripts/test-total.sh
    # counts the check.
    if [ "$total_br" -gt "$BUDGET_BYTES" ]; then
        echo "build-wasm: over the size budget" >&2
        echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out (client size budget)"
        exit 1
    fi
    echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out (client size budget)"
fi
