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
      // The client's entries; opens no storage yet.
      store: new Store(string(options, "storagePrefix", "idem:"), visible(options, "scope", 0, 128, "")),
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
      onAttempt: member(options, "onAttempt", (v) => typeof v === "function", "a function", null),
      onExpired: member(options, "onExpired", (v) => typeof v === "function", "a function", null),
    };
  });

/** Calls `onExpired`, if any; what it throws is logged and changes nothing. */
export function expired(settings, operation, text) {
  const { key, method, path, body, sent } = JSON.parse(text);
  try {
    settings.onExpired?.({ operation, key, method, path, body: JSON.parse(body ?? "null"), sentAt: sent });
  } catch (e) {
    console.warn("IdempotentClient: onExpired threw: " + e);
  }
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
    const signal = options?.signal;
    // Duck-typed rather than `instanceof`: a signal made in another frame is
    // an AbortSignal of another realm.
    if (!absent(signal) && typeof signal.aborted !== "boolean") {
      throw "signal must be an AbortSignal";
    }
    let onAbort;
    const timeoutMs = number(options, "timeoutMs", 1, settings.timeoutMs);
    const maxAttempts = attempts(options);
    const call = {
      signal,
      // A promise that rejects when the signal fires; every wait races it.
      // Its listener is removed when the call settles (`done`), so a
      // long-lived signal does not keep every call it was given.
      abort:
        signal &&
        new Promise((_, reject) => {
          onAbort = reject;
          signal.addEventListener("abort", reject, { once: true });
        }),
      done: () => signal?.removeEventListener("abort", onAbort),
      get aborted() {
        return !!signal?.aborted;
      },
      // The client's headers: pairs, or a function called before each attempt.
      client: settings.headers,
      headers: headers(options),
      timeoutMs,
      maxAttempts,
      // How long the call may wait for its operation's Web Lock: as long as
      // its own attempts could take (5: retry_policy::Policy::DEFAULT).
      lockMs: timeoutMs * (maxAttempts ?? settings.maxAttempts ?? 5),
      key: visible(options, "key", 1, 255, undefined),
      // The operation's Web Lock: named like its storage entry.
      lock: settings.store.start + operation,
      baseUrl: settings.baseUrl,
      credentials: settings.credentials,
      onAttempt: settings.onAttempt,
      response: options?.[FETCH] === true,
    };
    // An abort after the call settled is no unhandled rejection.
    call.abort?.catch(() => {});
    if (call.baseUrl === null) {
      throw 'baseUrl is needed on a page of opaque origin ("null")';
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
    // The client's headers (a function's are asked for now, so a refreshed
    // token is used), then the call's (same name: the call's wins), then
    // the two the caller cannot override.
    const own = call.client;
    const headers = new Headers();
    for (const [name, value] of typeof own === "function" ? pairs(await race(call, own())) : own) {
      headers.set(name, value);
    }
    for (const [name, value] of call.headers) headers.set(name, value);
    if (body !== undefined) headers.set("Content-Type", "application/json");
    headers.set("Idempotency-Key", key);
    const init = { method, headers, body, signal: controller.signal, credentials: call.credentials };
    if (method !== "GET" && method !== "HEAD") init.redirect = "manual";
    // An absolute URL as it is; a path after baseUrl.
    const url = /^https?:/i.test(path) ? path : call.baseUrl + path;
    const response = await race(call, fetch(url, init));
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
        text,
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

// Marks the call options that `fetch` made: their call resolves to a Response.
const FETCH = Symbol("fetch");

/**
 * `{ status, ok, body, replayed, key, attempts }`; for a call of `fetch`, the
 * answer as a `Response` (its status, headers and body text).
 */
export const outcome = (call, { status, body, replayed, text, headers }, key, attempts) =>
  call.response
    ? new Response([101, 204, 205, 304].includes(status) ? null : text, { status, headers })
    : {
        status,
        ok: status >= 200 && status < 300,
        body,
        replayed,
        key,
        attempts,
      };

/**
 * Gives the class its `fetch(input, init)` (the package's entry does, at
 * load): `input` a path, a URL or a `Request` (its method, headers and body
 * are read), `init` fetch's `RequestInit` with `operation`; `body` a string
 * of JSON or absent. It is `send` (an "invalid" `IdempotencyError` for bad
 * arguments) resolving with a `Response`. Here rather than in Rust, where
 * the same was 0.4 KB brotli more.
 */
export function withFetch(Class) {
  Class.prototype.fetch = async function (input, init) {
    const operation = init?.operation;
    let args;
    try {
      const request = input instanceof Request ? input : null;
      const path = request ? request.url : input instanceof URL ? input.href : input;
      let text = init.body;
      // (Firefox has no Request.body: read the text, "" for none.)
      if (absent(text) && request) text = await request.clone().text();
      if (!absent(text) && typeof text !== "string") throw 0;
      const headers = [...pairs(request?.headers), ...pairs(init.headers)];
      args = [
        init.method ?? request?.method ?? "GET",
        path,
        // Not JSON: a SyntaxError, "invalid" below.
        absent(text) || text === "" ? undefined : JSON.parse(text),
        operation,
        {
          signal: init.signal ?? request?.signal,
          // The client sets Content-Type itself (application/json with a body).
          headers: Object.fromEntries(headers.filter(([name]) => !/^content-type$/i.test(name))),
          [FETCH]: true,
        },
      ];
    } catch (e) {
      throw fail(
        "invalid",
        "fetch: init.body must be a string of JSON or absent (" + e + ")",
        operation ?? null,
        null,
        0,
        null,
      );
    }
    return this.send(...args);
  };
}

/**
 * Runs `run` (which starts the call and returns its promise) under the
 * call's Web Lock (`call.lock`, the operation's entry name) where the
 * browser has `navigator.locks`, else at once. The
 * wait for the lock is bounded: an abort of the call's signal ends it (the
 * call then runs unlocked and sees its abort itself), and so does the time
 * the call's own attempts could take, `timeoutMs` × `maxAttempts` (a frozen
 * background tab may hold the lock): the call then rejects as "exhausted"
 * with nothing sent. A request that is refused
 * (opaque origins) runs `run` unlocked. The call's abort listener is
 * removed once it settles.
 */
export function locked(call, run, operation) {
  let ran = false;
  const go = () => ((ran = true), run());
  const { signal } = call;
  const stop = new AbortController();
  const abort = () => stop.abort();
  signal?.addEventListener("abort", abort);
  let late;
  const wait = timer(() => abort((late = true)), call.lockMs);
  const granted = () => {
    clearTimeout(wait);
    signal?.removeEventListener("abort", abort);
  };
  let result;
  try {
    result = navigator.locks.request(call.lock, { signal: signal?.aborted ? signal : stop.signal }, () => (granted(), go())).then(
      (value) => (ran ? value : go()),
      (error) => {
        granted();
        if (ran) throw error;
        if (late && !call.aborted) {
          throw fail("exhausted", `operation "${operation}": another call held its lock too long; nothing was sent`, operation, null, 0, null);
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
  constructor(prefix, scope) {
    // Entry names: prefix + operation for the scope "" (as the first
    // release), prefix + scope + "|" + operation for another (a call's
    // Web Lock has the same name, `call` above). Names can
    // collide ("idem:" + "admin:x" is "idem:admin:" + "x"), so each record
    // names its owner too, written by `put` and checked exactly by `get`.
    this.start = scope ? prefix + scope + "|" : prefix;
    this.owner = (operation) =>
      '{"v":2,"prefix":' + JSON.stringify(prefix) + ',"scope":' + JSON.stringify(scope) + ',"op":' + JSON.stringify(operation);
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
    if (!warned) {
      warned = true;
      console.warn(
        "IdempotentClient: keys are kept in page memory, not localStorage (" + cause + ")",
      );
    }
  }

  /**
   * The text of an operation's entry (memory first), or undefined; `{"v":0}`
   * for a record of another owner (a version-2 record whose prefix, scope or
   * operation differ, or a version-1 record, which names none and is the
   * scope ""'s, read by a client with a scope). Garbage and later versions
   * as they are: Rust decides.
   */
  get(operation) {
    const name = this.start + operation;
    let text;
    try {
      text = memory.get(name) ?? this.local?.getItem(name) ?? undefined;
    } catch {}
    // (The first release wrote `{"v":1,` first, as this one writes `{"v":2,`.)
    return (this.scope && text?.startsWith('{"v":1,')) ||
      (text?.startsWith('{"v":2,') && !text.startsWith(this.owner(operation) + ","))
      ? '{"v":0}'
      : text;
  }

  /** Writes a record of Rust's (`{"v":2,…`), with its owner after the `v`. */
  put(operation, text) {
    text = this.owner(operation) + text.slice(6);
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
  }

  /** Forgets an entry wherever it is (a stale one in localStorage would come back). */
  remove(operation) {
    const name = this.start + operation;
    memory.delete(name);
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
