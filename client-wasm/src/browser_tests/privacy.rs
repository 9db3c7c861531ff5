//! Private by default: once an operation has its final answer, nothing of
//! its request (an e-mail address, a description) stays in storage; the
//! key and the answer's status do, so the same operation still gets its
//! stored answer and another body under it is still refused. Each test
//! failed against the client that kept the request until the key's end.
//!
//! Written in JavaScript, as a page uses the client (the helpers the files
//! share are in `page.js`).

use super::page::run;
use super::*;

/// The tests of this file, in JavaScript as a page writes it: each
/// `export`ed function is one test, run by [`run`] with `page.js`'s
/// helpers in scope.
const TESTS: &str = r#"
/** A shopper's order: an e-mail address and a description of their own. */
function order(amount = 1999) {
  const tag = Math.random().toString(36).slice(2);
  return { amount, currency: "usd", description: "gift for " + tag, receipt_email: "shopper." + tag + "@example.com" };
}

/**
 * Throws when a name or value in localStorage holds any member of the
 * orders (their values, and the name `receipt_email`).
 */
function nothingKeptOf(orders, what) {
  const secrets = ["receipt_email"];
  for (const o of orders) secrets.push(...[o.receipt_email, o.description].filter(Boolean));
  const found = [];
  for (let i = 0; i < localStorage.length; i++) {
    const name = localStorage.key(i);
    const text = name + " = " + localStorage.getItem(name);
    if (secrets.some((secret) => text.includes(secret))) found.push(text);
  }
  eq(found, [], what + ": localStorage entries holding the request");
}

/** The record after the answer: the key, `answered` and the status; no request. */
function onlyKeyAndStatus(record, key, status, what) {
  eq(
    [record?.key, record?.answered, record?.status, record?.method ?? null, record?.path ?? null, record?.body ?? null, record?.sent ?? null],
    [key, true, status, null, null, null, null],
    what + ": the record after the answer",
  );
}

export async function after_the_answer(env) {
  const s = setup(env);
  const client = s.make();
  // post: a 201.
  const paid = order();
  const outcome = await client.post("/charges", paid, "checkout:paid");
  eq([outcome.status, outcome.body?.description], [201, paid.description], "the payment");
  onlyKeyAndStatus(s.record("checkout:paid"), outcome.key, 201, "post");
  // fetch: its body, a string, sent as given and forgotten alike.
  const fetched = order();
  const response = await client.fetch("/charges", { method: "POST", body: JSON.stringify(fetched), operation: "checkout:fetched" });
  eq(response.status, 201, "fetch");
  onlyKeyAndStatus(s.record("checkout:fetched"), client.keyFor("checkout:fetched"), 201, "fetch");
  // A final refusal is a final answer too: an amount of 0 (400).
  const refused = order(0);
  const no = await client.post("/charges", refused, "checkout:refused");
  eq(no.status, 400, "a refused order");
  onlyKeyAndStatus(s.record("checkout:refused"), no.key, 400, "a refusal");
  // Before its answer the request is kept, to resume it after a reload,
  // as sent (quotes, a backslash, non-ASCII); once the resume is answered,
  // it is gone.
  const pending = order();
  pending.description = 'a "gift"\\ for café 😀\u2028 ' + pending.description;
  await rejects(s.make({ baseUrl: UNREACHABLE, maxAttempts: 1 }).post("/charges", pending, "checkout:pending"), "a call to nowhere");
  eq(JSON.parse(s.record("checkout:pending").body), pending, "the body kept while the request has no answer");
  const resumed = await s.make().resume("checkout:pending");
  eq([resumed.status, resumed.body?.description], [201, pending.description], "resumed");
  onlyKeyAndStatus(s.record("checkout:pending"), resumed.key, 201, "resume");
  // So is a body with control characters (which the server refuses in
  // a description), until the page releases it.
  const odd = { note: 'tab\t newline\n nul\u0000 \u0001 "q" \\ \u2028' };
  await rejects(s.make({ baseUrl: UNREACHABLE, maxAttempts: 1 }).post("/charges", odd, "checkout:odd"), "another call to nowhere");
  eq(JSON.parse(s.record("checkout:odd").body), odd, "a body with control characters, kept");
  s.make().release("checkout:odd");
  nothingKeptOf([paid, fetched, refused, pending], "after the answers");
  eq((await s.charges()).length, 3, "charges");
}

export async function another_body(env) {
  const s = setup(env);
  const first = order();
  const paid = await s.make().post("/charges", first, "checkout:other");
  eq(paid.status, 201, "the payment");
  // Another body under the answered operation: sent with its key, refused
  // by the server as before (422), nothing charged; nothing kept of either.
  const second = order(2500);
  const other = await s.make().post("/charges", second, "checkout:other");
  eq([other.status, other.code, other.key, other.replayed], [422, "idempotency-key-mismatch", paid.key, false], "another body");
  onlyKeyAndStatus(s.record("checkout:other"), paid.key, 422, "after the refusal");
  nothingKeptOf([first, second], "after another body");
  // And the first body again still gets its stored answer.
  const again = await s.make().post("/charges", first, "checkout:other");
  eq([again.status, again.replayed, again.body?.id], [201, true, paid.body.id], "the first body again");
  // While a request has no answer, another body is refused before
  // anything is sent, as before; its body is kept until then.
  const nowhere = s.make({ baseUrl: UNREACHABLE, maxAttempts: 1 });
  const waiting = order();
  await rejects(nowhere.post("/charges", waiting, "checkout:waiting"), "a call to nowhere");
  const differs = await rejects(s.make().post("/charges", order(), "checkout:waiting"), "another body while pending");
  eq([differs.code, differs.attempts], ["request-differs", 0], "another body while pending");
  const done = await s.make().post("/charges", waiting, "checkout:waiting");
  eq(done.status, 201, "the pending body, sent again");
  nothingKeptOf([first, second, waiting], "in the end");
  eq((await s.charges()).length, 2, "charges");
}

