// Checks an unpacked `npm pack` tarball of exactly-once-client the way an
// app that installs it depends on it (scripts/test-package.sh):
//
//   node manifest.mjs PACKAGE_DIR VERSION LICENSE files|manifest|no-any
//
//   files     the tarball holds the module, the wasm, the declarations,
//             the README and package.json
//   manifest  package.json: the name, the crate's version and license, an
//             ES module whose `exports` and `types` point at files in the
//             tarball, `files`, `sideEffects`
//   no-any    the declarations the package exposes never say `any`
//             (comments aside)
//
// Prints what is wrong and exits 1, or exits 0.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

const [dir, version, license, check] = process.argv.slice(2);
const problems = [];
const expect = (condition, problem) => condition || problems.push(problem);
const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));

if (check === "files") {
  for (const file of ["client_wasm.js", "client_wasm_bg.wasm", "client_wasm.d.ts", "README.md", "package.json"]) {
    expect(existsSync(join(dir, file)), file + " is missing");
  }
} else if (check === "manifest") {
  expect(manifest.name === "exactly-once-client", "name is " + manifest.name);
  expect(manifest.version === version, `version is ${manifest.version}, the crate's is ${version}`);
  expect(manifest.license === license, `license is ${manifest.license}, the crate's is ${license}`);
  expect(manifest.type === "module", "type is not module");
  expect(manifest.sideEffects === false, "sideEffects is not false");
  expect(Array.isArray(manifest.files) && manifest.files.includes("client_wasm_bg.wasm"), "files lacks the wasm");
  const root = manifest.exports?.["."];
  expect(root?.types === manifest.types, "exports['.'].types differs from types");
  for (const target of [manifest.types, root?.types, root?.default, manifest.main]) {
    expect(typeof target === "string" && existsSync(join(dir, target)), target + " is not in the package");
  }
  expect(root?.default === "./client_wasm.js", "exports['.'] is not ./client_wasm.js");
} else if (check === "no-any") {
  const types = readFileSync(join(dir, manifest.types), "utf8")
    .replace(/\/\*[\s\S]*?\*\//g, "")
    .replace(/\/\/.*$/gm, "");
  for (const [i, line] of types.split("\n").entries()) {
    expect(!/\bany\b/.test(line), `${manifest.types}:${i + 1}: ${line.trim()}`);
  }
  expect(/\bpost<T = unknown>\(.*\): Promise<Outcome<T>>/.test(types), "post<T> does not resolve to Outcome<T>");
  expect(/\bsend<T = unknown>\(.*\): Promise<Outcome<T>>/.test(types), "send<T> does not resolve to Outcome<T>");
} else {
  console.error("usage: node manifest.mjs PACKAGE_DIR VERSION LICENSE files|manifest|no-any");
  process.exit(2);
}
for (const problem of problems) console.error("  " + problem);
process.exit(problems.length ? 1 : 0);
