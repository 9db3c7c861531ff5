// The browser's side of the client: the work that is plain JavaScript
// plumbing, written in JavaScript because each piece is smaller here than
// the wasm-bindgen shims it replaces (docs/BENCHMARKS-JOURNAL.md, "Client size
// levers"). The Rust crate imports this module
// (`#[wasm_bindgen(module = "/js/browser.js")]` in src/js.rs) and keeps the
// decisions: keys and their records, each step of a call, the retry
// policy, the messages. Here:
//
// - `IdempotencyError`, a real subclass of `Error`, and `fail`, which makes
//   one with its stable `code` (its `kind` follows) and `cause` (the
//   package re-exports the class); `wasmError`, what `init()` throws when
//   the page's CSP refuses WebAssembly;
// - `settings` and `call`: the constructor's and a call's option objects,
//   checked (a wrong one is an `IdempotencyError` of code
//   "invalid-argument" naming it) and completed; `abortAll`;
// - `run`: a call's waits (the settle, each attempt, each wait before a
//   retry) between the steps of Rust's `Sending` (src/send.rs), under the
//   Web Lock (`locked`, which waits as long as the holder's lease lives);
// - `attempt`: one `fetch` with the key, a timeout and the caller's
//   `AbortSignal`, its answer's bytes read; `after`: `onAttempt`, the
//   page's `shouldRetry`, and the wait before a retry;
// - `outcome`, `expired`: the objects a page receives; `withFetch`, the
//   class's `fetch` and `fetcher`;
// - `Store`: `localStorage`, or page memory where it refuses, shared with
//   the other tabs in the same case over a `BroadcastChannel`.
//
// Plain modern JavaScript, no dependencies; scripts/build-wasm.sh bundles
// and minifies it with the wasm-bindgen glue into pkg/client_wasm.js.

/** What every rejection and throw of the client is. */
export class IdempotencyError extends Error {}
IdempotencyError.prototype.name = "IdempotencyError";

// The codes whose kind is "exhausted" (the call stopped without a final
// answer) and "aborted"; every other code is of kind "invalid" (nothing
// was sent). docs/CLIENT.md, "Errors", lists them all.
const EXHAUSTED = ["attempts-exhausted", "redirected", "lock-timeout", "key-expired", "headers-failed"];

/**
 * An `IdempotencyError` with its stable `code` (its `kind` follows from it)
 * and, where there is one, its `cause`; a missing `operation`, `key` or
 * `lastStatus` is null.
 */
export function fail(code, message, operation, key, attempts, lastStatus, cause) {
  return Object.assign(new IdempotencyError(message, cause === undefined ? undefined : { cause }), {
    kind: code === "aborted" ? code : EXHAUSTED.includes(code) ? "exhausted" : "invalid",
    code,
    operation: operation ?? null,
    key: key ?? null,
    attempts: attempts ?? 0,
    lastStatus: lastStatus ?? null,
  });
}

const absent = (value) => value === undefined || value === null;

/** `options[name]`, or `fallback` when absent; throws "NAME must be EXPECTED". */
function member(options, name, fits, expected, fallback) {
  const value = options?.[name];
  if (absent(value)) return fallback;
  if (fits(value)) return value;
  throw name + " must be " + expected;
}

const string = (options, name, fallback) =>
  member(options, name, (v) => typeof v === "string", "a string", fallback);

/** A finite number from `min` to 2^53 - 1. */
const number = (options, name, min, fallback) =>
  member(
    options,
    name,
    (v) => typeof v === "number" && v >= min && v <= Number.MAX_SAFE_INTEGER,
    min ? "a positive number" : "a number of at least 0",
    fallback,
  );

const attempts = (options, fallback) =>
  member(
    options,
    "maxAttempts",
    (v) => Number.isInteger(v) && v >= 1 && v < 2 ** 32,
    "a whole number of at least 1",
    fallback,
  );

const HEADERS = "an object of strings";

