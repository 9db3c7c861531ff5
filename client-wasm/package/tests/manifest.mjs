// Checks an unpacked `npm pack` tarball of exactly-once-client the way an
// app that installs it depends on it (scripts/test-package.sh):
//
//   node manifest.mjs PACKAGE_DIR VERSION LICENSE files|manifest|no-any|charset
//
//   files     the tarball holds the module (ES and CommonJS), the
//             declarations, the README, package.json and the wasm-file
//             layout; the module holds the wasm: Node imports it and
//             `initSync()` with no argument compiles and instantiates it (no
//             second file to serve)
//   manifest  package.json: the name, the crate's version and license, an
//             ES module whose `exports` and `types` point at files in the
//             tarball, `files`, `sideEffects`
//   no-any    the declarations the package exposes never say `any`
//             (comments aside)
//   charset   the modules are pure ASCII (no bundler or minifier rewrites
//             the wasm's bytes), so one read as Latin-1 instead of UTF-8
//             (a classic script in a page of another charset) still
//             compiles
//
// Prints what is wrong and exits 1, or exits 0.
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [dir, version, license, check] = process.argv.slice(2);
const problems = [];
const expect = (condition, problem) => condition || problems.push(problem);
const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));

if (check === "files") {
  for (const file of [
    "client_wasm.js",
    "client_wasm.cjs",
    "client_wasm.d.ts",
    "client_wasm.d.cts",
    "README.md",
    "package.json",
    "wasm-file/client_wasm.js",
    "wasm-file/client_wasm_bg.wasm",
  ]) {
    expect(existsSync(join(dir, file)), file + " is missing");
  }
  const module = await import(pathToFileURL(join(dir, "client_wasm.js")).href);
  const exports = module.initSync();
  expect(Object.values(exports ?? {}).some((v) => v instanceof WebAssembly.Memory), "initSync() gave no instance of the wasm");
} else if (check === "manifest") {
  expect(manifest.name === "exactly-once-client", "name is " + manifest.name);
  expect(manifest.version === version, `version is ${manifest.version}, the crate's is ${version}`);
  expect(manifest.license === license, `license is ${manifest.license}, the crate's is ${license}`);
  expect(manifest.type === "module", "type is not module");
  expect(manifest.sideEffects === false, "sideEffects is not false");
  expect(Array.isArray(manifest.files) && manifest.files.includes("client_wasm.js"), "files lacks the module");
  const root = manifest.exports?.["."];
  expect(root?.types === manifest.types, "exports['.'].types differs from types");
  for (const target of [manifest.types, root?.types, root?.default, manifest.main]) {
    expect(typeof target === "string" && existsSync(join(dir, target)), target + " is not in the package");
  }
  expect(root?.default === "./client_wasm.js", "exports['.'] is not ./client_wasm.js");
  expect(root?.require?.default === "./client_wasm.cjs", "exports['.'].require is not ./client_wasm.cjs");
  expect(manifest.exports?.["./wasm-file"]?.default === "./wasm-file/client_wasm.js", "no ./wasm-file export");
} else if (check === "no-any") {
  const types = readFileSync(join(dir, manifest.types), "utf8")
    .replace(/\/\*[\s\S]*?\*\//g, "")
    .replace(/\/\/.*$/gm, "");
  for (const [i, line] of types.split("\n").entries()) {
    expect(!/\bany\b/.test(line), `${manifest.types}:${i + 1}: ${line.trim()}`);
  }
  expect(/\bpost<T = unknown>\(.*\): Promise<Outcome<T>>/.test(types), "post<T> does not resolve to Outcome<T>");
  expect(/\bsend<T = unknown>\(.*\): Promise<Outcome<T>>/.test(types), "send<T> does not resolve to Outcome<T>");
} else if (check === "charset") {
  for (const file of ["client_wasm.js", "client_wasm.cjs", "wasm-file/client_wasm.js"]) {
    const text = readFileSync(join(dir, file));
    const outside = text.findIndex((b) => b > 0x7e || (b < 0x20 && b !== 0x0a));
    expect(outside === -1, `${file}: byte ${text[outside]} at ${outside} is not printable ASCII`);
  }
  const misread = join(mkdtempSync(join(tmpdir(), "charset-")), "client_wasm.js");
  writeFileSync(misread, readFileSync(join(dir, "client_wasm.js")).toString("latin1"), "utf8");
  const module = await import(pathToFileURL(misread).href);
  let thrown;
  try {
    module.initSync();
  } catch (error) {
    thrown = String(error);
  }
  expect(thrown === undefined, "initSync() of the module read as Latin-1: " + thrown);
} else {
  console.error("usage: node manifest.mjs PACKAGE_DIR VERSION LICENSE files|manifest|no-any|charset");
  process.exit(2);
}
for (const problem of problems) console.error("  " + problem);
process.exit(problems.length ? 1 : 0);
