#!/usr/bin/env bash
# The browser client's init time (docs/BENCHMARKS.md): a benchmark, not a
# test. Builds the package, serves it and client-wasm/smoke/init.html from
# the release `server`, and loads that page RUNS times (default 20) in
# headless Chromium, each in a new WebDriver session (a new profile: cold
# HTTP cache, no compiled-code cache). Prints each run, then the median of
# `await init(); new IdempotentClient()` (fetch, compile, instantiate,
# construct), its parts (init(), with the wasm's fetch alone when the
# package is built with WASM_FETCH=1; the constructor), the module's
# import before it, and the two together.
#
#   scripts/bench-client.sh
#   RUNS=50 scripts/bench-client.sh
#   WASM_FETCH=1 scripts/bench-client.sh   the previous layout (a second
#                                          request for client_wasm_bg.wasm)
#
# Nothing else should run on the machine meanwhile.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUNS=${RUNS:-20}

. scripts/wasm-tools.sh
. scripts/browser-env.sh
scripts/build-wasm.sh

temp_env
mkdir -p "$tmp/www"
cp -r client-wasm/pkg "$tmp/www/pkg"
cp client-wasm/smoke/init.html client-wasm/smoke/init.js "$tmp/www/"
SERVER_PROFILE=release start_server "$tmp" "$tmp/www"
start_chromedriver "$tmp"

for run in $(seq 1 "$RUNS"); do
    line="$(node client-wasm/smoke/run.mjs "$driver_url" "$server_url/init.html")"
    echo "run $run: ${line#SMOKE OK }" | sed -E 's/([0-9]+\.[0-9])[0-9]+/\1/g'
    echo "${line#SMOKE OK }" >>"$tmp/runs.jsonl"
done
node -e '
  const runs = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
  const median = (xs) => { xs.sort((a, b) => a - b); const m = xs.length >> 1; return xs.length % 2 ? xs[m] : (xs[m - 1] + xs[m]) / 2; };
  const f = (x) => x.toFixed(1);
  const all = (name) => runs.map((r) => r[name]);
  const init = all("initMs");
  console.log(`init (fetch, compile, instantiate, construct), ${runs.length} cold runs: median ${f(median(init))} ms, min ${f(Math.min(...init))}, max ${f(Math.max(...init))}`);
  const fetched = all("wasmFetchMs").filter((x) => x !== null);
  const fetch = fetched.length ? `its wasm fetch alone: ${f(median(fetched))} ms` : "no wasm fetch: the bytes are in the module";
  console.log(`  of which init(): median ${f(median(all("instantiateMs")))} ms (${fetch}); new IdempotentClient(): median ${f(median(all("constructMs")))} ms`);
  const total = runs.map((r) => r.importMs + r.initMs);
  console.log(`import and init together: median ${f(median(total))} ms`);
  console.log(`import of client_wasm.js before it: median ${f(median(all("importMs")))} ms`);
' "$tmp/runs.jsonl"
