// TypeScript declarations of the npm package `exactly-once-client` (the
// browser client of CONTRACT section 4), written by hand: wasm-bindgen's
// own declarations type every argument `any` and expose the raw wasm
// exports. Nothing here is `any` (scripts/test-package.sh checks).
// The manual is docs/CLIENT.md.

/** Where `init` finds the module: a URL, a `Response`, its bytes, or a compiled module. */
export type InitInput = RequestInfo | URL | Response | BufferSource | WebAssembly.Module;

/** What `initSync` takes: the module's bytes, or a compiled module. */
export type SyncInitInput = BufferSource | WebAssembly.Module;

/** The instantiated module's exports (their names are minified); pages need none of them. */
export type InitOutput = WebAssembly.Exports;

/**
 * Compiles and instantiates the module, once; call it before anything else.
 * Without an argument it uses the wasm's bytes inside this file (no second
 * request); a page that hosts a module of its own may pass it instead.
 */
export default function init(
  module_or_path?: { module_or_path: InitInput | Promise<InitInput> } | InitInput | Promise<InitInput>,
): Promise<InitOutput>;

/**
 * Instantiates the module synchronously: without an argument from the bytes
 * inside this file, or from the bytes or compiled module given.
 */
export function initSync(module?: { module: SyncInitInput } | SyncInitInput): InitOutput;
/** Options of {@link IdempotentClient}. Every member is optional. */
export interface ClientOptions {
  /** Prefix of every request URL (`baseUrl + path`). Default: the page's origin. */
  baseUrl?: string;
  /** Prefix of the client's localStorage entries and Web Lock names, one per operation. Default: `"idem:"`. */
  storagePrefix?: string;
  /**
   * Whose operations these are: the signed-in account, or a session id (0 to 128 visible ASCII
   * characters). The client lists, resumes, reuses, purges and sends only the records of its own
   * `storagePrefix` and `scope`, matched exactly. Default: `""`.
   */
  scope?: string;
  /** Passed to every `fetch`: `"include"` for an API on another origin that authenticates with a cookie. Default: `"same-origin"`. */
  credentials?: "same-origin" | "include" | "omit";
  /** How long an operation keeps its key, in milliseconds. Default: `86400000` (24 h). */
  keyTtlMs?: number;
  /** Each attempt is aborted after this many milliseconds. Default: `10000`. */
  timeoutMs?: number;
  /** Requests per call, the first included; a whole number of at least 1. Default: `5`. */
  maxAttempts?: number;
  /** Backoff before the first retry is random in `[0, backoffBaseMs)`, doubling each retry. Default: `200`. */
  backoffBaseMs?: number;
  /** Upper bound of the computed backoff, in milliseconds. Default: `10000`. */
  backoffMaxMs?: number;
  /** A `Retry-After` longer than this many milliseconds is waited this long. Default: `60000`. */
  maxRetryAfterMs?: number;
  /**
   * Headers added to every call, such as `Authorization`: an object, a `Headers`, or a function
   * returning either (or a Promise of it), called before every attempt with whose call it is, so
   * that the token of that account, refreshed, is used by the next retry. What the function throws
   * stops the call (`headers-failed`). Default: none.
   */
  headers?: HeadersValue | ((context: HeadersContext) => HeadersValue | Promise<HeadersValue>);
  /**
   * Asked before an answer that the client would retry (408, 409 `idempotency-key-in-use`, 425,
   * 429, 5xx) is retried: `false` makes that answer final (the call resolves with it). Never asked
   * about a final answer, nor about a network error or a timeout (no answer: the request may have
   * run, only the same key finds out). What it throws is logged and counts as `true`.
   */
  shouldRetry?: (response: Response, attempt: number) => boolean | Promise<boolean>;
  /** Called after every attempt of every call; what it throws is logged and ignored. */
  onAttempt?: (event: AttemptEvent) => void;
  /**
   * Called once for each operation whose key outlived `keyTtlMs` (or the device clock went back
   * before the key was made) while its request had no final answer, just before the client forgets
   * it. Such an operation is never resent: find out whether it ran (e.g. `GET /charges`).
   */
  onExpired?: (event: ExpiredEvent) => void;
}

/** Headers as the client takes them: a plain object of strings, or a `Headers`. */
export type HeadersValue = Record<string, string> | Headers;