/**
 * Headers as `[name, value]` pairs: from a plain object of strings, or a
 * `Headers` (of any realm: anything with `forEach`, as `Headers` has).
 */
function pairs(value) {
  if (absent(value)) return [];
  if (typeof value !== "object") throw "headers must be " + HEADERS;
  let entries = [];
  if (typeof value.forEach === "function" && typeof value.get === "function") {
    value.forEach((v, name) => entries.push([name, v]));
  } else {
    entries = Object.entries(value);
    if (entries.some(([, v]) => typeof v !== "string")) throw "headers must be " + HEADERS;
  }
  try {
    new Headers(entries);
  } catch (e) {
    throw "headers: " + e;
  }
  return entries;
}

/** `headers` of a call: static ones. */
const headers = (options) => pairs(options?.headers);

/** Visible ASCII (0x21 to 0x7E), `min` to `max` characters. */
const visible = (options, name, min, max, fallback) =>
  member(
    options,
    name,
    (v) => typeof v === "string" && v.length >= min && v.length <= max && /^[!-~]*$/.test(v),
    `${min} to ${max} visible ASCII characters`,
    fallback,
  );

/** Runs `read`; what it throws (a message) becomes an "invalid-argument" error. */
function checked(read, operation) {
  try {
    return read();
  } catch (message) {
    throw fail(INVALID, String(message), operation);
  }
}
const INVALID = "invalid-argument";

function object(options) {
  if (!absent(options) && typeof options !== "object") throw "options must be an object";
}

/**
 * `new IdempotentClient(options)`: the options checked, with the client's
 * defaults. The retry policy's (maxAttempts, backoff, Retry-After cap) are
 * left undefined here and filled in by Rust from `retry_policy::Policy`.
 */
export const settings = (options) =>
  checked(() => {
    object(options);
    // The page's origin; "" (relative URLs) where there is no location; null
    // for an opaque origin ("null"), where requests need an explicit baseUrl.
    const origin = globalThis.location?.origin ?? "";
    const baseUrl = string(options, "baseUrl", origin === "null" ? null : origin);
    const scope = visible(options, "scope", 0, 128, "");
    const fn = (name) => member(options, name, (v) => typeof v === "function", "a function", null);
    return {
      baseUrl: baseUrl && baseUrl.replace(/\/+$/, ""),
      scope,
      // The client's entries; opens no storage yet.
      store: new Store(string(options, "storagePrefix", "idem:"), scope),
      // The client's calls that have not settled, for abortAll().
      calls: new Set(),
      credentials: member(
        options,
        "credentials",
        (v) => ["same-origin", "include", "omit"].includes(v),
        '"same-origin", "include" or "omit"',
        "same-origin",
      ),
      keyTtlMs: number(options, "keyTtlMs", 1, 86400000),
      timeoutMs: number(options, "timeoutMs", 1, 10000),
      maxAttempts: attempts(options),
      backoffBaseMs: number(options, "backoffBaseMs", 0),
      backoffMaxMs: number(options, "backoffMaxMs", 0),
      maxRetryAfterMs: number(options, "maxRetryAfterMs", 0),
      // A function is called before every attempt (a refreshed token).
      headers: typeof options?.headers === "function" ? options.headers : headers(options),
      onAttempt: fn("onAttempt"),
      onExpired: fn("onExpired"),
      shouldRetry: fn("shouldRetry"),
    };
  });

/** Whether the page gave the client an `onExpired` (it is then told of an expired operation and the client forgets it). */
export function hasOnExpired(settings) {
  return typeof settings.onExpired === "function";
}

/**
 * The expired operation of a tombstone (its record's `text`), as
 * `expiredOperations()` lists it; when `tell`, `onExpired` is called with
 * it first (what it throws is logged and changes nothing).
 */
export function expired(settings, operation, text, tell) {
  const { key, method, path, body, sent } = JSON.parse(text);
  const event = { operation, key, method, path, body: JSON.parse(body ?? "null"), sentAt: sent };
  try {
    if (tell) settings.onExpired?.(event);
  } catch (e) {
    console.warn("IdempotentClient: onExpired threw: " + e);
  }
  return event;
}

