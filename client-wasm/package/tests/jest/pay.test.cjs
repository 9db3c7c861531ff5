// The package's CommonJS path, as a Jest test suite requires it
// (scripts/test-package.sh runs Jest with its defaults in Node, where the
// package resolves to client_wasm.cjs): initSync() compiles the wasm inside
// the module, and a client pays against the real server (IDEM_SERVER).
// Node has no localStorage and no Web Locks: the client keeps its keys in
// memory (persistent false) and sends unlocked.
const { initSync, IdempotentClient, IdempotencyError } = require("exactly-once-client");

const server = process.env.IDEM_SERVER;

test("require() gives the client, and it pays once", async () => {
  expect(server).toMatch(/^http/);
  initSync();
  const token = "jest-" + crypto.randomUUID();
  const client = new IdempotentClient({ baseUrl: server, headers: { Authorization: "Bearer " + token } });
  const body = { amount: 1500, currency: "usd", description: "jest" };
  const first = await client.post("/charges", body, "checkout:jest");
  const again = await client.post("/charges", body, "checkout:jest");
  expect([first.status, first.replayed, again.replayed, again.key]).toEqual([201, false, true, first.key]);
  expect(client.persistent).toBe(false);
  await expect(client.post("/charges", body, "")).rejects.toBeInstanceOf(IdempotencyError);
  const listed = await (await fetch(server + "/charges", { headers: { Authorization: "Bearer " + token } })).json();
  expect(listed.data).toHaveLength(1);
});
