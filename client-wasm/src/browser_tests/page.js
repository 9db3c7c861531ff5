// What the browser tests written in JavaScript share: the helpers in scope
// of every test, and `run`, which runs one test of a file's source (page.rs
// says why the tests are strings and not a snippet per file).

export const UNREACHABLE = "http://127.0.0.1:9";

export function check(condition, what) {
  if (!condition) throw new Error(what);
}

export function eq(actual, expected, what) {
  const a = JSON.stringify(actual), e = JSON.stringify(expected);
  if (a !== e) throw new Error(`${what}: got ${a}, expected ${e}`);
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export const charge = (amount, description = "browser test") => ({ amount, currency: "usd", description });

/** Awaits a promise that must reject with an IdempotencyError; returns it. */
export async function rejects(promise, what) {
  let outcome;
  try {
    outcome = await promise;
  } catch (e) {
    check(e?.name === "IdempotencyError", `${what}: not an IdempotencyError: ${e?.stack ?? e}`);
    return e;
  }
  throw new Error(`${what}: resolved with ${JSON.stringify(outcome)}`);
}

/** Calls `f`, which must throw an IdempotencyError; returns it. */
export function throws(f, what) {
  try {
    f();
  } catch (e) {
    check(e?.name === "IdempotencyError", `${what}: not an IdempotencyError: ${e?.stack ?? e}`);
    return e;
  }
  throw new Error(`${what}: threw nothing`);
}

/** What every test uses: its prefix, its customer, its clients. */
export function setup(env) {
  const s = {
    prefix: env.prefix,
    bearer: "Bearer " + env.token,
    options(extra = {}) {
      return {
        baseUrl: env.server,
        storagePrefix: env.prefix,
        backoffBaseMs: 10,
        backoffMaxMs: 100,
        headers: { Authorization: s.bearer },
        ...extra,
      };
    },
    make(extra) {
      return new env.Client(s.options(extra));
    },
    /** The text of an operation's entry in localStorage (null for none). */
    stored(operation) {
      return localStorage.getItem(s.prefix + operation);
    },
    /** An operation's record, parsed. */
    record(operation) {
      return JSON.parse(s.stored(operation));
    },
    /** Every localStorage entry's name and text. */
    entries() {
      const all = [];
      for (let i = 0; i < localStorage.length; i++) {
        const name = localStorage.key(i);
        all.push([name, localStorage.getItem(name)]);
      }
      return all;
    },
    async charges() {
      const response = await fetch(env.server + "/charges", { headers: { Authorization: s.bearer } });
      check(response.status === 200, "GET /charges: " + response.status);
      return (await response.json()).data;
    },
  };
  return s;
}

/** A pending operation: one attempt that never reaches a server. */
export async function leavePending(client, operation, body = charge(100)) {
  const error = await rejects(client.post("/charges", body, operation), "a call to nowhere");
  eq(error.kind, "exhausted", "the call to nowhere");
  return error;
}

/** Counts the page's fetches (and keeps their init) until `restore()`. */
export function spyFetch() {
  const real = window.fetch;
  const calls = [];
  window.fetch = function (input, init) {
    calls.push({ url: String(input?.url ?? input), init });
    return real.apply(this, arguments);
  };
  return { calls, restore: () => (window.fetch = real) };
}

/** A failed test's error as the Rust side reports it: its message, then its stack. */
export function describe(error) {
  return String(error?.message ?? error) + "\n" + (error?.stack ?? "");
}

const helpers = { UNREACHABLE, check, eq, sleep, charge, rejects, throws, setup, leavePending, spyFetch };
const compiled = new Map();

/**
 * Runs the exported function `name` of `source` (a file's tests: functions,
 * some `export`ed, using the helpers above) with `env` and `arg`. Each
 * source is compiled once, in strict mode, with the helpers in scope.
 */
export async function run(source, name, env, arg) {
  let tests = compiled.get(source);
  if (!tests) {
    const names = [...source.matchAll(/^export (?:async )?function (\w+)/gm)].map((m) => m[1]);
    const body = '"use strict";\n' + source.replace(/^export /gm, "") + "\nreturn { " + names.join(", ") + " };";
    tests = new Function(...Object.keys(helpers), body)(...Object.values(helpers));
    compiled.set(source, tests);
  }
  if (typeof tests[name] !== "function") throw new Error("no test " + name);
  return await tests[name](env, arg);
}