/** The longest `busy` lease a call writes, and the longest one believed (src/send.rs). */
const MAX_LEASE_MS = 300000;

/**
 * Aborts every call of the client that has not settled (sign-out), those
 * waiting for their operation's lock included: one string per call, its
 * operation when it holds the lock (Rust clears its lease), else "".
 */
export function abortAll(settings) {
  const operations = [...settings.calls].map((call) => {
    call.stop.abort(new DOMException("abortAll()", "AbortError"));
    return call.holding ? call.operation : "";
  });
  settings.calls.clear();
  return operations;
}

/** JSON with object keys sorted and no whitespace, as the server compares bodies. */
const canonical = (value) =>
  Array.isArray(value)
    ? "[" + value.map(canonical).join(",") + "]"
    : value && typeof value === "object"
      ? "{" + Object.keys(value).sort().map((k) => JSON.stringify(k) + ":" + canonical(value[k])) + "}"
      : JSON.stringify(value);

/** Whether two JSON texts hold the same JSON. */
export function sameJson(a, b) {
  try {
    return canonical(JSON.parse(a)) === canonical(JSON.parse(b));
  } catch {
    return false;
  }
}

/**
 * The last argument of `post`, `send` and `resume`, checked and merged over
 * the client's settings: what one call uses. `maxAttempts` is the call's own
 * (undefined: the client's).
 */
export const call = (settings, options, operation) =>
  checked(() => {
    object(options);
    if (settings.baseUrl === null) {
      throw 'baseUrl is needed on a page of opaque origin ("null")';
    }
    const signal = options?.signal;
    // Duck-typed rather than `instanceof`: a signal made in another frame is
    // an AbortSignal of another realm.
    if (!absent(signal) && typeof signal.aborted !== "boolean") {
      throw "signal must be an AbortSignal";
    }
    // The call's own controller: the page's signal or abortAll() aborts it.
    const stop = new AbortController();
    const onAbort = () => stop.abort(signal.reason);
    const timeoutMs = number(options, "timeoutMs", 1, settings.timeoutMs);
    const maxAttempts = attempts(options);
    const calls = settings.calls;
    const call = {
      stop,
      operation,
      // A promise that rejects when the call is aborted; every wait races
      // it. The page's signal's listener is removed when the call settles
      // (`done`), so a long-lived signal does not keep every call it was given.
      abort: new Promise((_, reject) => stop.signal.addEventListener("abort", reject)),
      done: () => {
        signal?.removeEventListener("abort", onAbort);
        calls.delete(call);
      },
      get aborted() {
        return stop.signal.aborted;
      },
      // The client's headers: pairs, or a function called before each attempt.
      client: settings.headers,
      scope: settings.scope,
      headers: headers(options),
      timeoutMs,
      maxAttempts,
      // How long the call waits for its operation's Web Lock at least: as
      // long as its own attempts could take (5: retry_policy::Policy::DEFAULT);
      // longer while the holder's lease is live (`locked`).
      lockMs: timeoutMs * (maxAttempts ?? settings.maxAttempts ?? 5),
      key: visible(options, "key", 1, 255, undefined),
      // The operation's Web Lock: named like its storage entry.
      lock: settings.store.start + operation,
      store: settings.store,
      baseUrl: settings.baseUrl,
      credentials: settings.credentials,
      onAttempt: settings.onAttempt,
      shouldRetry: settings.shouldRetry,
      // What `fetch` was given beyond the request (`credentials`,
      // `keepalive`, …): its call resolves to a Response.
      init: options?.[FETCH],
    };
    if (signal?.aborted) stop.abort(signal.reason);
    signal?.addEventListener("abort", onAbort);
    calls.add(call);
    // An abort after the call settled is no unhandled rejection.
    call.abort.catch(() => {});
    return call;
  }, operation);

/** The reason the call was aborted (the page's signal's, or abortAll()'s). */
export const reason = (call) => call.stop.signal.reason;

