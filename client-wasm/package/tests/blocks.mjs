// Writes every ```ts and ```tsx block of a Markdown file, as written, into
// its own file (docs-1.ts, docs-2.tsx, …) in OUT_DIR, for `tsc --strict`
// to compile (scripts/test-package.sh): the manual's quick start and
// recipes must compile as a reader copies them.
//
//   node blocks.mjs FILE.md OUT_DIR
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const [file, out] = process.argv.slice(2);
const blocks = [...readFileSync(file, "utf8").matchAll(/^```(tsx?)\n([\s\S]*?)^```$/gm)];
if (blocks.length === 0) {
  console.error(`blocks: no ts or tsx block in ${file}`);
  process.exit(1);
}
blocks.forEach(([, lang, code], i) => writeFileSync(join(out, `docs-${i + 1}.${lang}`), code));
console.log(`${blocks.length} blocks of ${file}`);
