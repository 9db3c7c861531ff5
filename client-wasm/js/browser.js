// The browser's side of the client: the work that is plain JavaScript
// plumbing, written in JavaScript because each piece is smaller here than
// the wasm-bindgen shims it replaces (docs/BENCHMARKS.md, "Client size
// levers"). The Rust crate imports this module
// (`#[wasm_bindgen(module = "/js/browser.js")]` in src/js.rs) and keeps the
// decisions: keys and their records, the send loop, the retry policy, the
// messages. Here:
//
// - `IdempotencyError`, a real subclass of `Error`, and `fail`, which makes
//   one (the package re-exports the class);
// - `settings` and `call`: the constructor's and a call's option objects,
//   checked (a wrong one is an `IdempotencyError` of kind "invalid" naming
//   it) and completed;
// - `attempt`: one `fetch` with the key, a timeout and the caller's
//   `AbortSignal`, its answer read; `sleep`, a wait that an abort ends;
// - `locked`: the Web Lock around a call, and its fallbacks;
// - `report` and `outcome`: the objects a page receives;
// - `Store`: `localStorage`, or page memory where it refuses.
//
// Plain modern JavaScript, no dependencies; scripts/build-wasm.sh bundles
// and minifies it with the wasm-bindgen glue into pkg/client_wasm.js.

/** What every rejection and throw of the client is. */
export class IdempotencyError extends Error {}
IdempotencyError.prototype.name = "IdempotencyError";

