//! What a page is told: a stable `code` (and `cause`) on every rejection,
//! `shouldRetry` narrowing what is retried, `operation-needs-attention` as
//! final, and `init()` under a CSP without `'wasm-unsafe-eval'`.
//!
//! Written in JavaScript, as a page uses the client (the helpers the
//! files share are in `page.js`). Each test failed against the client
//! before the change it tests.

use super::page::run;
use super::*;

/// The tests of this file, in JavaScript as a page writes it: each
/// `export`ed function is one test, run by [`run`] with `page.js`'s
/// helpers in scope.
const TESTS: &str = r#"
export async function codes(env) {
  const s = setup(env);
  const nowhere = s.make({ baseUrl: UNREACHABLE, maxAttempts: 1 });
  const failed = await rejects(nowhere.post("/charges", charge(1), "codes:pending"), "nowhere");
  eq(failed.code, "attempts-exhausted", "no answer");
  check(failed.cause instanceof TypeError, "the cause is fetch's TypeError: " + failed.cause);
  const cases = [
    ["invalid-argument", s.make({}).post("/charges", charge(1), "")],
    ["invalid-argument", s.make({}).post("/charges", { n: 10n }, "codes:bigint")],
    ["request-differs", nowhere.post("/charges", charge(2), "codes:pending")],
    ["nothing-to-resume", s.make({}).resume("codes:none")],
    ["key-differs", nowhere.post("/charges", charge(1), "codes:pending", { key: "another" })],
    ["redirected", s.make({ baseUrl: env.portal + "/redirect" }).post("/charges", charge(1), "codes:redirect")],
  ];
  localStorage.setItem(s.prefix + "codes:future", '{"v":9}');
  cases.push(["foreign-record", s.make({}).post("/charges", charge(1), "codes:future")]);
  for (const [code, call] of cases) {
    const error = await rejects(call, code);
    eq(error.code, code, error.message);
  }
  const bigint = await rejects(s.make({}).post("/charges", { n: 10n }, "codes:bigint2"), "bigint");
  check(bigint.cause instanceof TypeError, "JSON.stringify's TypeError as the cause");
  const aborted = new AbortController();
  aborted.abort(new Error("the shopper left"));
  const abort = await rejects(s.make({}).post("/charges", charge(1), "codes:abort", { signal: aborted.signal }), "abort");
  eq([abort.code, abort.cause?.message], ["aborted", "the shopper left"], "the signal's reason as the cause");
  eq(throws(() => s.make({ timeoutMs: -1 }), "a bad option").code, "invalid-argument", "a bad option");
  // A headers function that throws: nothing sent, nothing kept, not retried.
  const boom = new Error("no token: signed out");
  let asked = 0;
  const broken = s.make({ headers: () => { asked++; throw boom; } });
  const headers = await rejects(broken.post("/charges", charge(1), "codes:headers"), "headers");
  eq([headers.code, headers.attempts, asked, headers.cause === boom], ["headers-failed", 0, 1, true], "a failing headers function");
  eq(s.stored("codes:headers"), null, "stored after a failing headers function");
  const busy = s.make({ headers: { Authorization: s.bearer, "X-Chaos": "delay-after-commit=800" } });
  const paying = busy.post("/charges", charge(3), "codes:busy");
  await sleep(300);
  eq(throws(() => busy.release("codes:busy"), "release").code, "operation-busy", "release while sending");
  await paying;
}

export async function should_retry(env) {
  const s = setup(env);
  const seen = [];
  const narrow = s.make({
    baseUrl: env.portal + "/busy/0",
    maxAttempts: 4,
    shouldRetry: (response, attempt) => {
      seen.push([response.status, response.headers.get("Retry-After"), attempt]);
      return attempt < 2;
    },
  });
  const outcome = await narrow.post("/charges", charge(1), "retry:narrow");
  eq([outcome.status, outcome.ok, outcome.attempts], [503, false, 2], "the 503 taken as final at the second attempt");
  eq(seen, [[503, "0", 1], [503, "0", 2]], "shouldRetry's arguments");
  eq(narrow.pendingOperations(), [], "a final answer leaves nothing pending");
  // Never asked about an answer that is not retried anyway.
  let asked = 0;
  const paid = await s.make({ shouldRetry: () => (asked++, true) }).post("/charges", charge(2100), "retry:paid");
  eq([paid.status, asked], [201, 0], "a 201");
}

export async function needs_attention(env) {
  const s = setup(env);
  for (const status of [424, 503]) {
    const client = s.make({ baseUrl: env.portal + `/attention/${status}` });
    const outcome = await client.post("/charges", charge(1), "attention:" + status);
    eq([outcome.status, outcome.ok, outcome.attempts, outcome.code], [status, false, 1, "operation-needs-attention"], "HTTP " + status);
    eq(client.pendingOperations(), [], "pending after " + status);
  }
  const refused = await s.make({}).post("/charges", charge(0), "attention:none");
  eq([refused.status, refused.code], [400, "invalid-request"], "another refusal's code");
  eq((await s.make({}).post("/charges", charge(2200), "attention:paid")).code, null, "a success's code");
}

export function csp(env, policy) {
  const frame = document.createElement("iframe");
  frame.src = env.portal + `/csp/${policy}/index.html`;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the page under CSP did not report")), 20000);
    addEventListener("message", function listener(e) {
      if (e.source !== frame.contentWindow) return;
      clearTimeout(timer);
      removeEventListener("message", listener);
      frame.remove();
      resolve(e.data);
    });
    document.body.appendChild(frame);
  }).then((seen) => {
    if (policy === "wasm") return eq(seen.ok, true, "init() with 'wasm-unsafe-eval': " + JSON.stringify(seen));
    eq([seen.ok, seen.name, seen.code], [false, "IdempotencyError", "wasm-blocked-by-csp"], "init() without it: " + JSON.stringify(seen));
    check(seen.message.includes("'wasm-unsafe-eval'") && seen.cause, "the message names the source: " + seen.message);
  });
}
"#;

/// Every rejection and throw carries a stable `code`, and its `cause`
/// where there is one; a failing headers function is not retried as a
/// network error and leaves nothing stored.
#[wasm_bindgen_test]
async fn every_rejection_has_a_stable_code_and_its_cause() {
    run(TESTS, "codes", "").await;
}

/// `shouldRetry(response, attempt)` narrows what is retried: `false` makes
/// the answer final; it is never asked about a final answer.
#[wasm_bindgen_test]
async fn should_retry_narrows_what_is_retried() {
    run(TESTS, "should_retry", "").await;
}

/// `operation-needs-attention` is final (424, and even with a status that
/// is retried otherwise), with the outcome's `code`.
#[wasm_bindgen_test]
async fn operation_needs_attention_is_final_with_its_code() {
    run(TESTS, "needs_attention", "").await;
}

/// A page whose CSP lacks `'wasm-unsafe-eval'` gets `init()` rejected with
/// a code and a message naming it; with it, `init()` works.
#[wasm_bindgen_test]
async fn init_under_a_csp_without_wasm_unsafe_eval_says_what_is_missing() {
    run(TESTS, "csp", "wasm").await;
    run(TESTS, "csp", "strict").await;
}
