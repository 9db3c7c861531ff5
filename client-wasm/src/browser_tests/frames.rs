//! Pages other than the test page: two windows of this origin racing
//! without Web Locks, two windows paying while storage is full, and a
//! sandboxed frame with an opaque origin. Each
//! loads the release build (`/pkg/client_wasm.js` of the server, copied
//! there by scripts/test-wasm.sh) the way a page would, and reports back
//! by message. The JS that drives them is below; the tests that use them
//! are in `tabs.rs` and here.

use super::*;

#[wasm_bindgen(inline_js = r#"
// Removes Web Locks in two windows of this origin and has both post each
// of `operations` at the same instant, one operation every 100 ms.
// Resolves with both windows' results: `{ keys: [...] }` or `{ error }`.
export function race_in_windows(server, options, operations, body) {
  return inTwoWindows("race-", server, options, {
    before: "delete Navigator.prototype.locks;",
    run: `const calls = ${JSON.stringify(operations)}.map(async (operation, i) => {
        await new Promise((resolve) => setTimeout(resolve, at + 100 * i - Date.now()));
        return (await client.post("/charges", ${JSON.stringify(body)}, operation)).key;
      });
      channel.postMessage({ keys: await Promise.all(calls) });`,
    after: "window.close();",
  });
}

// Has two windows of this origin (Web Locks left in place) count the
// console's warnings and post `operation` at the same instant; they stay
// open until both reported. Resolves with both windows' results:
// `{ key, status, replayed, persistent, warnings }` or `{ error }`.
export function pay_in_windows(server, options, operation, body) {
  return inTwoWindows("pay-", server, options, {
    before: `let warnings = 0;
    const warn = console.warn;
    console.warn = (...args) => { warnings += 1; warn(...args); };`,
    run: `await new Promise((resolve) => setTimeout(resolve, at - Date.now()));
      const outcome = await client.post("/charges", ${JSON.stringify(body)}, ${JSON.stringify(operation)});
      channel.postMessage({
        key: outcome.key, status: outcome.status, replayed: outcome.replayed,
        persistent: client.persistent, warnings,
      });`,
    // Open until both windows reported: a tab that is still open is asked
    // for what it keeps in memory.
    after: "channel.onmessage = (e) => { if (e.data.done) window.close(); };",
  });
}

// Opens two windows of this origin (blob: pages, "noopener": each in its
// own browsing context group, so the browser may give each a process).
// Each runs `before`, loads the client from `server` with `options`, says
// it is ready on a BroadcastChannel, is sent the same instant (`at`, 300
// ms after both are ready), runs `run` (which posts its result; an
// exception posts `{ error }`) and then `after`. Resolves with both
// results, and then sends `{ done }` to both.
function inTwoWindows(prefix, server, options, { before, run, after }) {
  const name = prefix + crypto.randomUUID();
  const page = `<!doctype html><script type="module">
    ${before}
    const channel = new BroadcastChannel(${JSON.stringify(name)});
    try {
      const { default: init, IdempotentClient } = await import(${JSON.stringify(server + "/pkg/client_wasm.js")});
      await init();
      const client = new IdempotentClient(${JSON.stringify(options)});
      const go = new Promise((resolve) => { channel.onmessage = (e) => { if (e.data.go) resolve(e.data.go); }; });
      channel.postMessage({ ready: true });
      const at = await go;
      ${run}
    } catch (e) {
      channel.postMessage({ error: String(e && e.stack || e) });
    }
    ${after}
  </script>`;
  const url = URL.createObjectURL(new Blob([page], { type: "text/html" }));
  const channel = new BroadcastChannel(name);
  return new Promise((resolve, reject) => {
    let ready = 0;
    const results = [];
    const timer = setTimeout(() => {
      channel.postMessage({ done: true });
      channel.close();
      reject(new Error(`the windows did not report (${ready} ready): ${JSON.stringify(results)}`));
    }, 30000);
    channel.onmessage = (e) => {
      if (e.data.ready) {
        if (++ready === 2) channel.postMessage({ go: Date.now() + 300 });
        return;
      }
      results.push(e.data);
      if (results.length === 2) {
        clearTimeout(timer);
        channel.postMessage({ done: true });
        channel.close();
        URL.revokeObjectURL(url);
        resolve(results);
      }
    };
    for (let i = 0; i < 2; i++) window.open(url, "_blank", "noopener");
  });
}

