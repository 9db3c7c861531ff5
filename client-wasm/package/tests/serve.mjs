// Serves a static folder and forwards every other request to the real
// server, so a page built by a framework that writes inline scripts (the
// Next.js app's static export) runs on one origin with the API, without the
// server's own Content-Security-Policy for its pages. Plain node, no
// packages (scripts/test-package.sh).
//
//   node client-wasm/package/tests/serve.mjs DIR SERVER
//
// Prints `listening on http://127.0.0.1:PORT`.
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { extname, join, normalize } from "node:path";

const [dir, upstream] = process.argv.slice(2);
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".json": "application/json", ".wasm": "application/wasm", ".txt": "text/plain" };

createServer(async (request, response) => {
  const path = normalize(decodeURIComponent(new URL(request.url, "http://x").pathname));
  for (const file of [path, path + ".html", join(path, "index.html")]) {
    try {
      const body = await readFile(join(dir, file));
      request.resume();
      response.writeHead(200, { "Content-Type": TYPES[extname(file)] ?? "application/octet-stream" }).end(body);
      return;
    } catch {}
  }
  const chunks = [];
  for await (const chunk of request) chunks.push(chunk);
  const headers = { ...request.headers };
  delete headers.host;
  const answer = await fetch(upstream + request.url, {
    method: request.method,
    headers,
    body: chunks.length ? Buffer.concat(chunks) : undefined,
  });
  // (fetch decoded the body: its length and encoding are no longer these.)
  const back = Object.fromEntries(answer.headers);
  delete back["content-encoding"];
  delete back["content-length"];
  response.writeHead(answer.status, back).end(Buffer.from(await answer.arrayBuffer()));
}).listen(0, "127.0.0.1", function () {
  console.log(`listening on http://127.0.0.1:${this.address().port}`);
});
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => process.exit(0));