export async function same_body(env) {
  const s = setup(env);
  const paid = order();
  const first = await s.make().post("/charges", paid, "checkout:same");
  eq(first.status, 201, "the payment");
  nothingKeptOf([paid], "after the answer");
  // A reload (a new client): the same body gets the stored answer.
  const again = await s.make().post("/charges", paid, "checkout:same");
  eq([again.status, again.replayed, again.key, again.body?.id], [201, true, first.key, first.body.id], "the same body again");
  onlyKeyAndStatus(s.record("checkout:same"), first.key, 201, "after the replay");
  nothingKeptOf([paid], "after the replay");
  // There is no request left to resume: said so, with the answer's status.
  const resumed = await rejects(s.make().resume("checkout:same"), "resume after the answer");
  eq([resumed.code, resumed.lastStatus, resumed.attempts], ["nothing-to-resume", 201, 0], "resume after the answer");
  eq((await s.charges()).length, 1, "charges");
}

export async function earlier_versions(env, fixture) {
  const s = setup(env);
  const now = Date.now();
  const old = [];
  for (const [v, operation] of [[1, "checkout:v1"], [2, "checkout:v2"]]) {
    const paid = order();
    old.push(paid);
    const outcome = await s.make().post("/charges", paid, operation);
    eq(outcome.status, 201, "the payment of " + operation);
    // As an earlier version left it: answered, with its request.
    const owner = v === 2 ? { prefix: s.prefix, scope: "", op: operation } : {};
    const record = { v, ...owner, key: outcome.key, created: now, expires: now + 86400e3, answered: true, method: "POST", path: "/charges", body: JSON.stringify(paid), ...(v === 2 ? { sent: now } : {}) };
    localStorage.setItem(s.prefix + operation, JSON.stringify(record));
  }
  // The first release's pending record (the committed fixture) still
  // resumes, and is forgotten once answered.
  const legacy = JSON.parse(fixture);
  localStorage.setItem(s.prefix + "checkout:legacy", fixture.trim());
  const client = s.make();
  eq(client.pendingOperations(), ["checkout:legacy"], "pending at a new client's first use");
  // That first use forgot the answered requests, and kept their keys.
  for (const [i, operation] of ["checkout:v1", "checkout:v2"].entries()) {
    const record = s.record(operation);
    onlyKeyAndStatus(record, record?.key, null, operation);
    const again = await client.post("/charges", old[i], operation);
    eq([again.status, again.replayed], [201, true], operation + " sent again");
  }
  const resumed = await client.resume("checkout:legacy");
  eq([resumed.status, resumed.key], [201, legacy.key], "the first release's record resumed");
  onlyKeyAndStatus(s.record("checkout:legacy"), legacy.key, 201, "the first release's record");
  nothingKeptOf([...old, JSON.parse(legacy.body)], "after the upgrade");
  eq((await s.charges()).length, 3, "charges");
}
"#;

/// After a final answer (a 201 of `post`, of `fetch`, a 400, a resumed
/// request's 201) no name or value in `localStorage` holds the request's
/// e-mail address or description: the record keeps the key, `answered`
/// and the status. Before the answer the body is kept, to resume it.
#[wasm_bindgen_test]
async fn nothing_of_the_request_outlives_its_answer() {
    run(TESTS, "after_the_answer", "").await;
}

/// Another body under an answered operation is still sent with its key
/// and refused by the server (422 `idempotency-key-mismatch`), nothing
/// charged and nothing kept; while a request has no answer, another body
/// is still refused before sending (`request-differs`).
#[wasm_bindgen_test]
async fn another_body_is_still_refused_once_the_request_is_forgotten() {
    run(TESTS, "another_body", "").await;
}

/// The same body after the answer still gets the stored answer (same
/// charge, `replayed`), across a reload; `resume` of the answered
/// operation says there is nothing to resume, with the answer's status.
#[wasm_bindgen_test]
async fn the_same_body_still_gets_the_stored_answer() {
    run(TESTS, "same_body", "").await;
}

/// Answered records that earlier versions wrote with their request (the
/// first release's version 1, and version 2) lose the request at a new
/// client's first use and keep their key; the first release's pending
/// record still resumes, and is forgotten once answered.
#[wasm_bindgen_test]
async fn records_of_earlier_versions_are_read_and_made_private() {
    run(
        TESTS,
        "earlier_versions",
        include_str!("fixtures/record-v1.json"),
    )
    .await;
}
