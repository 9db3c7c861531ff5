//! What a request meets on its way and how it is compared: a proxy's 5xx
//! after the server charged, a redirect, a path typo, and the same JSON in
//! another key order.
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
export async function proxy_errors(env) {
  const s = setup(env);
  // The proxy lets the server charge, then answers 520.
  const client = s.make({ baseUrl: env.portal + "/proxy-520" });
  const outcome = await client.post("/charges", charge(800), "checkout:proxy");
  eq([outcome.status, outcome.replayed, outcome.attempts], [201, true, 2], "a 520 after the charge");
  eq((await s.charges()).length, 1, "charges");
  for (const status of [501, 505]) {
    const final = await s.make({ baseUrl: env.portal + `/status/${status}` }).post("/charges", charge(1), "final-" + status);
    eq([final.status, final.attempts], [status, 1], status + " is final");
  }
  const twice = await rejects(
    s.make({ baseUrl: env.portal + "/status/522", maxAttempts: 2 }).post("/charges", charge(1), "522"),
    "522",
  );
  eq([twice.kind, twice.attempts, twice.lastStatus], ["exhausted", 2, 522], "522 is retried");
}

export async function path_typo(env) {
  const s = setup(env);
  const client = s.make({});
  // A relative path typo: invalid, nothing stored or sent.
  const typo = await rejects(client.post("charges", charge(1), "typo"), "typo");
  eq([typo.kind, typo.attempts], ["invalid", 0], "a path without /");
  eq(localStorage.getItem(s.prefix + "typo"), null, "nothing stored for the typo");
}

export async function redirect_final(env) {
  const s = setup(env);
  // A redirect is final, with a clear message, after one attempt.
  const portal = s.make({ baseUrl: env.portal + "/redirect", maxAttempts: 5 });
  const redirected = await rejects(portal.post("/charges", charge(1), "portal"), "redirect");
  eq([redirected.kind, redirected.attempts, redirected.lastStatus], ["exhausted", 1, null], "a redirect");
  check(/redirected/.test(redirected.message) && /not retried/.test(redirected.message), redirected.message);
}

export async function key_order(env) {
  const s = setup(env);
  const client = s.make({});
  // The same JSON in another key order is the same request, as on the server.
  const nowhere = s.make({ baseUrl: UNREACHABLE, maxAttempts: 1 });
  await leavePending(nowhere, "canon", { amount: 1100, currency: "usd" });
  const same = await client.post("/charges", { currency: "usd", amount: 1100 }, "canon");
  eq(same.status, 201, "the pending request, keys reordered");
}
"#;

/// A proxy's 520 after the server charged is retried with the same key and
/// ends in the charge's replay (one charge); 522 is retried; 501 and 505
/// are final.
#[wasm_bindgen_test]
async fn a_proxy_5xx_after_the_charge_is_retried_and_charges_once() {
    run(TESTS, "proxy_errors", "").await;
}

/// A relative path typo (`"charges"`) is `invalid` before anything is
/// stored or sent.
#[wasm_bindgen_test]
async fn a_path_neither_absolute_nor_from_the_root_is_invalid_before_sending() {
    run(TESTS, "path_typo", "").await;
}

/// A redirect is final after one attempt, with a message saying why.
#[wasm_bindgen_test]
async fn a_redirect_is_final_with_a_clear_error() {
    run(TESTS, "redirect_final", "").await;
}

/// A pending request's body is compared as canonical JSON, as the server
/// compares it: the same JSON in another key order is the same request.
#[wasm_bindgen_test]
async fn the_same_json_in_another_key_order_is_the_same_request() {
    run(TESTS, "key_order", "").await;
}
