// What can stand between a page and the shop's server, for the browser
// tests (scripts/test-wasm.sh): a captive portal that redirects every
// request to its login page, a gateway in maintenance that answers 503
// with Retry-After, and a proxy in front of the server that answers 520
// after the server acted. Plain node, no packages.
//
//   node client-wasm/browser-support/portal.mjs ORIGIN [SERVER]
//
// Prints `listening on http://127.0.0.1:PORT`. Answers the page at ORIGIN
// with CORS, as a portal or a gateway in front of a CORS-enabled API does.
//
//   ANY /redirect/...      302 to /login (a captive portal)
//   GET /login             200 text/html (the portal's login page)
//   ANY /busy/SECS/...     503 problem+json with Retry-After: SECS
//   ANY /busy-until/SECS/FORM/...
//                          the same with Retry-After: the HTTP-date SECS
//                          seconds from now, FORM "imf" (IMF-fixdate,
//                          `Sun, 06 Nov 1994 08:49:37 GMT`) or "asctime"
//                          (`Sun Nov  6 08:49:37 1994`)
//   ANY /status/CODE/...   CODE with a problem+json body
//   ANY /proxy-520/PATH    forwards the request to SERVER/PATH and, the
//                          first time for each Idempotency-Key, answers
//                          520 instead of the server's answer (a
//                          Cloudflare 520 after the origin charged)
//   ANY /cookie/...        200 {"cookie": the Cookie header or null}, with
//                          Access-Control-Allow-Credentials
//   ANY /busy-then/N/SECS/PATH
//                          the first N requests of each Idempotency-Key get
//                          503 with Retry-After: SECS; the later ones are
//                          forwarded to SERVER/PATH (a gateway that comes
//                          back while a call is retrying)
//   ANY /attention/CODE/...
//                          CODE with the problem type
//                          operation-needs-attention (CONTRACT section 3;
//                          the server's answer is 424)
//   ANY /echo/...          201 with the request's body, byte for byte, as
//                          application/json
//   ANY /binary/...        200 application/octet-stream: the bytes 0 to 255
//   POST /graphql         a GraphQL gateway in front of SERVER: a mutation
//                          whose variables hold `input` becomes POST
//                          /charges of that input, with the request's
//                          Authorization and Idempotency-Key; answers
//                          {"data":{"createCharge":charge}} (the server's
//                          status when it is retried: 5xx, 409, 429)
//   GET /csp/POLICY/FILE   a page (index.html, page.js) that runs init()
//                          under Content-Security-Policy: script-src
//                          'self' (POLICY "strict") or with
//                          'wasm-unsafe-eval' ("wasm"), the module
//                          (pkg/client_wasm.js) fetched from SERVER; the
//                          page tells its parent what init() did
import { createServer } from "node:http";

const origin = process.argv[2];
const upstream = process.argv[3];
// Keys the proxy has already answered 520 for.
const failedOnce = new Set();
// Requests of each key that /busy-then/ has answered 503.
const busyAnswers = new Map();
if (!origin) {
  console.error("usage: portal.mjs ORIGIN");
  process.exit(2);
}

const cors = {
  "Access-Control-Allow-Origin": origin,
  "Access-Control-Allow-Methods": "GET, POST, PUT, PATCH, DELETE",
  "Access-Control-Allow-Headers": "Idempotency-Key, Authorization, Content-Type, X-Chaos",
  "Access-Control-Expose-Headers": "Retry-After, Idempotent-Replayed",
  "Access-Control-Max-Age": "600",
};