// Runs the client in a sandboxed frame (opaque origin: no localStorage,
// Web Locks refused, `location.origin === "null"`). The module, which
// holds the wasm, is handed over by message (the frame's origin cannot
// fetch it by CORS) and imported from a blob URL. Resolves with what the
// frame saw.
export async function in_opaque_origin(server) {
  const js = await (await fetch(server + "/pkg/client_wasm.js")).text();
  const frame = document.createElement("iframe");
  frame.sandbox = "allow-scripts";
  frame.srcdoc = `<!doctype html><script type="module">
    addEventListener("message", async (e) => {
      const report = (result) => parent.postMessage(result, "*");
      try {
        const url = URL.createObjectURL(new Blob([e.data.js], { type: "text/javascript" }));
        const { default: init, IdempotentClient, IdempotencyError } = await import(url);
        await init();
        let sent = 0;
        const realFetch = globalThis.fetch;
        globalThis.fetch = (...args) => { sent += 1; return realFetch(...args); };
        const seen = { origin: location.origin };
        const outcome = (error) => ({
          kind: error.kind, attempts: error.attempts, message: String(error.message),
          typed: error instanceof IdempotencyError && error instanceof Error,
        });
        try {
          await new IdempotentClient().post("/charges", { amount: 1 }, "no-base");
          seen.noBase = "resolved";
        } catch (error) { seen.noBase = outcome(error); }
        seen.sentWithoutBase = sent;
        try {
          const client = new IdempotentClient({
            baseUrl: "http://127.0.0.1:9", maxAttempts: 2, backoffBaseMs: 1, backoffMaxMs: 1,
          });
          await client.post("/charges", { amount: 1 }, "unlocked");
          seen.unlocked = "resolved";
        } catch (error) { seen.unlocked = outcome(error); }
        report(seen);
      } catch (error) {
        report({ error: String(error && error.stack || error) });
      }
    }, { once: true });
    parent.postMessage("ready", "*");
  </script>`;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the sandboxed frame did not report")), 30000);
    addEventListener("message", function listener(e) {
      if (e.source !== frame.contentWindow) return;
      if (e.data === "ready") {
        frame.contentWindow.postMessage({ js }, "*");
        return;
      }
      clearTimeout(timer);
      removeEventListener("message", listener);
      frame.remove();
      resolve(e.data);
    });
    document.body.appendChild(frame);
  });
}
"#)]
extern "C" {
    #[wasm_bindgen(js_name = race_in_windows)]
    fn race_in_windows_js(
        server: &str,
        options: &JsValue,
        operations: &JsValue,
        body: &JsValue,
    ) -> Promise;

    #[wasm_bindgen(js_name = pay_in_windows)]
    fn pay_in_windows_js(
        server: &str,
        options: &JsValue,
        operation: &str,
        body: &JsValue,
    ) -> Promise;

    #[wasm_bindgen(js_name = in_opaque_origin)]
    fn in_opaque_origin_js(server: &str) -> Promise;
}

/// Both windows' results: `{keys}` (one per operation) or `{error}`.
pub(super) async fn race_in_windows(
    server: &str,
    options: &JsValue,
    operations: &[&str],
    body: &JsValue,
) -> Array {
    let list: Array = operations.iter().map(|op| JsValue::from(*op)).collect();
    JsFuture::from(race_in_windows_js(server, options, &list, body))
        .await
        .map_err(message)
        .unwrap()
        .unchecked_into()
}

/// Both windows' results of [`pay_in_windows_js`]: `{key, status,
/// replayed, persistent, warnings}` or `{error}`.
pub(super) async fn pay_in_windows(
    server: &str,
    options: &JsValue,
    operation: &str,
    body: &JsValue,
) -> Array {
    JsFuture::from(pay_in_windows_js(server, options, operation, body))
        .await
        .map_err(message)
        .unwrap()
        .unchecked_into()
}

/// In a sandboxed frame (an opaque origin), a client without `baseUrl`
/// has nowhere to send (its default would be `"null"`): every call is
/// `invalid` and sends nothing. A Web Lock request, which such an origin
/// refuses, falls back like a missing one: the call goes out unlocked
/// (here to a closed port, so it ends `exhausted`).
#[wasm_bindgen_test]
async fn an_opaque_origin_needs_a_base_url_and_runs_without_locks() {
    let seen = JsFuture::from(in_opaque_origin_js(server()))
        .await
        .map_err(message)
        .unwrap();
    assert!(get(&seen, "error").is_undefined(), "{seen:?}");
    assert_eq!(get(&seen, "origin").as_string().as_deref(), Some("null"));
    let no_base = get(&seen, "noBase");
    assert_eq!(
        get(&no_base, "kind").as_string().as_deref(),
        Some("invalid"),
        "{seen:?}"
    );
    assert_eq!(get(&no_base, "typed").as_bool(), Some(true), "{seen:?}");
    assert!(get(&no_base, "message")
        .as_string()
        .unwrap()
        .contains("baseUrl"));
    assert_eq!(get(&seen, "sentWithoutBase").as_f64(), Some(0.0));
    let unlocked = get(&seen, "unlocked");
    assert_eq!(
        get(&unlocked, "kind").as_string().as_deref(),
        Some("exhausted"),
        "{seen:?}"
    );
    assert_eq!(get(&unlocked, "attempts").as_f64(), Some(2.0), "{seen:?}");
}