/** `promise`, or the call's abort, whichever settles first. */
const race = (call, promise) => Promise.race([promise, call.abort]);

/** `setTimeout`, its delay clamped to the timers' range (longer ones fire at once). */
const timer = (handler, ms) => setTimeout(handler, Math.min(Math.max(ms, 0), 2 ** 31 - 1));

/** Resolves after `ms` milliseconds; rejects when the call is aborted first. */
const sleep = (call, ms) => race(call, new Promise((resolve) => timer(resolve, ms)));

/**
 * One attempt (number `n` of the call): `fetch` with the key and the body,
 * the answer's bytes read, all within the call's `timeoutMs`. Always
 * resolves, with an answer: `status` 0 and `error` "timeout", "network",
 * "redirect", "aborted" or "headers" (the headers function failed) when
 * there was none, `raw` the error behind it (`cause` its text), and `sent`
 * false when no request left. A request that may change something does not follow
 * redirects: a captive portal's 302 to its login page, followed, would come
 * back as a 200 that is not the server's.
 */
export async function attempt(call, method, path, body, key, n) {
  const controller = new AbortController();
  let timedOut = false;
  const timeout = timer(() => {
    timedOut = true;
    controller.abort();
  }, call.timeoutMs);
  const answer = { status: 0, error: null, replayed: false, body: null, sent: false };
  const started = Date.now();
  try {
    // The client's headers (a function's are asked for now, told whose call
    // and which attempt, so a refreshed token is used), then the call's
    // (same name: the call's wins), then the two the caller cannot override.
    const own = call.client;
    const headers = new Headers();
    let pairsOfClient = own;
    if (typeof own === "function") {
      try {
        pairsOfClient = pairs(await race(call, own({ scope: call.scope, operation: call.operation, attempt: n })));
      } catch (e) {
        if (!call.aborted) answer.error = "headers";
        throw e;
      }
    }
    for (const [name, value] of pairsOfClient) headers.set(name, value);
    for (const [name, value] of call.headers) headers.set(name, value);
    if (body !== undefined) headers.set("Content-Type", "application/json");
    headers.set("Idempotency-Key", key);
    const init = { ...call.init, method, headers, body, signal: controller.signal, credentials: call.init?.credentials ?? call.credentials };
    if (method !== "GET" && method !== "HEAD") init.redirect = "manual";
    // An absolute URL as it is; a path after baseUrl.
    const url = /^https?:/i.test(path) ? path : call.baseUrl + path;
    if (call.aborted) throw 0;
    answer.sent = true;
    const response = await race(call, fetch(url, init));
    if (response.type === "opaqueredirect") {
      answer.error = "redirect";
    } else {
      const header = (name) => response.headers.get(name);
      const type = header("Content-Type");
      const bytes = new Uint8Array(await race(call, response.arrayBuffer()));
      const text = new TextDecoder().decode(bytes);
      let parsed = text;
      if (type === null || /json/i.test(type)) {
        try {
          parsed = JSON.parse(text);
        } catch {}
      }
      Object.assign(answer, {
        bytes,
        headers: response.headers,
        status: response.status,
        replayed: header("Idempotent-Replayed")?.trim() === "true",
        retryAfter: header("Retry-After"),
        body: text === "" ? null : parsed,
        problemType: typeof parsed?.type === "string" ? parsed.type : undefined,
      });
    }
  } catch (e) {
    if (call.aborted) {
      // Stop the request too, not only the waiting for it.
      controller.abort();
      answer.error = "aborted";
      e = reason(call);
    } else {
      answer.error ??= timedOut ? "timeout" : "network";
      answer.cause = String(e);
    }
    answer.raw = e;
  }
  clearTimeout(timeout);
  answer.latencyMs = Date.now() - started;
  return answer;
}

/** The answer's bytes, status and headers as a `Response` (none for a status without a body). */
const response = ({ status, bytes, headers }) =>
  new Response([101, 204, 205, 304].includes(status) ? null : bytes, { status, headers });

