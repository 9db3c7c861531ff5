// A small consumer of the package, in strict TypeScript: `tsc --strict`
// type-checks it (with the @ts-expect-error lines below proving that the
// declarations are real types, not `any`), and `vite build` bundles it.
// In the browser it pays twice against the real server and reports on
// #result ("SMOKE OK ..." or "SMOKE FAIL ...").
import init, { IdempotencyError, IdempotentClient } from "exactly-once-client";
import type { AttemptEvent, CallOptions, ClientOptions, Outcome, Problem } from "exactly-once-client";

interface Charge {
  id: string;
  amount: number;
  currency: string;
  status: string;
}

const result = document.getElementById("result")!;

async function pay(): Promise<string> {
  await init();
  const token = "vite-" + crypto.randomUUID();
  const events: AttemptEvent[] = [];
  const options: ClientOptions = {
    storagePrefix: token + ":",
    headers: { Authorization: "Bearer " + token },
    onAttempt: (event) => events.push(event),
  };
  const client = new IdempotentClient(options);
  const call: CallOptions = { signal: new AbortController().signal, timeoutMs: 5000 };
  const body = { amount: 4200, currency: "usd", description: "vite" };

  const first: Outcome<Charge> = await client.post<Charge>("/charges", body, "vite", call);
  const again = await client.send<Charge>("POST", "/charges", body, "vite");
  if (!first.ok || !again.ok) return "SMOKE FAIL refused " + JSON.stringify([first, again]);
  const charge: Charge = first.body; // narrowed by `ok`
  // @ts-expect-error a Charge has no `nope`
  charge.nope;
  // @ts-expect-error `status` is a number
  const wrong: string = first.status;

  const refused = await client.post("/charges", body, "").then(
    () => null,
    (e: unknown) => (e instanceof IdempotencyError ? e : null),
  );
  const problem: Problem | string | null = refused ? null : "no IdempotencyError";
  const ok =
    first.status === 201 &&
    !first.replayed &&
    again.replayed &&
    first.key === again.key &&
    charge.id === again.body.id &&
    events.length === 2 &&
    events[0].status === 201 &&
    refused?.kind === "invalid" &&
    refused.name === "IdempotencyError" &&
    refused instanceof Error &&
    refused.operation === null &&
    refused.attempts === 0 &&
    client.pendingOperations().length === 0;
  return (ok ? "SMOKE OK " : "SMOKE FAIL ") + JSON.stringify({ first, again, problem, wrong });
}

pay().then(
  (line) => (result.textContent = line),
  (e: unknown) => (result.textContent = "SMOKE FAIL " + String(e)),
);
