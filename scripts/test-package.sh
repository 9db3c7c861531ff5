#!/usr/bin/env bash
# Tests the browser client as users get it, the npm package
# exactly-once-client (client-wasm/pkg/):
#
#   1. the size budget: scripts/build-wasm.sh --check (builds the package);
#   2. the tarball of `npm pack`: its files (the module compiles its own
#      wasm in Node), its package.json, declarations without `any`, a clear
#      module in pure ASCII that compiles read in another charset than UTF-8
#      (client-wasm/package/tests/manifest.mjs);
#   3. types: the Vite app's strict TypeScript consumer
#      (client-wasm/package/tests/app/main.ts), the checks of the
#      accounts and fetch API's types (app/types.ts), the package README's
#      quick start and every
#      TypeScript block of docs/CLIENT.md (the quick start and the React,
#      TanStack Query and ky recipes), as written, compile with
#      `tsc --strict` against the package installed from the tarball, with
#      the pinned types of React, TanStack Query and ky (app/package.json);
#   3c. TanStack Query's React binding: the manual's useMutation recipe, as
#      written, in a Vite + React app (tests/react-query-app) built by
#      Vite, double-clicked in headless Chromium: one charge;
#   3b. server-side rendering: Node imports the installed package as a
#      server bundle would, and nothing throws;
#   4. `vite build` of that app with Vite's defaults (no config file); the
#      small paying app client-wasm/package/tests/bundlers/pay.js built by
#      webpack 5 (production mode), esbuild (--minify) and Rollup
#      (node-resolve, terser), pay-file.js (the `wasm-file` export, the
#      wasm a file of its own) by webpack, and the Next.js app
#      (tests/next-app: a client component, `next build` to a static
#      export); each build's size printed (brotli), and the budget checked
#      inside an esbuild-minified bundle (bundlers/budget.js);
#   5. in headless Chromium against a real `server`: the Vite app pays,
#      and so does a plain <script type="module"> page
#      (client-wasm/smoke/index.html) that loads the unpacked tarball, each
#      bundler's build, the Next.js app (served by tests/serve.mjs in front
#      of the server: its pages have inline scripts), and every TypeScript
#      block of docs/CLIENT.md that pays (bundled by esbuild; the Apollo
#      recipe through the GraphQL gateway of
#      client-wasm/browser-support/portal.mjs);
#   6. the CommonJS path: Jest, with its defaults, require()s the package
#      and pays (tests/jest/pay.test.cjs).
#
# Vite and TypeScript install from npm into .tools/ once (then offline);
# the bundlers, Jest and the recipes' libraries are the app's pinned
# devDependencies (tests/app/package.json), installed with the tarball.
# Prints cargo's result line, so scripts/test-total.sh counts the checks.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VITE_VERSION=8.4.0
TYPESCRIPT_VERSION=7.0.2

. scripts/wasm-tools.sh
. scripts/browser-env.sh
step() { printf '\n== %s\n' "$*"; }

tools="$ROOT/.tools/node_modules"
if [ "$(node -p "require('$tools/vite/package.json').version" 2>/dev/null)" != "$VITE_VERSION" ] ||
    [ "$(node -p "require('$tools/typescript/package.json').version" 2>/dev/null)" != "$TYPESCRIPT_VERSION" ]; then
    echo "test-package: installing vite@$VITE_VERSION and typescript@$TYPESCRIPT_VERSION into .tools/" >&2
    npm install --prefix "$ROOT/.tools" --no-audit --no-fund --loglevel=error \
        "vite@$VITE_VERSION" "typescript@$TYPESCRIPT_VERSION" >&2
fi

step "client package: size budget"
scripts/build-wasm.sh --check

step "client package: tarball, types, Vite build, pages in headless Chromium"
temp_env

passed=0
failed=0
# check NAME COMMAND...: runs one check, quietly unless it fails.
check() {
    local name="$1"
    shift
    if "$@" >"$tmp/check.log" 2>&1; then
        echo "test $name ... ok"
        passed=$((passed + 1))
    else
        echo "test $name ... FAILED"
        sed 's/^/    /' "$tmp/check.log" | tail -n 40
        failed=$((failed + 1))
    fi
}

