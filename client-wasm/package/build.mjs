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
// `init()` compile the wasm's bytes, kept in the module itself (below);
// bundle the glue, js/browser.js and an entry that also exports
// IdempotencyError (and gives the class its `fetch`, js/browser.js's
// withFetch) into one minified ES module with esbuild, then write the
// wasm's bytes into it: one file, the whole client, so a page or a bundler
// has no second file to serve, and a page can load it from a blob URL too;
// then add the declarations, the README and package.json, whose version
// and license are the crate's.
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import * as embedding from "./embedding.mjs";

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
const PLACEHOLDER = "__EXACTLY_ONCE_WASM_BYTES__";

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
// `init()` compiles from bytes, never by streaming
// (`WebAssembly.instantiateStreaming` and its MIME check are cut): for a
// module this small, streaming compilation's extra hops between the page's
// thread and the compiler cost a cold page 2-5 ms (docs/BENCHMARKS-JOURNAL.md,
// "Init").
replaceOnce(
  /\n *if \(typeof WebAssembly\.instantiateStreaming === 'function'\) \{\n[^]*?\n {8}\}\n/g,
  () => "\n",
  "instantiateStreaming",
);
replaceOnce(/\n *function expectedResponseType\(type\) \{\n[^]*?\n {4}\}\n/g, () => "\n", "expectedResponseType");
// The glue as wasm-bindgen loads the module: `init()` fetches
// client_wasm_bg.wasm beside the JavaScript. That is the `wasm-file`
// export (a page that serves the wasm itself: a CDN, SRI, a CSP review).
const fileGlue = glue;
// And the default: the bytes are in the module itself (`wasmBytes()`,
// written into the bundle below): `init()` and `initSync()` with no
// argument compile them synchronously, so a page makes no second request.
// In a new browser profile that request alone costs more than the whole
// init budget (docs/BENCHMARKS.md, the browser client's init: the wasm
// inside the module). A browser that refuses to compile this size on the page's
// thread (a RangeError) gets the asynchronous compile of the same bytes.
// A `module_or_path` passed by the page is loaded as wasm-bindgen does.
// WASM_FETCH=1 builds the wasm-file layout as the default too, to measure
// both.
const fetchWasm = Boolean(process.env.WASM_FETCH);
const wasmBuffer = readFileSync(wasm);
if (!fetchWasm) {
  replaceOnce(
    /\n( *)if \(module_or_path === undefined\) \{\n *module_or_path = new URL\('client_wasm_bg\.wasm', import\.meta\.url\);\n *\}\n/g,
    (_, indent) =>
      `\n${indent}if (module_or_path === undefined) {\n` +
      `${indent}    module_or_path = wasmBytes();\n` +
      `${indent}    try { return initSync({ module: module_or_path }); }\n` +
      `${indent}    catch (error) { if (!(error instanceof RangeError)) throw error; }\n` +
      `${indent}}\n`,
    "the default wasm URL",
  );
  replaceOnce(
    /\n( *)const imports = __wbg_get_imports\(\);\n( *)if \(!\(module instanceof WebAssembly\.Module\)\) \{/g,
    (_, a, b) =>
      `\n${a}if (module === undefined) module = wasmBytes();` +
      `\n${a}const imports = __wbg_get_imports();\n${b}if (!(module instanceof WebAssembly.Module)) {`,
    "initSync's compile",
  );
  glue = `import { wasmBytes } from "./wasm_bytes.js";\n` + glue;
  if (/import\.meta/.test(glue)) fail("the embedded glue still uses import.meta (the CommonJS build cannot)");
  writeFileSync(join(bindgen, "wasm_bytes.js"), embedding.decoder(wasmBuffer.length, PLACEHOLDER));
}
writeFileSync(join(bindgen, "client_wasm.js"), glue);
writeFileSync(join(bindgen, "client_wasm_file.js"), fileGlue);

// 2. One minified module per layout: the glue, js/browser.js, and an entry
//    that also exports IdempotencyError, gives the class its `fetch` and
//    `fetcher` (js/browser.js's withFetch), and turns a compile that the
//    page's CSP refuses into an IdempotencyError naming the missing source.
const snippets = join(bindgen, "snippets");
const [snippet] = readdirSync(snippets);
const browser = JSON.stringify("./" + relative(bindgen, join(snippets, snippet, "js", "browser.js")));
const entry = (glueFile) =>
  `import start, { initSync as startSync, IdempotentClient } from "./${glueFile}";\n` +
  `import { withFetch, wasmError } from ${browser};\n` +
  `withFetch(IdempotentClient);\n` +
  `export default function init(module) { return start(module).catch(wasmError); }\n` +
  `export function initSync(module) { try { return startSync(module); } catch (e) { wasmError(e); } }\n` +
  `export { IdempotentClient };\n` +
  `export { IdempotencyError } from ${browser};\n`;
writeFileSync(join(bindgen, "index.js"), entry("client_wasm.js"));
writeFileSync(join(bindgen, "index_file.js"), entry("client_wasm_file.js"));
rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, "wasm-file"), { recursive: true });
const bundle = (input, output, format) =>
  execFileSync(
    "esbuild",
    [
      join(bindgen, input),
      "--bundle",
      "--minify",
      "--format=" + format,
      "--target=es2022",
      "--legal-comments=none",
      "--log-level=warning",
      "--outfile=" + join(out, output),
    ],
    { stdio: "inherit" },
  );
