#!/usr/bin/env bash
# Tests the browser client as users get it, the npm package
# exactly-once-client (client-wasm/pkg/):
#
#   1. the size budget: scripts/build-wasm.sh --check (builds the package);
#   2. the tarball of `npm pack`: its files (the module compiles its own
#      wasm in Node), its package.json, declarations without `any`, a clear
#      error when the module is read in another charset than UTF-8
#      (client-wasm/package/tests/manifest.mjs);
#   3. types: the Vite app's strict TypeScript consumer
#      (client-wasm/package/tests/app/main.ts), the checks of issue 24's
#      types (app/types.ts), the package README's quick start and every
#      TypeScript block of docs/CLIENT.md (the quick start and the React,
#      TanStack Query and ky recipes), as written, compile with
#      `tsc --strict` against the package installed from the tarball, with
#      the pinned types of React, TanStack Query and ky (app/package.json);
#   3b. server-side rendering: Node imports the installed package as a
#      server bundle would, and nothing throws;
#   4. `vite build` of that app with Vite's defaults (no config file);
#   5. in headless Chromium against a real `server`: the Vite app pays,
#      and so does a plain <script type="module"> page
#      (client-wasm/smoke/index.html) that loads the unpacked tarball.
#
# Vite and TypeScript install from npm into .tools/ once (then offline).
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
check a_module_read_in_another_charset_than_utf8_fails_clearly manifest charset

# The app, with the package installed from the tarball (the package has no
# dependencies; the app's pinned devDependencies, the recipes' libraries,
# come from npm, once, then from its cache).
app="$tmp/app"
cp -r client-wasm/package/tests/app "$app"
install_tarball() { (cd "$app" && npm install --no-audit --no-fund --loglevel=error --no-save "$tarball"); }
check npm_installs_the_tarball install_tarball
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

verdict=ok
[ "$failed" = 0 ] || verdict=FAILED
echo "test result: $verdict. $passed passed; $failed failed; 0 ignored; 0 measured; 0 filtered out (the npm package)"
[ "$failed" = 0 ]
