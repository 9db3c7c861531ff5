// The package test's Next.js app (scripts/test-package.sh): a static export
// (`next build` writes out/), served by client-wasm/package/tests/serve.mjs
// in front of the real server. Its packages are the parent app's
// (node_modules one folder up), so that folder is the build's root.
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));

export default {
  output: "export",
  images: { unoptimized: true },
  turbopack: { root },
  outputFileTracingRoot: root,
};
