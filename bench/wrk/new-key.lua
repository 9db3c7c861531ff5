-- wrk script: POST /charges with a new UUID v4 Idempotency-Key on every
-- request (loadgen's new-key scenario), and one summary line at the end
-- in loadgen's shape, for scripts/bench.sh.
--   wrk -t2 -c32 -d10s -s bench/wrk/new-key.lua http://127.0.0.1:PORT
wrk.method = "POST"
wrk.path = "/charges"
wrk.body = '{"amount":1999,"currency":"usd","description":"cart 42"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-token-0123456789"

local hex = "0123456789abcdef"

local function uuid_v4()
  local t = {}
  for i = 1, 36 do
    if i == 9 or i == 14 or i == 19 or i == 24 then
      t[i] = "-"
    elseif i == 15 then
      t[i] = "4"
    elseif i == 20 then
      local n = math.random(8, 11) + 1
      t[i] = hex:sub(n, n)
    else
      local n = math.random(1, 16)
      t[i] = hex:sub(n, n)
    end
  end
  return table.concat(t)
end

function setup(thread)
  thread:set("seed", math.random(1, 2 ^ 30))
end

function init(args)
  math.randomseed(seed + os.time())
end

function request()
  wrk.headers["Idempotency-Key"] = uuid_v4()
  return wrk.format()
end

function done(summary, latency, requests)
  local seconds = summary.duration / 1e6
  local errors = summary.errors
  io.write(string.format(
    "wrk requests=%d seconds=%.2f rps=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f non_2xx=%d errors=%d\n",
    summary.requests, seconds, summary.requests / seconds,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    errors.status, errors.connect + errors.read + errors.write + errors.timeout))
end
