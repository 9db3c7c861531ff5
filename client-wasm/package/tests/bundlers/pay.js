// The small app that every bundler test builds (scripts/test-package.sh):
// webpack 5, esbuild and Rollup bundle it with exactly-once-client installed
// from the `npm pack` tarball, each minifying as it does by default for
// production; the real server serves each build, and headless Chromium
// (client-wasm/smoke/run.mjs) waits for "SMOKE OK": a charge, then the same
// operation again, replayed.
import init, { IdempotencyError, IdempotentClient } from "exactly-once-client";

const result = document.getElementById("result");
try {
  await init();
  const token = "bundled-" + crypto.randomUUID();
  const client = new IdempotentClient({
    storagePrefix: token + ":",
    headers: () => ({ Authorization: "Bearer " + token }),
  });
  const body = { amount: 2500, currency: "usd", description: document.title };
  const first = await client.post("/charges", body, "checkout:bundled");
  const again = await client.post("/charges", body, "checkout:bundled");
  const refused = await client.post("/charges", body, "").catch((e) => e);
  const ok =
    first.status === 201 && !first.replayed && again.replayed && first.key === again.key &&
    first.body.id === again.body.id && refused instanceof IdempotencyError && refused.code === "invalid-argument";
  result.textContent = (ok ? "SMOKE OK " : "SMOKE FAIL ") + JSON.stringify({ first, again, code: refused?.code });
} catch (e) {
  result.textContent = "SMOKE FAIL " + (e?.stack ?? e);
}
