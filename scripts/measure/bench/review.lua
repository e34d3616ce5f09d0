-- wrk script for scripts/measure/bench-load: POSTs one AdmissionReview body over a
-- keep-alive connection and prints a machine-readable summary.
--
--   [WRK_DELAY_MS=N] wrk ... -s scripts/measure/bench/review.lua URL -- BODY_FILE
--
-- BODY_FILE: the AdmissionReview JSON to send on every request.
-- WRK_DELAY_MS (optional): pause between a response and the next request
-- on each connection, to run below saturation (rate ~= connections * 1000 /
-- (WRK_DELAY_MS + latency)); 0 or unset = as fast as possible. It is read
-- when the script loads because wrk decides then whether delay() exists.

local delay_ms = tonumber(os.getenv("WRK_DELAY_MS") or "0") or 0

function init(args)
  local body_file = args[1]
  local f = assert(io.open(body_file, "rb"), "cannot open body file " .. tostring(body_file))
  local body = f:read("*a")
  f:close()
  wrk.method = "POST"
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Accept"] = "application/json"
end

-- Only defined when throttled: wrk then calls delay() before every request.
if delay_ms > 0 then
  function delay()
    return delay_ms
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d bytes=%d connect=%d read=%d write=%d status=%d timeout=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d mean_us=%.1f\n",
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
