// What the declarations must say about the accounts and fetch API (scopes,
// clear, onExpired, the per-call key, credentials, headers), checked by
// `tsc --strict` (scripts/test-package.sh): each `@ts-expect-error` line
// must be an error, and every other line must compile.
import { IdempotentClient } from "exactly-once-client";
import type {
  CallOptions,
  ClientOptions,
  ExpiredEvent,
  FetchInit,
  Json,
  Outcome,
  Problem,
  Refused,
} from "exactly-once-client";

declare const refused: Refused;
// A refusal's body is whatever JSON came back (a proxy's array, a number),
// not only the server's problem, text or null.
const fromProxy: Refused["body"] = [1, "two", { three: 3 }];
const number: Refused["body"] = 502;
// @ts-expect-error it is not known to be a problem, text or null
const narrow: Problem | string | null = refused.body;
const json: Problem | Json = refused.body;

declare const outcome: Outcome<{ id: string }>;
if (!outcome.ok) {
  // @ts-expect-error a refusal's body must be narrowed before `.type`
  outcome.body.type;
}

const options: ClientOptions = {
  scope: "account-7",
  credentials: "include",
  headers: async () => new Headers({ Authorization: "Bearer 0123456789abcdef" }),
  onExpired: (event: ExpiredEvent) => console.log(event.operation, event.key, event.sentAt, event.body),
};
// @ts-expect-error credentials are one of fetch's three words
const wrong: ClientOptions = { credentials: "always" };
const call: CallOptions = { key: "order-7", headers: new Headers() };

const client = new IdempotentClient(options);
const forgotten: number = client.clear();
const persistent: boolean = client.persistent;
// @ts-expect-error persistent is read-only
client.persistent = true;
const init: FetchInit = { method: "POST", body: "{}", operation: "checkout:7" };
const response: Promise<Response> = client.fetch("/charges", init);
// @ts-expect-error fetch needs the operation
client.fetch("/charges", { method: "POST" });

export { call, forgotten, fromProxy, json, narrow, number, persistent, response, wrong };