const server = createServer(async (request, response) => {
  const path = new URL(request.url, "http://portal").pathname;
  if (request.method === "OPTIONS") {
    request.resume();
    response.writeHead(204, { ...cors, "Access-Control-Allow-Credentials": "true" }).end();
    return;
  }
  const busyThen = path.match(/^\/busy-then\/(\d+)\/(\d+)(\/.*)$/);
  if (busyThen && upstream) {
    const key = request.headers["idempotency-key"] ?? "";
    const answered = busyAnswers.get(key) ?? 0;
    if (answered < Number(busyThen[1])) {
      busyAnswers.set(key, answered + 1);
      request.resume();
      response
        .writeHead(503, { ...cors, "Retry-After": busyThen[2], "Content-Type": "application/problem+json" })
        .end(JSON.stringify({ type: "about:blank#maintenance", title: "Down for maintenance", status: 503 }));
      return;
    }
    await forward(request, response, busyThen[3]);
    return;
  }
  if (path === "/graphql" && upstream && request.method === "POST") {
    const chunks = [];
    for await (const chunk of request) chunks.push(chunk);
    const { variables } = JSON.parse(Buffer.concat(chunks).toString() || "{}");
    const forwarded = { "content-type": "application/json" };
    for (const name of ["authorization", "idempotency-key"]) {
      if (request.headers[name]) forwarded[name] = request.headers[name];
    }
    const answer = await fetch(upstream + "/charges", {
      method: "POST",
      headers: forwarded,
      body: JSON.stringify(variables?.input ?? {}),
    });
    const body = await answer.json();
    const headers = { ...cors, "Content-Type": "application/json" };
    if (answer.headers.has("idempotent-replayed")) headers["Idempotent-Replayed"] = answer.headers.get("idempotent-replayed");
    const retried = answer.status >= 500 || answer.status === 409 || answer.status === 429;
    response
      .writeHead(retried ? answer.status : 200, headers)
      .end(
        JSON.stringify(
          answer.ok
            ? { data: { createCharge: { __typename: "Charge", ...body } } }
            : { errors: [{ message: body.title ?? "refused", extensions: { status: answer.status, type: body.type } }] },
        ),
      );
    return;
  }
  if (path.startsWith("/echo/")) {
    const chunks = [];
    for await (const chunk of request) chunks.push(chunk);
    response.writeHead(201, { ...cors, "Content-Type": "application/json" }).end(Buffer.concat(chunks));
    return;
  }
  const csp = path.match(/^\/csp\/(strict|wasm)\/(index\.html|page\.js|pkg\/client_wasm\.js)$/);
  if (csp && upstream) {
    request.resume();
    const policy = `script-src 'self'${csp[1] === "wasm" ? " 'wasm-unsafe-eval'" : ""}; object-src 'none'`;
    const [type, body] =
      csp[2] === "index.html"
        ? ["text/html", '<!doctype html><meta charset="utf-8"><pre id="result">SMOKE PENDING</pre><script type="module" src="page.js"></script>']
        : csp[2] === "page.js"
          ? ["text/javascript", CSP_PAGE]
          : ["text/javascript", await (await fetch(upstream + "/pkg/client_wasm.js")).text()];
    // The test runner's page is cross-origin isolated (COEP require-corp):
    // a frame in it must say it may be embedded, and isolate itself too.
    response
      .writeHead(200, {
        "Content-Type": type,
        "Content-Security-Policy": policy,
        "Cross-Origin-Resource-Policy": "cross-origin",
        "Cross-Origin-Embedder-Policy": "require-corp",
      })
      .end(body);
    return;
  }
  if (path.startsWith("/proxy-520/") && upstream) {
    const chunks = [];
    for await (const chunk of request) chunks.push(chunk);
    const forwarded = {};
    for (const name of ["authorization", "idempotency-key", "content-type", "x-chaos"]) {
      if (request.headers[name]) forwarded[name] = request.headers[name];
    }
    const answer = await fetch(upstream + path.slice("/proxy-520".length), {
      method: request.method,
      headers: forwarded,
      body: chunks.length ? Buffer.concat(chunks) : undefined,
    });
    const text = await answer.text();
    const key = request.headers["idempotency-key"];
    if (key && !failedOnce.has(key)) {
      failedOnce.add(key);
      response
        .writeHead(520, { ...cors, "Content-Type": "text/html" })
        .end("<!doctype html><title>520: Web server is returning an unknown error</title>");
      return;
    }
    const headers = { ...cors, "Content-Type": answer.headers.get("content-type") ?? "text/plain" };
    const replayed = answer.headers.get("idempotent-replayed");
    if (replayed) headers["Idempotent-Replayed"] = replayed;
    response.writeHead(answer.status, headers).end(text);
    return;
  }
  request.resume(); // read and drop any body
  if (path.startsWith("/cookie/")) {
    response
      .writeHead(200, { ...cors, "Access-Control-Allow-Credentials": "true", "Content-Type": "application/json" })
      .end(JSON.stringify({ cookie: request.headers.cookie ?? null }));
    return;
  }
  if (path.startsWith("/binary/")) {
    response
      .writeHead(200, { ...cors, "Content-Type": "application/octet-stream" })
      .end(Buffer.from(Array.from({ length: 256 }, (_, i) => i)));
    return;
  }
  const attention = path.match(/^\/attention\/(\d{3})\//);
  if (attention) {
    const status = Number(attention[1]);
    response.writeHead(status, { ...cors, "Content-Type": "application/problem+json" }).end(
      JSON.stringify({
        type: "https://shop.example/problems/operation-needs-attention",
        title: "The operation needs attention",
        status,
        detail: "An operator settles it; every retry of this key gets this answer until then.",
      }),
    );
    return;
  }
  const status = path.match(/^\/status\/(\d{3})\//);
  if (status) {
    response
      .writeHead(Number(status[1]), { ...cors, "Content-Type": "application/problem+json" })
      .end(JSON.stringify({ type: "about:blank", title: "Status " + status[1], status: Number(status[1]) }));
    return;
  }
  if (path.startsWith("/redirect/")) {
    response.writeHead(302, { ...cors, Location: "/login" }).end();
    return;
  }
  if (path === "/login") {
    response
      .writeHead(200, { ...cors, "Content-Type": "text/html" })
      .end("<!doctype html><title>Log in to the Wi-Fi</title><form>…</form>");
    return;
  }
  const busy = path.match(/^\/busy\/(\d+)\//);
  const until = path.match(/^\/busy-until\/(\d+)\/(imf|asctime)\//);
  if (busy || until) {
    const retryAfter = busy ? busy[1] : httpDate(new Date(Date.now() + 1000 * until[1]), until[2]);
    response
      .writeHead(503, { ...cors, "Retry-After": retryAfter, "Content-Type": "application/problem+json" })
      .end(JSON.stringify({ type: "about:blank#maintenance", title: "Down for maintenance", status: 503 }));
    return;
  }
  response.writeHead(404, cors).end();
});

/** Forwards the request to SERVER/PATH, and its answer back. */
async function forward(request, response, path) {
  const chunks = [];
  for await (const chunk of request) chunks.push(chunk);
  const forwarded = {};
  for (const name of ["authorization", "idempotency-key", "content-type", "x-chaos"]) {
    if (request.headers[name]) forwarded[name] = request.headers[name];
  }
  const answer = await fetch(upstream + path, {
    method: request.method,
    headers: forwarded,
    body: chunks.length ? Buffer.concat(chunks) : undefined,
  });
  const headers = { ...cors, "Content-Type": answer.headers.get("content-type") ?? "text/plain" };
  for (const name of ["idempotent-replayed", "retry-after"]) {
    if (answer.headers.has(name)) headers[name] = answer.headers.get(name);
  }
  response.writeHead(answer.status, headers).end(Buffer.from(await answer.arrayBuffer()));
}

// The script of /csp/POLICY/index.html: init() under the page's policy,
// and what it did, to the parent.
const CSP_PAGE = `
import init from "./pkg/client_wasm.js";
const tell = (result) => {
  document.getElementById("result").textContent = "SMOKE OK " + JSON.stringify(result);
  parent.postMessage(result, "*");
};
init().then(
  () => tell({ ok: true }),
  (e) => tell({ ok: false, name: e?.name, code: e?.code ?? null, kind: e?.kind ?? null,
                message: String(e?.message ?? e), cause: e?.cause ? String(e.cause) : null }),
);
`;

/** `date` as an HTTP-date of RFC 9110 in the form `form`. */
function httpDate(date, form) {
  const imf = date.toUTCString(); // "Sun, 06 Nov 1994 08:49:37 GMT"
  if (form === "imf") return imf;
  const [weekday, day, month, year, time] = imf.replace(",", "").split(" ");
  return `${weekday} ${month} ${day.replace(/^0/, " ")} ${time} ${year}`;
}

server.listen(0, "127.0.0.1", () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => process.exit(0));