tarball="$tmp/$(cd client-wasm/pkg && npm pack --pack-destination "$tmp" --silent)"
mkdir -p "$tmp/unpacked"
tar -xzf "$tarball" -C "$tmp/unpacked"
package="$tmp/unpacked/package"
read -r version license < <(cargo metadata --no-deps --format-version 1 |
    node -e 'const m = JSON.parse(require("fs").readFileSync(0, "utf8"));
             const c = m.packages.find((p) => p.name === "client-wasm");
             console.log(c.version, c.license)')
manifest() { node client-wasm/package/tests/manifest.mjs "$package" "$version" "$license" "$1"; }
check the_tarball_holds_the_module_with_its_wasm_the_types_and_the_readme manifest files
check package_json_names_the_package_with_the_crates_version_and_license manifest manifest
check the_declarations_say_no_any_and_post_resolves_to_outcome_of_t manifest no-any
check the_modules_are_ascii_and_compile_when_read_in_another_charset manifest charset

# The app, with the package installed from the tarball (the package has no
# dependencies; the app's pinned devDependencies, the recipes' libraries,
# come from npm, once, then from its cache).
app="$tmp/app"
cp -r client-wasm/package/tests/app "$app"
install_tarball() { (cd "$app" && npm install --no-audit --no-fund --loglevel=error --no-save "$tarball"); }
check npm_installs_the_tarball install_tarball
cp -r client-wasm/package/tests/bundlers client-wasm/package/tests/next-app client-wasm/package/tests/jest "$app/"
# The first TypeScript block of a Markdown file.
ts_block() { awk '/^```ts$/ { inside = 1; next } /^```$/ { if (inside) exit } inside' "$1"; }
# The package README's quick start; every block of the manual, each in its
# own file (the names they leave to the page are in app/page.d.ts).
ts_block client-wasm/package/README.md >"$app/readme.ts"
node client-wasm/package/tests/blocks.mjs docs/CLIENT.md "$app"
check tsc_strict_compiles_a_consumer_the_quick_starts_and_the_recipes tsc -p "$app/tsconfig.json"
# As a server render does: import the package in Node, touch nothing else.
ssr_import() {
    (cd "$app" && node --input-type=module -e '
        const m = await import("exactly-once-client");
        for (const name of ["default", "initSync", "IdempotentClient", "IdempotencyError"]) {
          if (typeof m[name] !== "function") throw new Error(name + " is " + typeof m[name]);
        }
        if (typeof m.IdempotentClient.prototype.fetch !== "function") throw new Error("no fetch");
        console.log("imported on the server: " + Object.keys(m).sort().join(", "));')
}
check importing_the_package_on_the_server_throws_nothing ssr_import
vite_build() {
    (cd "$app" && vite build --logLevel warn)
}
check vite_build_bundles_the_package_with_its_defaults vite_build
# TanStack Query in React: docs/CLIENT.md's useMutation recipe, as written,
# rendered by a Vite + React app (tests/react-query-app) and built by Vite.
react_query_build() {
    cp -r client-wasm/package/tests/react-query-app "$app/"
    awk '$0 == "### TanStack Query in React: `useMutation` names the cart'"'"'s operation" { found = 1; next }
         found && /^```tsx$/ { inside = 1; next } inside && /^```$/ { exit } inside' docs/CLIENT.md \
        >"$app/react-query-app/recipe.tsx"
    [ -s "$app/react-query-app/recipe.tsx" ] &&
        (cd "$app/react-query-app" && vite build --logLevel warn --base ./ --emptyOutDir --outDir "$tmp/www/react-query")
}
check vite_builds_the_tanstack_query_react_recipe react_query_build

# The bundlers, each into a folder the server serves, and what each build
# weighs (brotli -q 11, as the budget counts).
mkdir -p "$tmp/www/esbuild" "$tmp/www/webpack" "$tmp/www/rollup" "$tmp/www/wasm-file" "$tmp/www/budget"
for dir in esbuild webpack rollup wasm-file; do cp "$app/bundlers/index.html" "$tmp/www/$dir/"; done
esbuild_build() { (cd "$app" && esbuild bundlers/pay.js --bundle --minify --format=esm --outfile="$tmp/www/esbuild/bundle.js" --log-level=warning); }
webpack_build() {
    (cd "$app" && npx --no-install webpack --mode production --entry "./$1" \
        --output-path "$tmp/www/$2" --output-filename bundle.js --no-stats)
}
rollup_build() { (cd "$app" && OUT="$tmp/www/rollup/bundle.js" npx --no-install rollup -c bundlers/rollup.config.mjs --silent); }
next_build() { (cd "$app/next-app" && NEXT_TELEMETRY_DISABLED=1 npx --no-install next build); }
check esbuild_bundles_and_minifies_an_app_that_pays esbuild_build
check webpack_5_bundles_an_app_that_pays webpack_build bundlers/pay.js webpack
check rollup_bundles_an_app_that_pays rollup_build
check webpack_bundles_the_wasm_file_export_with_its_wasm_beside webpack_build bundlers/pay-file.js wasm-file
check next_js_builds_a_client_component_that_pays next_build
br() { brotli -q 11 -c "$1" | wc -c | tr -d ' '; }
budget_build() {
    (cd "$app" && esbuild bundlers/budget.js --bundle --minify --format=esm --outfile="$tmp/www/budget/client.js" --log-level=warning)
    local used
    used="$(br "$tmp/www/budget/client.js")"
    echo "the client inside an esbuild-minified bundle: $used bytes brotli (budget 20480)"
    [ "$used" -le 20480 ]
}
check the_client_inside_an_esbuild_minified_bundle_is_within_the_budget budget_build
{
    printf '\n| build | files | raw | brotli -q 11 |\n|---|---|---:|---:|\n'
    row() {
        local name="$1" raw=0 brotli=0 files=""
        shift
        for f in "$@"; do
            [ -f "$f" ] || continue
            raw=$((raw + $(wc -c <"$f"))) brotli=$((brotli + $(br "$f"))) files="$files $(basename "$f")"
        done
        printf '| %s |%s | %d | %d |\n' "$name" "$files" "$raw" "$brotli"
    }
    row "the package as shipped" "$package/client_wasm.js"
    row "its re-export, esbuild --minify (the budget)" "$tmp/www/budget/client.js"
    row "pay.js, esbuild --minify" "$tmp/www/esbuild/bundle.js"
    row "pay.js, webpack 5 production" "$tmp/www/webpack/bundle.js"
    row "pay.js, Rollup + terser" "$tmp/www/rollup/bundle.js"
    row "pay-file.js (wasm-file), webpack 5" "$tmp/www/wasm-file/bundle.js" "$tmp/www/wasm-file/"*.wasm
    row "Vite app (main.ts)" "$app/dist/assets/"*.js
    row "Next.js app (all its chunks)" $(find "$app/next-app/out/_next" -name '*.js' 2>/dev/null)
} | tee "$tmp/sizes.md"

# One server for both pages: the Vite app at the root, the plain page and
# the unpacked tarball under /plain/.
mkdir -p "$tmp/www/plain"
cp -r "$app/dist/." "$tmp/www/"
cp -r "$package" "$tmp/www/plain/pkg"
cp client-wasm/smoke/index.html client-wasm/smoke/smoke.js "$tmp/www/plain/"
start_server "$tmp" "$tmp/www"
start_chromedriver "$tmp"
check the_vite_app_pays_in_headless_chromium \
    node client-wasm/smoke/run.mjs "$driver_url" "$server_url/index.html"
check a_plain_module_page_pays_with_the_unpacked_tarball \
    node client-wasm/smoke/run.mjs "$driver_url" "$server_url/plain/index.html"
for dir in esbuild webpack rollup wasm-file; do
    check "the_${dir//-/_}_build_pays_in_headless_chromium" \
        node client-wasm/smoke/run.mjs "$driver_url" "$server_url/$dir/index.html"
done

check the_tanstack_query_react_recipe_pays_once_on_a_double_click_in_headless_chromium \
    node client-wasm/smoke/run.mjs "$driver_url" "$server_url/react-query/index.html"

# The Next.js export, on one origin with the API (its pages have inline
# scripts, which the server's own pages' CSP refuses).
node client-wasm/package/tests/serve.mjs "$app/next-app/out" "$server_url" >"$tmp/serve.out" 2>&1 &
serve_pid=$!
next_url="$(listening "$serve_pid" "$tmp/serve.out")"
# (Its own page: the export must exist, and the charge is the Next app's.)
next_pays() {
    [ -f "$app/next-app/out/index.html" ] &&
        node client-wasm/smoke/run.mjs "$driver_url" "$next_url/index.html" | tee /dev/stderr |
        grep -q 'SMOKE OK.*"description":"next"'
}
check the_next_js_client_component_pays_in_headless_chromium next_pays
stop_pids "$serve_pid"

# The manual's TypeScript blocks that pay, each bundled by esbuild with what
# the page provides (a token, showReceipt, the GraphQL gateway's URL), run
# against the server; the Apollo recipe's GraphQL goes through the portal.
node client-wasm/browser-support/portal.mjs "$server_url" "$server_url" >"$tmp/portal.out" 2>&1 &
portal_pid=$!
portal_url="$(listening "$portal_pid" "$tmp/portal.out")"
mkdir -p "$tmp/www/recipes"
recipe() {
    local block="$1" name
    name="$(basename "$block" .ts)"
    sed "s/bundle.js/$name.js/" "$app/bundlers/index.html" >"$tmp/www/recipes/$name.html"
    (cd "$app" && esbuild "$block" --bundle --format=esm --log-level=warning --outfile="$tmp/www/recipes/$name.js" \
        --banner:js="globalThis.token = () => 'recipe-$(node -p 'crypto.randomUUID()')';
globalThis.GRAPHQL_URL = '$portal_url/graphql';
const say = (line) => (document.getElementById('result').textContent = line);
globalThis.showReceipt = (id) => say('SMOKE OK receipt ' + id);
globalThis.showDeclined = globalThis.showPaused = globalThis.showRetryLater = (why) => say('SMOKE FAIL ' + why);
addEventListener('unhandledrejection', (e) => say('SMOKE FAIL ' + (e.reason?.stack ?? e.reason)));") &&
        node client-wasm/smoke/run.mjs "$driver_url" "$server_url/recipes/$name.html"
}
for block in "$app"/docs-*.ts; do
    check "the_manual_s_block_$(basename "$block" .ts | tr - _)_pays" recipe "$block"
done

# The CommonJS path: Jest requires the package (client_wasm.cjs) and pays.
jest_run() { (cd "$app" && IDEM_SERVER="$server_url" npx --no-install jest --rootDir jest --ci); }
check jest_requires_the_package_as_commonjs_and_pays jest_run

cat "$tmp/sizes.md"
verdict=ok
[ "$failed" = 0 ] || verdict=FAILED
echo "test result: $verdict. $passed passed; $failed failed; 0 ignored; 0 measured; 0 filtered out (the npm package)"
[ "$failed" = 0 ]