/** An `IdempotencyError`; a missing `operation`, `key` or `lastStatus` is null. */
export function fail(kind, message, operation, key, attempts, lastStatus) {
  return Object.assign(new IdempotencyError(message), {
    kind,
    operation: operation ?? null,
    key: key ?? null,
    attempts,
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

/** `headers`: an object of strings that the browser takes as headers. */
function headers(options) {
  const expected = "an object of strings";
  const entries = Object.entries(member(options, "headers", (v) => typeof v === "object", expected, {}));
  if (entries.some(([, value]) => typeof value !== "string")) throw "headers must be " + expected;
  try {
    new Headers(entries);
  } catch (e) {
    throw "headers: " + e;
  }
  return entries;
}

/** Runs `read`; what it throws (a message) becomes an "invalid" error. */
function checked(read, operation) {
  try {
    return read();
  } catch (message) {
    throw fail("invalid", String(message), operation, null, 0, null);
  }
}

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
    return {
      baseUrl: baseUrl && baseUrl.replace(/\/+$/, ""),
      prefix: string(options, "storagePrefix", "idem:"),
      keyTtlMs: number(options, "keyTtlMs", 1, 86400000),
      timeoutMs: number(options, "timeoutMs", 1, 10000),
      maxAttempts: attempts(options),
      backoffBaseMs: number(options, "backoffBaseMs", 0),
      backoffMaxMs: number(options, "backoffMaxMs", 0),
      maxRetryAfterMs: number(options, "maxRetryAfterMs", 0),
      headers: headers(options),
      onAttempt: member(options, "onAttempt", (v) => typeof v === "function", "a function", null),
    };
  });

/**
 * The last argument of `post`, `send` and `resume`, checked and merged over
 * the client's settings: what one call uses. `maxAttempts` is the call's own
 * (undefined: the client's).
 */
export const call = (settings, options, operation) =>
  checked(() => {
    object(options);
    const signal = options?.signal;
    // Duck-typed rather than `instanceof`: a signal made in another frame is
    // an AbortSignal of another realm.
    if (!absent(signal) && typeof signal.aborted !== "boolean") {
      throw "signal must be an AbortSignal";
    }
    const call = {
      signal,
      // A promise that rejects when the signal fires; every wait races it.
      abort: signal && new Promise((_, reject) => signal.addEventListener("abort", reject)),
      get aborted() {
        return !!signal?.aborted;
      },
      headers: [...settings.headers, ...headers(options)],
      timeoutMs: number(options, "timeoutMs", 1, settings.timeoutMs),
      maxAttempts: attempts(options),
      baseUrl: settings.baseUrl,
      onAttempt: settings.onAttempt,
    };
    // An abort after the call settled is no unhandled rejection.
    call.abort?.catch(() => {});
    if (call.baseUrl === null) {
      throw (
        'baseUrl: this page has an opaque origin ("null": a sandboxed frame or a data: URL), ' +
        "so requests need an explicit baseUrl option"
      );
    }
    return call;
  }, operation);

/** `promise`, or the call's abort, whichever settles first. */
const race = (call, promise) => (call.abort ? Promise.race([promise, call.abort]) : promise);

/** `setTimeout`, its delay clamped to the timers' range (longer ones fire at once). */
const timer = (handler, ms) => setTimeout(handler, Math.min(Math.max(ms, 0), 2 ** 31 - 1));

/** Resolves after `ms` milliseconds; rejects when the call is aborted first. */
export const sleep = (call, ms) => race(call, new Promise((resolve) => timer(resolve, ms)));

/**
 * One attempt: `fetch` with the key and a JSON body, the answer's body read,
 * all within the call's `timeoutMs`. Always resolves, with an answer:
 * `status` 0 and `error` "timeout", "network" (`cause` says why),
 * "redirect" or "aborted" when there was none. A request that may change
 * something does not follow redirects: a captive portal's 302 to its login
 * page, followed, would come back as a 200 that is not the server's.
 */
export async function attempt(call, method, path, body, key) {
  const controller = new AbortController();
  let timedOut = false;
  const timeout = timer(() => {
    timedOut = true;
    controller.abort();
  }, call.timeoutMs);
  const answer = { status: 0, error: null, replayed: false, body: null };
  try {
    // The client's headers, then the call's (same name: the call's wins),
    // then the two the caller cannot override.
    const headers = new Headers();
    for (const [name, value] of call.headers) headers.set(name, value);
    if (body !== undefined) headers.set("Content-Type", "application/json");
    headers.set("Idempotency-Key", key);
    const init = { method, headers, body, signal: controller.signal };
    if (method !== "GET" && method !== "HEAD") init.redirect = "manual";
    const response = await race(call, fetch(call.baseUrl + path, init));
    if (response.type === "opaqueredirect") {
      answer.error = "redirect";
    } else {
      const header = (name) => response.headers.get(name);
      const type = header("Content-Type");
      const text = await race(call, response.text());
      let parsed = text;
      if (type === null || /json/i.test(type)) {
        try {
          parsed = JSON.parse(text);
        } catch {}
      }
      Object.assign(answer, {
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
    } else {
      answer.error = timedOut ? "timeout" : "network";
      answer.cause = String(e);
    }
  }
  clearTimeout(timeout);
  return answer;
}

/** Calls `onAttempt`, if any; what it throws is logged and changes nothing. */
export function report(call, operation, key, attempt, answer, latencyMs, retryInMs) {
  const onAttempt = call.onAttempt;
  try {
    onAttempt?.({
      operation,
      key,
      attempt,
      status: answer.status || null,
      error: answer.error,
      replayed: answer.replayed,
      latencyMs,
      retryInMs: retryInMs ?? null,
    });
  } catch (e) {
    console.warn("IdempotentClient: onAttempt threw: " + e);
  }
}

/** `{ status, ok, body, replayed, key, attempts }`. */
export const outcome = ({ status, body, replayed }, key, attempts) => ({
  status,
  ok: status >= 200 && status < 300,
  body,
  replayed,
  key,
  attempts,
});

/**
 * Runs `run` (which starts the call and returns its promise) under the Web
 * Lock `name` where the browser has `navigator.locks`, else at once. The
 * call's signal goes to the lock request, so an abort ends the wait for the
 * lock too. A request that is refused (opaque origins) or aborted before the
 * lock is granted runs `run` unlocked: the call then sees its abort itself.
 */
export function locked(name, call, run) {
  let ran = false;
  const go = () => {
    ran = true;
    return run();
  };
  let granted;
  try {
    granted = navigator.locks.request(name, { signal: call.signal ?? undefined }, go);
  } catch {
    return go();
  }
  return granted.then(
    (value) => (ran ? value : go()),
    (error) => (ran ? Promise.reject(error) : go()),
  );
}

/** 16 bytes from the browser's CSPRNG, for a UUID v4 made in Rust. */
export const randomBytes = () => crypto.getRandomValues(new Uint8Array(16));

// Records of clients whose localStorage refused a write, by entry name,
// shared by every client of the page; and whether the page was told.
const memory = new Map();
let warned = false;

/**
 * One client's entries: `localStorage` under `prefix`, or page memory once
 * `localStorage` is missing, disabled or refuses a write (full). Never
 * throws. Entries written to localStorage before a fallback are still read.
 */
export class Store {
  constructor(prefix) {
    this.prefix = prefix;
    this.inMemory = false;
    try {
      // Reading the property itself throws where storage is disabled. A
      // full one is found at the first write, which falls back then.
      this.local = localStorage;
    } catch (e) {
      this.fallBack(e);
    }
  }

  fallBack(cause) {
    this.inMemory = true;
    if (!warned) {
      warned = true;
      console.warn(
        "IdempotentClient: localStorage is unavailable or full; idempotency keys are kept in memory for this page only (" +
          cause +
          ")",
      );
    }
  }

  /** The text of an operation's entry (memory first), or undefined. */
  get(operation) {
    const name = this.prefix + operation;
    try {
      return memory.get(name) ?? this.local?.getItem(name) ?? undefined;
    } catch {}
  }

  put(operation, text) {
    const name = this.prefix + operation;
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
  }

  /** Forgets an entry wherever it is (a stale one in localStorage would come back). */
  remove(operation) {
    const name = this.prefix + operation;
    memory.delete(name);
    try {
      this.local?.removeItem(name);
    } catch {}
  }

  /** The operations that have an entry under this prefix. */
  operations() {
    const names = new Set(memory.keys());
    try {
      for (let i = 0; i < this.local?.length; i++) names.add(this.local.key(i));
    } catch {}
    const prefix = this.prefix;
    return [...names].filter((name) => name?.startsWith(prefix)).map((name) => name.slice(prefix.length));
  }
}