/** What a `headers` function is told before each attempt. */
export interface HeadersContext {
  /** The client's `scope`: whose operation this is. */
  scope: string;
  operation: string;
  /** 1 for the call's first attempt. */
  attempt: number;
}

/** What `onExpired` receives. */
export interface ExpiredEvent {
  operation: string;
  key: string;
  method: string;
  path: string;
  /** The request's body, parsed; `null` for none. */
  body: unknown;
  /** When the request was stored (sent first), in milliseconds since the epoch. */
  sentAt: number;
}

/** The optional last argument of `post`, `send` and `resume`. */
export interface CallOptions {
  /** Stops waiting and rejects with kind `"aborted"`; the key and the request stay for `resume`. */
  signal?: AbortSignal;
  /** Headers for this call, over the constructor's (`Idempotency-Key` and `Content-Type` cannot be overridden). */
  headers?: HeadersValue;
  /**
   * The embedder's own key for this operation (1 to 255 visible ASCII characters), such as one the
   * server made with the order; stored as if the client had made it. A different key for an
   * operation that already has one is `"invalid"`.
   */
  key?: string;
  /** This call's per-attempt timeout, in milliseconds. */
  timeoutMs?: number;
  /** This call's attempts, the first included. */
  maxAttempts?: number;
}

/** An RFC 9457 problem, the body of the server's error answers. */
export interface Problem {
  /** URI of the problem type; its last segment names it, e.g. `…/insufficient-inventory`. */
  type: string;
  title: string;
  status: number;
  detail?: string;
  [member: string]: unknown;
}

/** What every outcome says. */
export interface OutcomeBase {
  /**
   * A refusal's problem type, its last path segment (`"card-declined"`,
   * `"operation-needs-attention"`, …); `null` for a success or an answer without one.
   */
  code: string | null;
  /** HTTP status of the final answer. */
  status: number;
  /** `true` when the server replayed a stored answer (`Idempotent-Replayed: true`). */
  replayed: boolean;
  /** The idempotency key the call was sent with. */
  key: string;
  /** How many requests this call sent, at least 1. */
  attempts: number;
}

/** A 2xx answer; `body` is its JSON (`T`), its text when it is not JSON, `null` when empty. */
export interface Succeeded<T> extends OutcomeBase {
  ok: true;
  body: T;
}

/** Any value JSON can hold. */
export type Json = string | number | boolean | null | Json[] | { [member: string]: Json };

/**
 * A final answer that is not 2xx: a business refusal such as `409 insufficient-inventory`. Its
 * `body` is usually the server's {@link Problem}, but a proxy or gateway on the way may answer
 * any JSON (or text): narrow it before use (docs/CLIENT.md, "TypeScript quick start").
 */
export interface Refused extends OutcomeBase {
  ok: false;
  /**
   * The answer's JSON: the problem (the server's error format), or whatever JSON something else on
   * the way sent; its text when it is not JSON; `null` when empty.
   */
  body: Problem | Json;
}

/** How a call ended: the first answer that is not retried. Check `ok` first. */
export type Outcome<T = unknown> = Succeeded<T> | Refused;

/** What `onAttempt` receives after each attempt. */
export interface AttemptEvent {
  operation: string;
  key: string;
  /** 1 for the first attempt of the call. */
  attempt: number;
  /** The answer's HTTP status; `null` when the attempt got none. */
  status: number | null;
  /** Why the attempt got no answer; `null` when it got one. */
  error: "timeout" | "network" | "redirect" | "aborted" | null;
  replayed: boolean;
  latencyMs: number;
  /** The wait before the next attempt; `null` when none follows. */
  retryInMs: number | null;
}

/** `"exhausted"`: the call stopped without a final answer. `"aborted"`: the signal fired. `"invalid"`: nothing was sent. */
export type IdempotencyErrorKind = "exhausted" | "aborted" | "invalid";

/**
 * Why a call failed, stable across releases (docs/CLIENT.md, "Errors"). Kind `"exhausted"`:
 * `attempts-exhausted`, `redirected`, `lock-timeout`, `key-expired`, `headers-failed`. Kind
 * `"aborted"`: `aborted`. Kind `"invalid"` (nothing was sent): the others.
 */
