// The script of init.html, a file of its own: the server serves pages under
// Content-Security-Policy: script-src 'self' 'wasm-unsafe-eval', no inline script.
const result = document.getElementById("result");
try {
  const started = performance.now();
  const { default: init, IdempotentClient } = await import("./pkg/client_wasm.js");
  const loaded = performance.now();
  await init();
  const instantiated = performance.now();
  new IdempotentClient({ storagePrefix: "bench:" });
  const ready = performance.now();
  const wasm = performance.getEntriesByType("resource").find((e) => e.name.endsWith(".wasm"));
  result.textContent = "SMOKE OK " + JSON.stringify({
    wasmFetchMs: wasm ? wasm.responseEnd - wasm.startTime : null,
    importMs: loaded - started,
    initMs: ready - loaded,
    instantiateMs: instantiated - loaded,
    constructMs: ready - instantiated,
  });
} catch (e) {
  result.textContent = "SMOKE FAIL " + e;
}
