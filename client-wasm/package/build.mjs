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
// thread and the compiler cost a cold page 2-5 ms (docs/BENCHMARKS.md,
// "Init").
replaceOnce(
  /\n *if \(typeof WebAssembly\.instantiateStreaming === 'function'\) \{\n[^]*?\n {8}\}\n/g,
  () => "\n",
  "instantiateStreaming",
);
replaceOnce(/\n *function expectedResponseType\(type\) \{\n[^]*?\n {4}\}\n/g, () => "\n", "expectedResponseType");
// And the bytes are in the module itself (`wasmBytes()`, written into the
// bundle below): `init()` and `initSync()` with no argument compile them
// synchronously, so a page makes no second request. In a new browser
// profile that request alone costs more than the whole init budget
// (docs/BENCHMARKS.md, "Issue 24's init: the wasm inside the module").
// A browser that refuses to compile this size on the page's thread (a
// RangeError) gets the asynchronous compile of the same bytes. A
// `module_or_path` passed by the page is loaded as wasm-bindgen does.
// WASM_FETCH=1 builds the previous layout instead (the module fetches
// client_wasm_bg.wasm beside it), to measure both.
const fetchWasm = Boolean(process.env.WASM_FETCH);
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
  // A placeholder, replaced by the bytes after bundling (esbuild would
  // escape them); the length check turns a page that decodes the module
  // with another charset than UTF-8 into a clear error.
  const length = readFileSync(wasm).length;
  writeFileSync(
    join(bindgen, "wasm_bytes.js"),
    `export function wasmBytes() {\n` +
      `  const text = "${PLACEHOLDER}";\n` +
      `  if (text.length !== ${length}) throw new Error("exactly-once-client: client_wasm.js must be loaded as UTF-8");\n` +
      // Native where the browser has it (btoa reads the text as Latin-1);
      // the loop takes 7 ms of a cold page's init (docs/BENCHMARKS.md).
      `  if (Uint8Array.fromBase64) return Uint8Array.fromBase64(btoa(text));\n` +
      `  const bytes = new Uint8Array(${length});\n` +
      `  for (let i = 0; i < ${length}; i++) bytes[i] = text.charCodeAt(i);\n` +
      `  return bytes;\n` +
      `}\n`,
  );
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

// The wasm's bytes into the bundle: each byte one character (U+0000 to
// U+00FF) of a template literal, so brotli sees the module's own bytes and
// the package stays within its size budget (base64 would not: 3.7 KB
// more). Only the characters a template literal gives meaning to are
// escaped (backslash, backtick, `${`, and CR, which the parser turns into
// LF).
if (!fetchWasm) {
  const bundle = join(out, "client_wasm.js");
  const text = readFileSync(bundle, "utf8");
  const quoted = new RegExp(`(["'\`])${PLACEHOLDER}\\1`, "g");
  const found = text.match(quoted)?.length ?? 0;
  if (found !== 1) fail(`the wasm's placeholder: found ${found} times in the bundle, expected once`);
  const literal =
    "`" +
    readFileSync(wasm)
      .toString("latin1")
      .replace(/[\\`]|\$\{|\r/g, (c) => (c === "\r" ? "\\r" : "\\" + c)) +
    "`";
  writeFileSync(bundle, text.replace(quoted, () => literal));
}

// 3. The package around it.
if (fetchWasm) copyFileSync(wasm, join(out, "client_wasm_bg.wasm"));
for (const file of ["client_wasm.d.ts", "README.md"]) copyFileSync(join(here, file), join(out, file));
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
