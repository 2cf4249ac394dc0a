-- W1 (mode "new") and W3 (mode "storm") escalations.
--   wrk -s bench/wrk/escalate.lua URL -- <producer key> <mode> [delay_ms]
-- new:   every request a distinct valid escalation.
-- storm: 70 % new, 20 % replays of an earlier escalation (same key, same body),
--        10 % a new key and id for an entity that already has an active task.
package.path = package.path .. ";./bench/wrk/?.lua"
local common = require("common")

local PRECHECK = "ca8a3f64c3a2370609f1aef8b6a973fce294aef4b9c2a5a46adce9ebb6efe0ce"
local TEMPLATE = '{"escalation_id":"%s","idempotency_key":"%s","entity_type":"transaction",' ..
  '"entity_id":"%s","reason_code":"AML_RULE_FAILED","precheck_hash":"' .. PRECHECK .. '",' ..
  '"diagnostic_bundle":{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","attempted_actions":[' ..
  '{"action":"retry_payment_gateway","executed_at":"2026-11-29T08:15:02Z",' ..
  '"result":"timeout after 3 attempts"},{"action":"rerun_aml_rules",' ..
  '"executed_at":"2026-11-29T08:15:09Z","result":"rule AML-04 still failing"}],' ..
  '"input_snapshot":{"amount":"12500.00","currency":"EUR","counterparty_country":"XX",' ..
  '"channel":"api"},"evaluator_verdict":{"confidence_score":0.41,"threshold":0.85}}}'

setup = common.setup

local headers, mode, delay_ms
local sent = {}        -- earlier bodies (a ring), for replays and entity conflicts
local RING = 2000
created, replayed, conflicts, client_errors, server_errors = 0, 0, 0, 0, 0

function init(args)
  common.seed_random(tid)
  headers = {["Authorization"] = "Bearer " .. args[1], ["Content-Type"] = "application/json"}
  mode = args[2] or "new"
  delay_ms = tonumber(args[3] or "0")
  -- wrk looks for delay() after init(), where the arguments are known (a delay()
  -- defined at the top level, before them, would never be installed).
  if delay_ms > 0 then
    function delay() return delay_ms end
  end
end

local function fresh()
  local body = string.format(TEMPLATE, common.uuid4(), "wrk-" .. common.hex(24),
    "txn_" .. common.hex(24))
  return body
end

function request()
  local body
  local roll = math.random(100)
  if mode == "storm" and #sent > 0 and roll > 70 then
    local earlier = sent[math.random(#sent)]
    if roll <= 90 then
      body = earlier.body
    else
      body = string.format(TEMPLATE, common.uuid4(), "wrk-" .. common.hex(24), earlier.entity)
    end
  else
    local entity = "txn_" .. common.hex(24)
    body = string.format(TEMPLATE, common.uuid4(), "wrk-" .. common.hex(24), entity)
    if mode == "storm" then
      if #sent < RING then
        table.insert(sent, {body = body, entity = entity})
      else
        sent[math.random(RING)] = {body = body, entity = entity}
      end
    end
  end
  return wrk.format("POST", "/tasks/escalate", headers, body)
end

function response(status, resp_headers, body)
  if status == 201 then
    if resp_headers["idempotent-replayed"] or resp_headers["Idempotent-Replayed"] then
      replayed = replayed + 1
    else
      created = created + 1
    end
  elseif status == 409 then
    conflicts = conflicts + 1
  elseif status >= 500 then
    server_errors = server_errors + 1
  else
    client_errors = client_errors + 1
    if client_errors <= 3 then io.stderr:write(status .. " " .. body .. "\n") end
  end
end

function done(summary, latency, requests)
  common.report(summary, latency,
    {"created", "replayed", "conflicts", "client_errors", "server_errors"})
end