/**
 * After an attempt: reports it to `onAttempt` (when a request left; what it
 * throws is logged and changes nothing) and, when a retry follows in `ms`
 * (else null), asks the page's `shouldRetry(response, attempt)` first:
 * `false` when it says no to an answer (which is then final; what it throws
 * is logged and counts as yes), else `true` once the wait is over; rejects
 * when the call is aborted first.
 */
export async function after(call, answer, key, attempt, ms) {
  let retry = ms !== undefined;
  try {
    if (retry && answer.status && (await call.shouldRetry?.(response(answer), attempt)) === false) retry = false;
  } catch (e) {
    console.warn("IdempotentClient: shouldRetry threw: " + e);
  }
  try {
    if (answer.sent) {
      call.onAttempt?.({
        operation: call.operation,
        key,
        attempt,
        status: answer.status || null,
        error: answer.error,
        replayed: answer.replayed,
        latencyMs: answer.latencyMs,
        retryInMs: retry ? ms : null,
      });
    }
  } catch (e) {
    console.warn("IdempotentClient: onAttempt threw: " + e);
  }
  return retry && sleep(call, ms).then(() => true);
}

// Marks the call options that `fetch` made (holding what it passes on to
// the browser's fetch): their call resolves to a Response.
const FETCH = Symbol("fetch");

/**
 * `{ status, ok, body, replayed, key, attempts, code }` (`code`: the last
 * segment of a refusal's problem type); for a call of `fetch`, the answer
 * as a `Response` (its status, headers and bytes).
 */
export const outcome = (call, answer, key, attempts) =>
  call.init
    ? response(answer)
    : {
        status: answer.status,
        ok: answer.status >= 200 && answer.status < 300,
        body: answer.body,
        replayed: answer.replayed,
        key,
        attempts,
        code: answer.status < 300 ? null : (answer.problemType?.split("/").pop() ?? null),
      };

// A body that `fetch` sends as given: its text, not JSON.stringify's.
const RAW = Symbol("raw");

/** The JSON text of a request's body: a `fetch` body as given, else `JSON.stringify`'s. */
export const encode = (body) => body[RAW] ?? JSON.stringify(body);

// What `fetch` passes on to the browser's fetch, and what it cannot honour.
const PASSED = ["credentials", "keepalive", "cache", "mode", "priority", "referrer", "referrerPolicy", "integrity"];

/**
 * Gives the class `fetch(input, init)` and `fetcher(operation)` (the
 * package's entry does, at load): `input` a path, a URL or a `Request` (its
 * method, headers, body and signal are read), `init` fetch's `RequestInit`
 * with `operation`; the body (a string of JSON, or absent) is sent and
 * stored as it is. It is `send` resolving with a `Response`. Here rather
 * than in Rust, where the same was 0.4 KB brotli more.
 */
