-- W2: claim-next, then resolve with the lease it returned.
--   wrk -s bench/wrk/cycle.lua URL -- [--delay=MS] [--timed] <principal>=<reviewer key> ...
-- Several reviewers (each holds at most SIGNOFF_MAX_LEASES_PER_PRINCIPAL leases). A
-- thread's connections share a queue of granted leases: a request resolves one (as the
-- reviewer who claimed it) when there is one, otherwise claims the next task as the next
-- reviewer in turn.
-- --delay=MS: each connection waits MS between a response and its next request (a fixed,
--   moderate load instead of a closed loop at full speed).
-- --timed: time claim-next and resolve apart (and a cycle as the two added up) and print
--   their p50/p99 as WRK_TIMED. Needs one connection per thread (-t equal to -c): a
--   thread then has one request in flight, so a response belongs to its last request.
package.path = package.path .. ";./bench/wrk/?.lua"
local common = require("common")

setup = common.setup

local keys, order, turn = {}, {}, 0
local leases = {}
local delay_ms, timed = 0, false
local started, kind, last_claim_ms = 0, nil, nil
claims, resolves, empty, refused, server_errors = 0, 0, 0, 0, 0
claim_ms, resolve_ms, cycle_ms = {}, {}, {}

function init(args)
  common.seed_random(tid)
  for _, arg in ipairs(args) do
    local ms = arg:match("^%-%-delay=(%d+)$")
    if ms then
      delay_ms = tonumber(ms)
    elseif arg == "--timed" then
      timed = true
    else
      local principal, key = arg:match("^([^=]+)=(.+)$")
      keys[principal] = key
      table.insert(order, principal)
    end
  end
  turn = tid
  -- wrk looks for delay() after init(), where the arguments are known (a delay()
  -- defined at the top level, before them, would never be installed).
  if delay_ms > 0 then
    function delay() return delay_ms end
  end
end

function request()
  if timed then started = common.now_ms() end
  local lease = table.remove(leases)
  if lease then
    kind = "resolve"
    local h = {["Authorization"] = "Bearer " .. keys[lease.by],
      ["Content-Type"] = "application/json", ["X-Lease-Token"] = lease.token}
    return wrk.format("POST", "/tasks/" .. lease.id .. "/resolve", h,
      '{"decision":"APPROVED","notes":"bench"}')
  end
  kind = "claim"
  turn = turn % #order + 1
  local h = {["Authorization"] = "Bearer " .. keys[order[turn]],
    ["Content-Type"] = "application/json"}
  return wrk.format("POST", "/tasks/claim-next", h, "{}")
end

function response(status, resp_headers, body)
  local elapsed = timed and (common.now_ms() - started) or nil
  if status == 200 then
    local token = body:match('"lease_token":"([^"]+)"')
    if token then
      claims = claims + 1
      table.insert(leases, {id = body:match('"id":"([^"]+)"'), token = token,
        by = body:match('"claimed_by":"([^"]+)"')})
      if elapsed then
        table.insert(claim_ms, elapsed)
        last_claim_ms = elapsed
      end
    else
      resolves = resolves + 1
      if elapsed and kind == "resolve" then
        table.insert(resolve_ms, elapsed)
        if last_claim_ms then table.insert(cycle_ms, last_claim_ms + elapsed) end
        last_claim_ms = nil
      end
    end
  elseif status == 204 then
    empty = empty + 1
  elseif status >= 500 then
    server_errors = server_errors + 1
  else
    refused = refused + 1
    if refused <= 3 then io.stderr:write(status .. " " .. body .. "\n") end
  end
end

function done(summary, latency, requests)
  common.report(summary, latency, {"claims", "resolves", "empty", "refused", "server_errors"})
  local all = {claim = {}, resolve = {}, cycle = {}}
  local any = false
  for _, thread in ipairs(common.threads) do
    for name, list in pairs({claim = "claim_ms", resolve = "resolve_ms", cycle = "cycle_ms"}) do
      for _, v in ipairs(thread:get(list) or {}) do
        table.insert(all[name], v)
        any = true
      end
    end
  end
  if any then
    local parts = {}
    for _, name in ipairs({"claim", "resolve", "cycle"}) do
      table.insert(parts, string.format('"%s_n":%d,"%s_p50_ms":%.3f,"%s_p99_ms":%.3f',
        name, #all[name], name, common.percentile(all[name], 50), name,
        common.percentile(all[name], 99)))
    end
    io.write("WRK_TIMED {" .. table.concat(parts, ",") .. "}\n")
  end
end
