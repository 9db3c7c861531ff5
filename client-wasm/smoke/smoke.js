// The script of index.html, a file of its own: the server serves pages under
// Content-Security-Policy: script-src 'self' 'wasm-unsafe-eval', no inline script.
import init, { IdempotentClient, IdempotencyError } from "./pkg/client_wasm.js";
const result = document.getElementById("result");
try {
  const started = performance.now();
  await init();
  const initMs = Math.round(performance.now() - started);
  const token = "smoke-" + crypto.randomUUID();
  const client = new IdempotentClient({
    storagePrefix: "smoke:" + token + ":",
    headers: { Authorization: "Bearer " + token },
  });
  const body = { amount: 4200, currency: "usd", description: "smoke" };
  const first = await client.post("/charges", body, "smoke");
  const again = await client.post("/charges", body, "smoke");
  // A bad argument is a typed rejection, not a throw.
  const refused = await client.post("/charges", body).then(
    () => null,
    (e) => ({ typed: e instanceof IdempotencyError && e instanceof Error, kind: e.kind, name: e.name }),
  );
  const ok = first.status === 201 && !first.replayed && again.replayed
    && first.key === again.key && first.body.id === again.body.id
    && client.pendingOperations().length === 0
    && refused && refused.typed && refused.kind === "invalid" && refused.name === "IdempotencyError";
  result.textContent = (ok ? "SMOKE OK " : "SMOKE FAIL ")
    + JSON.stringify({ initMs, first, again, refused });
} catch (e) {
  result.textContent = "SMOKE FAIL " + e;
}
