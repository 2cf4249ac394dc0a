-- Shared by the wrk scripts: per-thread random ids, counters reported by done().
local M = {}

function M.seed_random(tid)
  math.randomseed(os.time() * 7919 + tid * 104729 + math.floor(os.clock() * 1e6))
  for _ = 1, 10 do math.random() end
end

local function hex(n)
  local t = {}
  for i = 1, n do t[i] = string.format("%x", math.random(0, 15)) end
  return table.concat(t)
end
M.hex = hex

-- A monotonic clock in milliseconds (LuaJIT's ffi; wrk has none of its own). Only
-- scripts that time requests themselves call it.
local clock
function M.now_ms()
  if not clock then
    local ffi = require("ffi")
    ffi.cdef("typedef struct { long tv_sec; long tv_nsec; } bench_timespec;" ..
      " int clock_gettime(int clock_id, bench_timespec *tp);")
    clock = {ffi = ffi, ts = ffi.new("bench_timespec")}
  end
  clock.ffi.C.clock_gettime(1, clock.ts)  -- CLOCK_MONOTONIC
  return tonumber(clock.ts.tv_sec) * 1000 + tonumber(clock.ts.tv_nsec) / 1e6
end

-- Nearest-rank percentile (0-100) of a list of numbers, or -1 when it is empty.
function M.percentile(values, q)
  if #values == 0 then return -1 end
  table.sort(values)
  local rank = math.max(1, math.min(#values, math.floor(q / 100 * #values + 0.5)))
  return values[rank]
end

function M.uuid4()
  return hex(8) .. "-" .. hex(4) .. "-4" .. hex(3) .. "-" ..
    string.format("%x", math.random(8, 11)) .. hex(3) .. "-" .. hex(12)
end

-- wrk gives each thread its own Lua state: counters live there and done() collects them.
M.threads = {}
function M.setup(thread)
  thread:set("tid", #M.threads + 1)
  table.insert(M.threads, thread)
end

function M.report(summary, latency, names)
  local totals = {}
  for _, name in ipairs(names) do totals[name] = 0 end
  for _, thread in ipairs(M.threads) do
    for _, name in ipairs(names) do
      totals[name] = totals[name] + (thread:get(name) or 0)
    end
  end
  local parts = {}
  for _, name in ipairs(names) do
    table.insert(parts, string.format('"%s":%d', name, totals[name]))
  end
  local errors = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"p50_ms":%.3f,"p90_ms":%.3f,"p99_ms":%.3f,' ..
    '"max_ms":%.3f,"socket_errors":%d,"non_2xx_3xx":%d,%s}\n',
    summary.requests, summary.duration, latency:percentile(50) / 1000,
    latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    errors.connect + errors.read + errors.write + errors.timeout, errors.status,
    table.concat(parts, ",")))
end

return M