export type IdempotencyErrorCode =
  | "invalid-argument"
  | "request-differs"
  | "key-differs"
  | "nothing-to-resume"
  | "operation-expired"
  | "foreign-record"
  | "operation-busy"
  | "attempts-exhausted"
  | "redirected"
  | "lock-timeout"
  | "key-expired"
  | "headers-failed"
  | "aborted"
  | "wasm-blocked-by-csp";

/**
 * Options of `fetch`: fetch's `RequestInit` with the operation. `body` is a string of JSON (sent
 * and stored as it is), or absent; `credentials`, `keepalive`, `cache`, `mode` (not `"no-cors"`),
 * `priority`, `referrer`, `referrerPolicy` and `integrity` are passed on; `redirect` other than
 * `"manual"` on a method other than GET and HEAD is refused.
 */
export interface FetchInit extends RequestInit {
  /** The operation this request belongs to (required). */
  operation: string;
}

/** Every rejection of the client, and what `new IdempotentClient`, `keyFor`, `release` and `clear` throw. */
export class IdempotencyError extends Error {
  private constructor();
  readonly name: "IdempotencyError";
  readonly kind: IdempotencyErrorKind;
  /** Why, stable: see {@link IdempotencyErrorCode}. */
  readonly code: IdempotencyErrorCode;
  /** The error behind it, where there is one: fetch's `TypeError`, what `headers` threw, the signal's reason, … */
  readonly cause?: unknown;
  /** The operation of the call; `null` for the constructor. */
  readonly operation: string | null;
  /** The operation's key; `null` when it has none yet. */
  readonly key: string | null;
  /** Requests this call sent. */
  readonly attempts: number;
  /** HTTP status of the last attempt; `null` when it got no answer, or none was sent. */
  readonly lastStatus: number | null;
}

/** Sends each logical operation with one idempotency key, kept across retries, reloads, tabs and instances. */
export class IdempotentClient {
  /** Throws an `IdempotencyError` (`"invalid"`) naming a wrong option. */
  constructor(options?: ClientOptions);
  /** The operation's key, made on first use and stored. Throws an `IdempotencyError` (`"invalid"`) for a bad name. */
  keyFor(operation: string): string;
  /** `send("POST", path, body, operation, options)`. */
  post<T = unknown>(path: string, body: unknown, operation: string, options?: CallOptions): Promise<Outcome<T>>;
  /** Stores the request beside the key, then sends it until a final answer; rejects with an `IdempotencyError`. */
  send<T = unknown>(method: string, path: string, body: unknown, operation: string, options?: CallOptions): Promise<Outcome<T>>;
  /** Operations whose stored request got no final answer yet. */
  pendingOperations(): string[];
  /** Sends the stored request again: same key, method, path and body. */
  resume<T = unknown>(operation: string, options?: CallOptions): Promise<Outcome<T>>;
  /** Forgets the key and the request. Throws an `IdempotencyError` (`"invalid"`) while a call is sending them. */
  release(operation: string): void;
  /**
   * Forgets every key and stored request of this client's `storagePrefix` and `scope` (call it at
   * sign-out) and returns how many operations it forgot. Throws an `IdempotencyError`
   * (`"invalid"`), forgetting nothing, while one of them is being sent.
   */
  clear(): number;
  /** `true` while keys are kept in localStorage; `false` once they are kept in page memory, which a reload loses. */
  readonly persistent: boolean;
  /**
   * The operations whose key expired while their request had no final answer (each may have run):
   * refused with `operation-expired` until the page has found out and `release`s it.
   */
  expiredOperations(): ExpiredEvent[];
  /** Aborts every call of this client (sign-out; `clear()` may follow at once) and returns how many. */
  abortAll(): number;
  /**
   * A `fetch`-compatible function for libraries that take one (ky, Apollo): sends as `send`
   * does and resolves with the final answer as a standard `Response`; rejects as `send` does.
   * Wrap it to hand it over, or use {@link fetcher}.
   */
  fetch(input: string | URL | Request, init: FetchInit): Promise<Response>;
  /** `fetch` bound to one operation, for libraries that call `fetch(request)` alone (openapi-fetch). */
  fetcher(operation: string): (input: RequestInfo | URL, init?: RequestInit) => Promise<Response>;
  /** Frees the wasm side now (optional; a `FinalizationRegistry` does it too). */
  free(): void;
}
