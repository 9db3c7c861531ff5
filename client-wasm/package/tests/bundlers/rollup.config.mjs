// Rollup as an app sets it up for production: node-resolve to find the
// package, terser to minify (scripts/test-package.sh: rollup -c in the app).
import resolve from "@rollup/plugin-node-resolve";
import terser from "@rollup/plugin-terser";

export default {
  input: "bundlers/pay.js",
  output: { file: process.env.OUT, format: "es" },
  plugins: [resolve({ browser: true }), terser()],
};
