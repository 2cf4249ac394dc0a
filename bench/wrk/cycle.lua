-- W2: claim-next, then resolve with the lease it returned.
--   wrk -s bench/wrk/cycle.lua URL -- <principal>=<reviewer key> ...
-- Several reviewers (each holds at most SIGNOFF_MAX_LEASES_PER_PRINCIPAL leases). A
-- thread's connections share a queue of granted leases: a request resolves one (as the
-- reviewer who claimed it) when there is one, otherwise claims the next task as the next
-- reviewer in turn.
package.path = package.path .. ";./bench/wrk/?.lua"
local common = require("common")

setup = common.setup

local keys, order, turn = {}, {}, 0
local leases = {}
claims, resolves, empty, refused, server_errors = 0, 0, 0, 0, 0

function init(args)
  common.seed(tid)
  for _, pair in ipairs(args) do
    local principal, key = pair:match("^([^=]+)=(.+)$")
    keys[principal] = key
    table.insert(order, principal)
  end
  turn = tid
end

function request()
  local lease = table.remove(leases)
  if lease then
    local h = {["Authorization"] = "Bearer " .. keys[lease.by],
      ["Content-Type"] = "application/json", ["X-Lease-Token"] = lease.token}
    return wrk.format("POST", "/tasks/" .. lease.id .. "/resolve", h,
      '{"decision":"APPROVED","notes":"bench"}')
  end
  turn = turn % #order + 1
  local h = {["Authorization"] = "Bearer " .. keys[order[turn]],
    ["Content-Type"] = "application/json"}
  return wrk.format("POST", "/tasks/claim-next", h, "{}")
end

function response(status, resp_headers, body)
  if status == 200 then
    local token = body:match('"lease_token":"([^"]+)"')
    if token then
      claims = claims + 1
      table.insert(leases, {id = body:match('"id":"([^"]+)"'), token = token,
        by = body:match('"claimed_by":"([^"]+)"')})
    else
      resolves = resolves + 1
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
end