export function withFetch(Class) {
  const proto = Class.prototype;
  proto.fetch = async function (input, init) {
    const operation = init?.operation;
    let args;
    try {
      if (typeof operation !== "string") throw "init.operation is required (or use fetcher(operation))";
      const request = input instanceof Request ? input : null;
      const path = request ? request.url : input instanceof URL ? input.href : input;
      const method = (init.method ?? request?.method ?? "GET").toUpperCase();
      // (Firefox has no Request.body: read the text, "" for none.)
      const text = init.body ?? (request && (await request.clone().text()));
      if (!absent(text) && typeof text !== "string") throw "init.body must be a string of JSON or absent";
      // Not JSON: a SyntaxError.
      if (text) JSON.parse(text);
      if (["no-cors", "navigate"].includes(init.mode)) throw "init.mode " + init.mode + " hides the answer";
      if (!/^(GET|HEAD)$/.test(method) && (init.redirect ?? "manual") !== "manual") {
        throw "init.redirect: a request that may change something never follows a redirect";
      }
      const headers = new Headers(request?.headers);
      new Headers(init.headers).forEach((value, name) => headers.set(name, value));
      // (A string body alone makes fetch's Request say text/plain.)
      const type = headers.get("Content-Type");
      if (type && !/json|text\/plain/i.test(type)) throw "init.headers: Content-Type " + type + " is not JSON";
      const key = headers.get("Idempotency-Key") ?? undefined;
      headers.delete("Content-Type");
      headers.delete("Idempotency-Key");
      const passed = {};
      for (const name of PASSED) if (!absent(init[name])) passed[name] = init[name];
      if (request?.keepalive) passed.keepalive ??= true;
      args = [
        method,
        path,
        text ? { [RAW]: text } : undefined,
        operation,
        { signal: init.signal ?? request?.signal, headers, key, [FETCH]: passed },
      ];
    } catch (e) {
      throw fail(INVALID, "fetch: " + (typeof e === "string" ? e : "init.body is not JSON (" + e + ")"), operation, null, 0, null, typeof e === "string" ? undefined : e);
    }
    return this.send(...args);
  };
  /** A `fetch` of one operation, for libraries that call fetch(request) alone (openapi-fetch). */
  proto.fetcher = function (operation) {
    return (input, init) => this.fetch(input, { ...init, operation });
  };
}

/**
 * Runs a call: `sending` (src/send.rs) takes each step, and this waits
 * between them (the settle, each attempt, each wait before a retry), under
 * the operation's Web Lock (`locked`). Frees `sending` once the call settles.
 */
export const run = (sending, call, operation) =>
  locked(
    call,
    async () => {
      try {
        const settle = sending.begin();
        if (settle) {
          // A new key kept in page memory, told to the other tabs (`Store`'s
          // `share`): one that holds an older key of the operation answers
          // with its record meanwhile, which `settled` adopts.
          await sleep(call, Math.max(settle, call.store.channel ? ASK_MS : 0)).catch(() => {});
          sending.settled();
        }
        for (;;) {
          const answer = await sending.next();
          const next = sending.decide(answer);
          if (next instanceof Promise) {
            // `false`: the page's shouldRetry took the answer as final.
            if ((await next.catch(() => true)) === false) return sending.last(answer);
          } else if (next !== null) {
            return next;
          }
        }
      } finally {
        sending.free();
      }
    },
    operation,
  );

/**
 * Runs `run` (which starts the call and returns its promise) under the
 * call's Web Lock (`call.lock`, the operation's entry name) where the
 * browser has `navigator.locks`, else at once. The wait for the lock lasts
 * as long as the call holding it may still take: at least `timeoutMs` ×
 * `maxAttempts` of this call, and then as long as the holder's `busy` lease
 * in the operation's record is live (the holder renews it before every
 * attempt and every wait, backoff and `Retry-After` included). A frozen or
 * dead holder's lease runs out: the call then rejects as "exhausted"
 * (`lock-timeout`) with nothing sent. An abort ends the wait (the call then
 * runs unlocked and sees its abort itself). A request that is refused
 * (opaque origins) runs `run` unlocked. The call's abort listener is
 * removed once it settles.
 */
function locked(call, run, operation) {
  let ran = false;
  const go = () => ((call.holding = ran = true), run());
  const signal = call.stop.signal;
  const stop = new AbortController();
  const abort = () => stop.abort();
  signal.addEventListener("abort", abort);
  let late;
  let wait;
  const check = (ms) =>
    (wait = timer(() => {
      // The holder's lease, if it is live (and not longer than a lease can be).
      let busy;
      try {
        busy = JSON.parse(call.store.get(operation)).busy - Date.now();
      } catch {}
      if (busy > 0 && busy <= MAX_LEASE_MS) check(Math.min(busy, 1000));
      else abort((late = true));
    }, ms));
  check(call.lockMs);
  const granted = () => {
    clearTimeout(wait);
    signal.removeEventListener("abort", abort);
  };
  let result;
  try {
    result = navigator.locks.request(call.lock, { signal: signal.aborted ? signal : stop.signal }, () => (granted(), go())).then(
      (value) => (ran ? value : go()),
      (error) => {
        granted();
        if (ran) throw error;
        if (late && !call.aborted) {
          throw fail("lock-timeout", `operation "${operation}": another call held its lock too long; nothing was sent`, operation);
        }
        return go();
      },
    );
  } catch {
    granted();
    result = go();
  }
  return Promise.resolve(result).finally(call.done);
}

