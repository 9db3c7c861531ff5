// Drives headless Chromium through chromedriver (plain WebDriver over HTTP,
// no npm packages) to load the smoke page and wait for its verdict.
//
//   node client-wasm/smoke/run.mjs DRIVER_URL PAGE_URL
//
// Prints the page's result line; exits 0 on "SMOKE OK", 1 otherwise.
import { readFileSync } from "node:fs";

const [driver, page] = process.argv.slice(2);
const options = JSON.parse(
  readFileSync(new URL("../webdriver.json", import.meta.url), "utf8"),
)["goog:chromeOptions"];
options.args = [...options.args, "--headless=new", "--no-sandbox"];

async function call(method, path, body) {
  const response = await fetch(driver + path, {
    method,
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await response.json();
  if (!response.ok) throw new Error(`${method} ${path}: ${JSON.stringify(json.value)}`);
  return json.value;
}

const { sessionId } = await call("POST", "/session", {
  capabilities: { alwaysMatch: { "goog:chromeOptions": options } },
});
let result = "SMOKE PENDING";
try {
  await call("POST", `/session/${sessionId}/url`, { url: page });
  const deadline = Date.now() + 30000;
  while (result.startsWith("SMOKE PENDING") && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    result = await call("POST", `/session/${sessionId}/execute/sync`, {
      script: "return document.getElementById('result').textContent",
      args: [],
    });
  }
} catch (e) {
  result = "SMOKE FAIL " + e.message;
} finally {
  await call("DELETE", `/session/${sessionId}`).catch(() => {});
}
console.log(result.slice(0, 600));
process.exit(result.startsWith("SMOKE OK") ? 0 : 1);
