--- Checks what tests/faults/storm_faults.lua left in its experiment folder
-- (run by tests/e2e/faults.sh; docs/faults.md lists the invariants):
--
--   kbrun check.lua dir=EXP runs=N [succeeded=N] [failed=sim] [lost=N]
--     [reasons=503,429] [served=exact|timeouts|none] [recovered=N]
--
-- Raises (exit 1) with every failed check listed, and prints the figures
-- it compared.
local kb = require "kb"
local fs = require "kb.fs"
local csv = require "kb.csv"
local json = require "kb.json"

local p = kb.params
local problems = {}
local function check(ok, fmt, ...)
  if not ok then problems[#problems + 1] = string.format(fmt, ...) end
end

local dir = assert(p.dir, "dir= is required")
local N = assert(tonumber(p.runs), "runs= is required")
local doc = json.decode(fs.read(fs.join(dir, "result", "result.json")))
local r = doc.result
local rows = csv.parse(fs.read(fs.join(dir, "result", "runs.csv")), { header = true })
local calls = csv.parse(fs.read(fs.join(dir, "result", "latencies.csv")), { header = true })

-- ---- the verdict: passed (exit 0) or failed by the success_rate threshold (exit 99)

if p.status then
  check(doc.status == p.status, "status %s, expected %s (%s)", tostring(doc.status), p.status,
    tostring(doc.error))
  check(doc.exit_code == (p.status == "passed" and 0 or 99), "exit_code %s", tostring(doc.exit_code))
  if p.status == "failed" then
    local failed_sr = false
    for _, c in ipairs(doc.thresholds or {}) do
      if c.name == "success_rate" and c.passed == false then failed_sr = true end
    end
    check(failed_sr, "the success_rate threshold did not fail: %s", json.encode(doc.thresholds))
  end
end

-- ---- every run accounted for, with the right outcome ------------------------------

check(#rows == N, "runs.csv has %d rows, expected %d", #rows, N)
local outcomes = {}
for _, row in ipairs(rows) do outcomes[row.outcome] = (outcomes[row.outcome] or 0) + 1 end
local total = 0
for o, n in pairs(r.outcomes) do
  total = total + n
  check(outcomes[o] == n, "outcome %s: %s in runs.csv, %d in result.json", o, tostring(outcomes[o]), n)
end
check(total == N, "result.json accounts for %d runs of %d: %s", total, N, json.encode(r.outcomes))
check(r.runs.requested == N, "runs.requested %s", tostring(r.runs.requested))
r.runs.lost, r.runs.unknown = r.runs.lost or 0, r.runs.unknown or 0
check(r.runs.succeeded + r.runs.failed + r.runs.timed_out + r.runs.not_created + r.runs.lost
  + r.runs.unknown + r.runs.terminated + r.runs.interrupted == N, "runs do not add up: %s",
  json.encode(r.runs))
if p.succeeded then
  check(r.runs.succeeded == tonumber(p.succeeded), "succeeded %d, expected %s", r.runs.succeeded,
    p.succeeded)
end
if p.failed == "sim" then
  -- the simulator's own count of failed runs, listed before the deletes
  local sim_failed = (r.sim.states or {}).FAILED or 0
  check(r.sim.listed == N, "the simulator listed %s runs", tostring(r.sim.listed))
  check(r.runs.failed == sim_failed, "failed %d, the simulator says %d", r.runs.failed, sim_failed)
  check(r.runs.succeeded == ((r.sim.states or {}).SUCCEEDED or 0), "succeeded %d, the simulator says %s",
    r.runs.succeeded, tostring((r.sim.states or {}).SUCCEEDED))
  check(sim_failed > 0, "no run failed in the simulator: the fault did not bite")
end
if p.lost then
  check(r.runs.lost == tonumber(p.lost), "lost %d, expected %s", r.runs.lost, p.lost)
  for _, row in ipairs(rows) do
    if row.outcome == "Lost" then
      check(row.error:find("not_found", 1, true) ~= nil, "lost run %s: error %q lacks not_found",
        row.id, row.error)
    end
  end
end

-- ---- the client's figures ---------------------------------------------------------

local hist, counters = {}, {}
for _, m in ipairs(doc.metrics.metrics) do
  if m.kind == "histogram" then hist[m.name] = m.summary.count
  elseif m.kind == "counter" then counters[#counters + 1] = m end
end

-- Sum of counter `name` (any client prefix) per op, with filter(labels).
local PREFIXES = { "", "poll.", "aux." }
local function per_op(name, filter)
  local out = {}
  for _, m in ipairs(counters) do
    for _, prefix in ipairs(PREFIXES) do
      if m.name == prefix .. name and (not filter or filter(m.labels)) then
        local op = prefix .. m.labels.op
        out[op] = (out[op] or 0) + m.value
      end
    end
  end
  return out
end
local function sum(t, pred)
  local n = 0
  for k, v in pairs(t) do if not pred or pred(k) then n = n + v end end
  return n
end

-- Every logical call is one row of latencies.csv, and one sample of <op>
-- or one count of kfp.errors{op}; every attempt one sample of <op>.attempt.
local logical = {}
for _, c in ipairs(calls) do logical[c.op] = (logical[c.op] or 0) + 1 end
local errors = per_op("kfp.errors")
local retries = per_op("kfp.retries")
local ops = {}
for op in pairs(logical) do ops[op] = true end
for name in pairs(hist) do
  local op = name:match("^(.*)%.attempt$")
  if op then ops[op] = true end
end
local attempts = {}
for op in pairs(ops) do
  local ok_calls, failed = hist[op] or 0, errors[op] or 0
  check(logical[op] == ok_calls + failed, "%s: %s calls recorded, %d succeeded + %d failed", op,
    tostring(logical[op]), ok_calls, failed)
  attempts[op] = hist[op .. ".attempt"] or 0
  check(attempts[op] == (logical[op] or 0) + (retries[op] or 0),
    "%s: %d attempts, %s calls + %d retries", op, attempts[op], tostring(logical[op]), retries[op] or 0)
end

local total_retries = sum(retries)
check(total_retries == r.retries.total, "retries: %d counted, result.json says %d", total_retries,
  r.retries.total)
for reason in tostring(p.reasons or ""):gmatch("[^,]+") do
  local n = sum(per_op("kfp.retries", function(l) return l.reason == reason end))
  check(n > 0, "no retry for reason %s", reason)
end
if p.recovered then
  check(r.retries.recovered >= tonumber(p.recovered), "recovered %d, expected >= %s",
    r.retries.recovered, p.recovered)
end
check(r.retries.budget_exhausted == 0 or p.budget_ok == "true",
  "the retry budget ran out %d times", r.retries.budget_exhausted)

-- ---- the simulator's figures: nothing lost between client and server -------------

local served = p.served or "exact"
if served ~= "none" then
  local sim = r.sim
  local kfp_op = function(op) return not op:match("metrics%.get$") end
  local answered = per_op("kfp.requests")
  local own_status = sim.own_status or {}
  local by_status = function(st)
    return sum(per_op("kfp.requests", function(l) return l.status == st end), kfp_op)
      + (own_status[st] or 0)
  end
  local n_attempts, n_answered = sum(attempts, kfp_op), sum(answered, kfp_op)
  -- every attempt reached the simulator (loopback: no connect failures)
  check(n_attempts + sim.own_kfp_requests == sim.kfp_requests,
    "attempts %d + own %d ~= KFP requests the simulator served %d", n_attempts, sim.own_kfp_requests,
    sim.kfp_requests)
  check(by_status("503") == sim.faults.error, "503s seen %d, injected %d", by_status("503"), sim.faults.error)
  check(by_status("429") == sim.faults.throttle, "429s seen %d, injected %d", by_status("429"),
    sim.faults.throttle)
  local unanswered = n_attempts - n_answered + sim.own_kfp_requests - sim.own_answered
  if served == "exact" then
    -- unanswered attempts are exactly the connections the simulator reset
    check(unanswered == sim.faults.reset, "attempts without an answer %d, resets injected %d",
      unanswered, sim.faults.reset)
  else -- "timeouts": stalls longer than the client's timeout
    check(sim.faults.reset == 0, "resets injected: %d", sim.faults.reset)
    check(unanswered > 0 and unanswered <= sim.faults.stall,
      "attempts without an answer %d, stalls injected %d", unanswered, sim.faults.stall)
    -- a create that timed out and was then found by its lookup is neither
    -- retried nor an error: it is counted as recovered (no resets here, so
    -- every recovery followed a timeout)
    local timeouts = sum(per_op("kfp.retries", function(l) return l.reason == "timeout" end))
      + sum(per_op("kfp.errors", function(l) return l.class == "timeout" end))
      + (r.retries.recovered or 0)
      + sim.own_kfp_requests - sim.own_answered
    check(timeouts == unanswered, "timeouts counted %d, attempts without an answer %d", timeouts,
      unanswered)
  end
  -- per handler: answers the client got that the simulator handled
  local function handled(pattern)
    return sum(per_op("kfp.requests", function(l) return l.status ~= "503" and l.status ~= "429" end),
      function(op) return op:match(pattern) ~= nil end)
  end
  local h = sim.handlers
  local cmp = served == "exact" and function(a, b) return a == b end or function(a, b) return a >= b end
  check(cmp(h.run_server_create_requests, handled("run%.create$")), "CreateRun: simulator %d, client %d",
    h.run_server_create_requests, handled("run%.create$"))
  check(cmp(h.run_server_get_requests, handled("run%.get$")), "GetRun: simulator %d, client %d",
    h.run_server_get_requests, handled("run%.get$"))
  check(cmp(h.run_server_delete_requests, handled("run%.delete$")), "DeleteRun: simulator %d, client %d",
    h.run_server_delete_requests, handled("run%.delete$"))
  local lists = handled("run%.list$") + handled("run%.create%.check$")
    + sim.own_answered - (own_status["503"] or 0) - (own_status["429"] or 0)
  check(cmp(h.run_server_list_requests, lists), "ListRuns: simulator %d, client %d",
    h.run_server_list_requests, lists)
end

print(string.format("runs %s | retries %d %s | recovered %d | sim %s", json.encode(r.outcomes),
  r.retries.total, json.encode(r.retries.by_op), r.retries.recovered,
  r.sim and json.encode({ faults = r.sim.faults, served = r.sim.kfp_requests }) or "-"))
if #problems > 0 then
  error("fault check failed:\n  " .. table.concat(problems, "\n  "), 0)
end
