// Makes the npm package `exactly-once-client` (client-wasm/pkg/) from the
// output of wasm-bindgen and wasm-opt. Run by scripts/build-wasm.sh:
//
//   node client-wasm/package/build.mjs BINDGEN_DIR WASM NAMES_JSON OUT_DIR
//
// BINDGEN_DIR  wasm-bindgen's `--target web` output (client_wasm.js, the
//              glue, and snippets/ with js/browser.js)
// WASM         the module after `wasm-opt -Oz --minify-imports-and-exports-
//              and-modules`
// NAMES_JSON   what that wasm-opt pass printed: the old and new name of
//              every import and export
// OUT_DIR      the package folder, made anew
//
// Steps: rename the imports and exports in the glue as wasm-opt renamed
// them in the module (each old import name must be found exactly once: a
// glue of another shape fails the build instead of the page), and make its
// `init()` compile from bytes rather than stream (below); bundle the
// glue, js/browser.js and an entry that also exports IdempotencyError (and
// gives the class its `fetch`, js/browser.js's withFetch) into
// one minified ES module with esbuild (one file, so a page can load it from
// a blob URL too); then add the module, the hand-written declarations, the
// README and package.json, whose version and license are the crate's.
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const [bindgen, wasm, namesFile, out] = process.argv.slice(2);
if (!out) {
  console.error("usage: node build.mjs BINDGEN_DIR WASM NAMES_JSON OUT_DIR");
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
const fail = (message) => {
  console.error("package: " + message);
  process.exit(1);
};
const escape = (name) => name.replace(/[$]/g, "\\$&");

// 1. The glue, with the names wasm-opt gave.
const names = JSON.parse(readFileSync(namesFile, "utf8"));
let glue = readFileSync(join(bindgen, "client_wasm.js"), "utf8");
// wasm-bindgen's glue hands the module one import object per JS module:
// its own functions (`import0`), and a snippet's functions that need no
// glue (`import1`: the snippet's namespace). wasm-opt merged the modules
// into one: the renamed imports all go into `import0`.
const objects = new Map(
  [...glue.matchAll(/^\s*"([^"]+)": (import\d+),?$/gm)].map(([line, module, object]) => [module, { line, object }]),
);
const imported = new Set(WebAssembly.Module.imports(new WebAssembly.Module(readFileSync(wasm))).map((i) => i.module));
if (imported.size !== 1) fail("expected the minified module to import one module, got " + [...imported]);
const [newModule] = imported;
const own = objects.get("./client_wasm_bg.js") ?? fail("no import object for ./client_wasm_bg.js in the glue");
const replaceOnce = (pattern, replacement, what) => {
  let count = 0;
  glue = glue.replace(pattern, (...match) => {
    count++;
    return replacement(...match);
  });
  if (count !== 1) fail(`${what}: found ${count} times in the glue, expected once`);
};
const moved = [];
for (const [module, oldName, newName] of names.imports) {
  const from = objects.get(module) ?? fail("no import object for " + module);
  if (from === own) {
    replaceOnce(new RegExp(`(\\s)${escape(oldName)}(\\s*:)`, "g"), (_, a, b) => a + newName + b, oldName);
  } else {
    moved.push(`${newName}: ${from.object}[${JSON.stringify(oldName)}],`);
  }
}
replaceOnce(new RegExp(`const ${own.object} = \\{`, "g"), (open) => open + moved.join(""), own.object);
for (const [module, { line }] of objects) {
  replaceOnce(line, () => (module === "./client_wasm_bg.js" ? `"${newModule}": ${own.object},` : ""), module);
}
for (const [oldName, newName] of names.exports) {
  glue = glue.replace(new RegExp(`\\bwasm\\.${escape(oldName)}\\b`, "g"), "wasm." + newName);
}
// `init()` compiles the fetched wasm from its bytes
// (`WebAssembly.instantiate(await response.arrayBuffer())`, the glue's own
// fallback) instead of `WebAssembly.instantiateStreaming`: for a module
// this small, streaming compilation's extra hops between the page's thread
// and the compiler's cost a cold page 2-5 ms (docs/BENCHMARKS.md, "Init"),
// and a server with the wrong MIME type for .wasm works without a warning.
// WASM_STREAMING=1 keeps wasm-bindgen's streaming load, to measure both.
if (!process.env.WASM_STREAMING) {
  replaceOnce(
    /\n *if \(typeof WebAssembly\.instantiateStreaming === 'function'\) \{\n[^]*?\n {8}\}\n/g,
    () => "\n",
    "instantiateStreaming",
  );
  replaceOnce(/\n *function expectedResponseType\(type\) \{\n[^]*?\n {4}\}\n/g, () => "\n", "expectedResponseType");
}
writeFileSync(join(bindgen, "client_wasm.js"), glue);

// 2. One minified module: the glue, js/browser.js, and IdempotencyError.
const snippets = join(bindgen, "snippets");
const [snippet] = readdirSync(snippets);
const browser = "./" + relative(bindgen, join(snippets, snippet, "js", "browser.js"));
const entry = join(bindgen, "index.js");
writeFileSync(
  entry,
  `import { IdempotentClient } from "./client_wasm.js";\n` +
    `import { withFetch } from ${JSON.stringify(browser)};\n` +
    `withFetch(IdempotentClient);\n` +
    `export { default, initSync, IdempotentClient } from "./client_wasm.js";\n` +
    `export { IdempotencyError } from ${JSON.stringify(browser)};\n`,
);
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
execFileSync(
  "esbuild",
  [
    entry,
    "--bundle",
    "--minify",
    "--format=esm",
    "--target=es2022",
    "--legal-comments=none",
    "--log-level=warning",
    "--outfile=" + join(out, "client_wasm.js"),
  ],
  { stdio: "inherit" },
);

// 3. The package around it.
copyFileSync(wasm, join(out, "client_wasm_bg.wasm"));
for (const file of ["client_wasm.d.ts", "README.md"]) copyFileSync(join(here, file), join(out, file));
const metadata = JSON.parse(
  execFileSync("cargo", ["metadata", "--no-deps", "--format-version", "1"], { encoding: "utf8" }),
);
const crate = metadata.packages.find((p) => p.name === "client-wasm");
const { name, ...rest } = JSON.parse(readFileSync(join(here, "package.json"), "utf8"));
const manifest = { name, version: crate.version, license: crate.license, ...rest };
writeFileSync(join(out, "package.json"), JSON.stringify(manifest, null, 2) + "\n");
