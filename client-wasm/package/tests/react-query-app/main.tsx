// Renders docs/CLIENT.md's TanStack Query recipe (recipe.tsx, the block as
// written) for one cart, double-clicks its Pay button the way an impatient
// shopper does (two mutations of the cart's operation), and says "SMOKE OK"
// once both mutations succeeded with the charge the button shows and the
// shop holds exactly that one charge for this shopper.
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { MutationCache, QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { PayButton } from "./recipe";

const shopper = "react-query-" + crypto.randomUUID();
// What the recipe leaves to the page: the signed-in shopper's token.
(globalThis as { token?: () => string }).token = () => shopper;

const result = document.getElementById("result")!;
const say = (line: string) => (result.textContent = line);
addEventListener("unhandledrejection", (e) => say("SMOKE FAIL " + (e.reason?.stack ?? e.reason)));

const cart = { id: crypto.randomUUID(), amount: 1999 };
// The charge id of every mutation that succeeded.
const succeeded: string[] = [];
const mutationCache = new MutationCache({ onSuccess: (data) => void succeeded.push((data as { id: string }).id) });
const root = document.getElementById("root")!;
createRoot(root).render(
  <StrictMode>
    <QueryClientProvider client={new QueryClient({ mutationCache })}>
      <PayButton cart={cart} />
    </QueryClientProvider>
  </StrictMode>,
);

async function until<T>(what: string, read: () => T | null): Promise<T> {
  for (let i = 0; i < 300; i++) {
    const value = read();
    if (value !== null) return value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error("timed out waiting for " + what);
}

try {
  const button = await until("the Pay button", () => root.querySelector("button"));
  button.click();
  button.click();
  const paid = await until("the charge", () => root.textContent?.match(/Paid: (ch_\S+)/)?.[1] ?? null);
  await until("both mutations", () => (succeeded.length === 2 ? true : null));
  const answer = await fetch("/charges", { headers: { Authorization: `Bearer ${shopper}` } });
  const charges: { data: { id: string }[] } = await answer.json();
  const ids = charges.data.map((c) => c.id);
  const ok = ids.length === 1 && ids[0] === paid && succeeded.every((id) => id === paid);
  say((ok ? "SMOKE OK " : "SMOKE FAIL ") + JSON.stringify({ paid, mutations: succeeded, held: ids }));
} catch (e) {
  say("SMOKE FAIL " + ((e as Error)?.stack ?? e));
}