/**
 * What `init()` and `initSync()` throw when the wasm cannot be compiled: an
 * `IdempotencyError` (`wasm-blocked-by-csp`) naming the missing source when
 * the page's Content-Security-Policy refused it (Chromium says "Content
 * Security Policy", Firefox "CSP"), else the error as it is.
 */
export function wasmError(e) {
  throw /CSP|Content Security/.test(e?.message)
    ? fail(
        "wasm-blocked-by-csp",
        "exactly-once-client: this page's Content-Security-Policy does not allow WebAssembly: add 'wasm-unsafe-eval' to its script-src",
        null, null, 0, null, e,
      )
    : e;
}

/**
 * A fresh idempotency key: a UUID v4, lower-case and hyphenated, of 16 bytes
 * from `crypto.getRandomValues` (which, unlike `crypto.randomUUID`, works on
 * plain http pages too), the version and variant bits set.
 */
export const newKey = () =>
  crypto
    .getRandomValues(new Uint8Array(16))
    .reduce(
      (key, byte, i) =>
        key +
        (i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "") +
        ((i == 6 ? (byte & 15) | 64 : i == 8 ? (byte & 63) | 128 : byte) + 256).toString(16).slice(1),
      "",
    );

// Records of clients whose localStorage refused a write, by entry name,
// shared by every client of the page; and whether the page was told.
const memory = new Map();
let warned = false;

/** How long a call with a new key in memory waits for another tab's record of its operation (`Store`'s `share`). */
const ASK_MS = 200;
// This page, in what its clients tell the other tabs: the page's own
// clients share `memory` already, and ignore what they tell each other.
const PAGE = Math.random();

/**
 * Whether record `a` keeps its place against `b`, of another key: a live
 * key before an expired one, then the one made first (then the lesser
 * key), so that every tab ends with the same key.
 */
function keeps(a, b) {
  try {
    const [x, y, now] = [JSON.parse(a), JSON.parse(b), Date.now()];
    const live = x.expires > now;
    return x.key != y.key && (live != (y.expires > now) ? live : x.created < y.created || (x.created == y.created && x.key < y.key));
  } catch {}
}

/**
 * One client's entries: `localStorage` under `prefix`, or page memory once
 * `localStorage` is missing, disabled or refuses a write (full). Never
 * throws. Entries written to localStorage before a fallback are still read.
 */
export class Store {
  constructor(prefix, scope) {
    // Entry names: prefix + operation for the scope "" (as the first
    // release), prefix + scope + "|" + operation for another (a call's
    // Web Lock has the same name, `call` above). Names can
    // collide ("idem:" + "admin:x" is "idem:admin:" + "x"), so each record
    // names its owner too, written by `put` and checked exactly by `get`.
    this.start = scope ? prefix + scope + "|" : prefix;
    this.owner = (operation) =>
      '"prefix":' + JSON.stringify(prefix) + ',"scope":' + JSON.stringify(scope) + ',"op":' + JSON.stringify(operation) + ",";
    this.scope = scope;
    this.inMemory = false;
  }

  /**
   * `localStorage`, looked up at this client's first use of it, not when the
   * client is made: in Chromium the lookup asks the browser process whether
   * the page may use storage (1-3 ms in a new profile), which would be paid
   * while the page loads (docs/BENCHMARKS.md, "Init"). Undefined or null
   * where there is none; reading the property itself throws where storage
   * is disabled (then page memory). A full one is found at the first write,
   * which falls back then.
   */
  get local() {
    if (this.opened === undefined) {
      this.opened = null;
      try {
        this.opened = localStorage;
      } catch (e) {
        this.fallBack(e);
      }
    }
    return this.opened;
  }

