// The app of pay.js with the `wasm-file` export: the wasm is a file of its
// own (client_wasm_bg.wasm), which the bundler (webpack here) finds through
// `new URL(..., import.meta.url)`, copies beside the bundle, and init()
// fetches.
import init, { IdempotentClient } from "exactly-once-client/wasm-file";

const result = document.getElementById("result");
try {
  await init();
  const token = "wasm-file-" + crypto.randomUUID();
  const client = new IdempotentClient({ storagePrefix: token + ":", headers: { Authorization: "Bearer " + token } });
  const body = { amount: 2600, currency: "usd", description: "wasm-file" };
  const first = await client.post("/charges", body, "checkout:file");
  const again = await client.post("/charges", body, "checkout:file");
  const wasm = performance.getEntriesByType("resource").filter((e) => e.name.endsWith(".wasm")).length;
  const ok = first.status === 201 && again.replayed && first.key === again.key && wasm === 1;
  result.textContent = (ok ? "SMOKE OK " : "SMOKE FAIL ") + JSON.stringify({ first, again, wasm });
} catch (e) {
  result.textContent = "SMOKE FAIL " + (e?.stack ?? e);
}
