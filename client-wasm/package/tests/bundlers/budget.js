// The whole client as an app's bundle carries it: esbuild --bundle --minify
// of this re-export is what scripts/test-package.sh holds to the 20 480-byte
// brotli budget (the package's own file minified once more, the wasm's
// bytes inside it).
export { default, initSync, IdempotentClient, IdempotencyError } from "exactly-once-client";