  /** `false` once this client's entries go to page memory (or there is no localStorage). */
  get persistent() {
    return !!this.local && !this.inMemory;
  }

  fallBack(cause) {
    this.inMemory = true;
    this.share();
    if (!warned) {
      warned = true;
      console.warn(
        "IdempotentClient: keys are kept in page memory, not localStorage (" + cause + ")",
      );
    }
  }

  /**
   * From the fallback on, shares this client's memory records with the
   * clients of the same prefix and scope in the other tabs of the origin
   * that keep theirs in memory too, over a `BroadcastChannel` (where there
   * is none, each tab keeps its own): each write or removal in memory is
   * sent to them. A record received is kept, unless the one here has
   * another key that `keeps` its place: that one is sent back instead, so
   * every tab ends with the same key. So a tab that makes a new key for
   * an operation another tab paid already is answered with that tab's
   * record (`run` waits `ASK_MS` for it).
   */
  share() {
    try {
      // Named after exactly this prefix and scope (the owner of operation "").
      this.channel ??= new BroadcastChannel("exactly-once-client " + this.owner(""));
      // Node (tests, server rendering): the channel must not keep the
      // process alive (Jest waits for it forever); browsers have no unref.
      this.channel.unref?.();
    } catch {
      return;
    }
    this.channel.onmessage = ({ data: { op, text, page } }) => {
      if (page == PAGE) return;
      const name = this.start + op;
      const mine = memory.get(name);
      const ours = (text) => typeof text == "string" && text.startsWith(this.owner(op), 7);
      if (text === null) memory.delete(name);
      else if (ours(mine) && keeps(mine, text)) this.tell(op, mine);
      else if (ours(text)) memory.set(name, text);
    };
  }

  /** Sends the other tabs an operation's record (`null`: removed). */
  tell(op, text) {
    this.channel?.postMessage({ op, text, page: PAGE });
  }

  /**
   * The text of an operation's entry (memory first), or undefined; `{"v":0}`
   * for a record of another owner (a version-2 or -3 record whose prefix,
   * scope or operation differ, or a version-1 record, which names none and
   * is the scope ""'s, read by a client with a scope). Garbage and later
   * versions as they are: Rust decides.
   */
  get(operation) {
    const name = this.start + operation;
    let text;
    try {
      text = memory.get(name) ?? this.local?.getItem(name) ?? undefined;
    } catch {}
    // (The first release wrote `{"v":1,` first, as this one writes `{"v":2,`.)
    return (this.scope && text?.startsWith('{"v":1,')) ||
      (/^\{"v":[23],/.test(text) && !text.startsWith(this.owner(operation), 7))
      ? '{"v":0}'
      : text;
  }

  /** Writes a record of Rust's (`{"v":2,…`, or 3), with its owner after the `v`. */
  put(operation, text) {
    text = text.slice(0, 7) + this.owner(operation) + text.slice(7);
    const name = this.start + operation;
    // A memory copy from an earlier fallback would shadow the new write.
    memory.delete(name);
    if (this.local && !this.inMemory) {
      try {
        return this.local.setItem(name, text);
      } catch (e) {
        this.fallBack(e);
      }
    }
    memory.set(name, text);
    this.tell(operation, text);
  }

  /** Forgets an entry wherever it is (a stale one in localStorage would come back). */
  remove(operation) {
    const name = this.start + operation;
    memory.delete(name);
    this.tell(operation, null);
    try {
      this.local?.removeItem(name);
    } catch {}
  }

  /**
   * The operations whose entry name this client would use: candidates only,
   * whose records Rust reads and keeps when their owner is exactly this
   * client's.
   */
  operations() {
    const names = new Set(memory.keys());
    try {
      for (let i = 0; i < this.local?.length; i++) names.add(this.local.key(i));
    } catch {}
    const start = this.start;
    return [...names].filter((name) => name?.startsWith(start)).map((name) => name.slice(start.length));
  }
}