bundle("index.js", "client_wasm.js", "esm");
// For `require` (Jest, older Node tooling): the same module as CommonJS.
bundle("index.js", "client_wasm.cjs", "cjs");
bundle("index_file.js", "wasm-file/client_wasm.js", "esm");
copyFileSync(wasm, join(out, "wasm-file", "client_wasm_bg.wasm"));

// The wasm's bytes into the bundles, in place of the placeholder (which
// esbuild left as a string), as `embedding` writes them: pure ASCII, so
// that a minifier or a bundler that re-escapes strings (esbuild escapes
// every non-ASCII character) leaves them as they are.
if (!fetchWasm) {
  for (const file of ["client_wasm.js", "client_wasm.cjs"]) {
    const path = join(out, file);
    const text = readFileSync(path, "utf8");
    const quoted = new RegExp(`(["'\`])${PLACEHOLDER}\\1`, "g");
    const found = text.match(quoted)?.length ?? 0;
    if (found !== 1) fail(`the wasm's placeholder: found ${found} times in ${file}, expected once`);
    writeFileSync(path, text.replace(quoted, () => JSON.stringify(embedding.encode(wasmBuffer))));
  }
}

// 3. The package around them.
if (fetchWasm) {
  for (const file of ["client_wasm.js", "client_wasm.cjs"]) rmSync(join(out, file));
  copyFileSync(join(out, "wasm-file", "client_wasm.js"), join(out, "client_wasm.js"));
  copyFileSync(wasm, join(out, "client_wasm_bg.wasm"));
}
for (const file of ["client_wasm.d.ts", "README.md"]) copyFileSync(join(here, file), join(out, file));
copyFileSync(join(here, "client_wasm.d.ts"), join(out, "client_wasm.d.cts"));
const metadata = JSON.parse(
  execFileSync("cargo", ["metadata", "--no-deps", "--format-version", "1"], { encoding: "utf8" }),
);
const crate = metadata.packages.find((p) => p.name === "client-wasm");
const { name, ...rest } = JSON.parse(readFileSync(join(here, "package.json"), "utf8"));
const manifest = { name, version: crate.version, license: crate.license, ...rest };
if (fetchWasm) {
  manifest.exports["./client_wasm_bg.wasm"] = "./client_wasm_bg.wasm";
  manifest.files.splice(1, 0, "client_wasm_bg.wasm");
}
writeFileSync(join(out, "package.json"), JSON.stringify(manifest, null, 2) + "\n");
