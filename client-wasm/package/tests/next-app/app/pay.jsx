"use client";
// The client component: init() and the client in an effect, never during
// the server render (docs/CLIENT.md, "Server-side rendering"). Pays, then
// pays the same operation again (replayed), and says so on #result for
// client-wasm/smoke/run.mjs.
import { useEffect, useState } from "react";
import init, { IdempotentClient } from "exactly-once-client";

export default function Pay() {
  const [result, setResult] = useState("SMOKE PENDING");
  useEffect(() => {
    let live = true;
    (async () => {
      await init();
      const token = "next-" + crypto.randomUUID();
      const client = new IdempotentClient({
        storagePrefix: token + ":",
        headers: () => ({ Authorization: "Bearer " + token }),
      });
      const body = { amount: 3100, currency: "usd", description: "next" };
      const first = await client.post("/charges", body, "checkout:next");
      const again = await client.post("/charges", body, "checkout:next");
      const ok = first.status === 201 && again.replayed && first.key === again.key;
      return (ok ? "SMOKE OK " : "SMOKE FAIL ") + JSON.stringify({ first, again });
    })().then(
      (line) => live && setResult(line),
      (e) => live && setResult("SMOKE FAIL " + (e?.stack ?? e)),
    );
    return () => {
      live = false;
    };
  }, []);
  return <pre id="result">{result}</pre>;
}
