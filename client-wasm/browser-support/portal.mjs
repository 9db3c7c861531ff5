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
import { createServer } from "node:http";

const origin = process.argv[2];
const upstream = process.argv[3];
// Keys the proxy has already answered 520 for.
const failedOnce = new Set();
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
