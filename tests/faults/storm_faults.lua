--- storm_faults: a small run storm (taxi_50runs' steps) with one fault of
-- the simulator switched on, for the fault-injection suite
-- (tests/e2e/faults.sh, docs/faults.md). Besides the storm's own result it
-- records in result.sim what the simulator says: its request and fault
-- counters (/metrics, scraped at the end) and the runs it holds by state
-- (listed before the storm deletes them), with the raw requests this
-- scenario made itself, so tests/faults/check.lua can compare every count.
--
--   kbrun tests/faults/storm_faults.lua api_faults='{"error_rate": 0.05}'
--   kbrun tests/faults/storm_faults.lua step_fail_prob=0.3
--   kbrun tests/faults/storm_faults.lua pool_fail=pool-1 pool_fail_after=120
local kb = require "kb"
local json = require "kb.json"
local storm = require "kb.kfp.storm"
local target = require "kb.target"
local prom = require "kb.kfp.prom"

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

local session
-- Raw KFP requests of this scenario (not through kb.kfp): attempts, those
-- answered, answers by status.
local own = { requests = 0, answered = 0, status = {} }

-- A raw GET of the simulator (no kb.kfp client, so no client metric):
-- retried here until it answers 200, every attempt counted when it is a
-- KFP API path.
local function sim_get(url, kfp_path)
  for _ = 1, 50 do
    if kfp_path then own.requests = own.requests + 1 end
    local ok, r = pcall(kb.http.get, url, { timeout = 600 })
    if ok and kfp_path then
      own.answered = own.answered + 1
      own.status[tostring(r.status)] = (own.status[tostring(r.status)] or 0) + 1
    end
    if ok and r.status == 200 then return r.body end
    if not ok and kb.is_cancelled(r) then error(r, 0) end
    kb.sleep(0.5)
  end
  error("storm_faults: the simulator does not answer " .. url, 0)
end

-- The runs of the experiment by state, as the simulator lists them.
local function sim_runs(s)
  local url = s.url .. "/apis/v2beta1/runs?page_size=500&experiment_id=" .. s.experiment.id
  local doc = json.decode(sim_get(url, true))
  local by = {}
  for _, r in ipairs(doc.runs or {}) do by[r.state] = (by[r.state] or 0) + 1 end
  return by, #(doc.runs or {})
end

-- The simulator's counters at the end (a fresh embedded simulator starts at 0).
local function sim_counters(s)
  local scrape = prom.parse(sim_get(s.url .. "/metrics", false))
  local out = { kfp_requests = 0, faults = {}, handlers = {} }
  for _, x in pairs(scrape.samples) do
    local name, labels, value = x.name, x.labels or {}, x.value
    if name == "kbrun_sim_http_requests_total" and labels.api == "kfp" then
      out.kfp_requests = value
    elseif name == "kbrun_sim_faults_injected_total" then
      out.faults[labels.kind] = value
    elseif name and name:match("^run_server_.*_requests$") then
      out.handlers[name] = value
    end
  end
  return out
end

local function set_faults(p)
  local spec = {}
  if p.api_faults ~= "" then spec.api = json.decode(p.api_faults) end
  if p.step_fail_prob > 0 then spec.step_fail_prob = p.step_fail_prob end
  if next(spec) then target.faults(spec) end
end

return {
  name = "storm_faults",

  params = storm.params {
    pipeline_file_url = HERE .. "/../../scenarios/pipelines/taxi_updated_pool.yaml",
    num_runs = 10,
    run_status_polling_interval_sec = 30,
    run_timeout = 3000,
    api_faults = "",          -- JSON: the simulator's api_faults (docs/simulator.md)
    step_fail_prob = 0.0,     -- probability that a step fails
    pool_fail = "",           -- a node pool to fail ...
    pool_fail_after = 120,    -- ... this many cluster seconds after the runs were created
    sim_states = true,        -- list the runs in the simulator before deleting them
  },

  thresholds = {
    success_rate = 1,
    ["runs.timed_out"] = { max = 0 },
  },

  run = function(p)
    session = storm.new(p, { name = "storm_faults" })
    local s = session
    local embedded = s.sim ~= nil
    if embedded then set_faults(p) end
    s:scrape_metrics("before")
    s:create_pipeline()
    s:create_experiment()
    s:create_runs()
    if embedded and p.pool_fail ~= "" then
      kb.spawn(function()
        s:sleep(p.pool_fail_after)
        target.faults{ pool_fail = p.pool_fail }
      end)
    end
    s:wait_runs()
    local states, listed
    if p.sim_states then states, listed = sim_runs(s) end
    s:get_runs()
    s:delete_runs()
    s:cleanup()
    s:scrape_metrics("after")
    local result = s:finish()
    result.sim = { states = states, listed = listed, own_kfp_requests = own.requests,
      own_answered = own.answered, own_status = own.status }
    if embedded then
      target.faults{ api = { error_rate = 0, throttle_rate = 0, reset_rate = 0, stall_rate = 0 } }
      local c = sim_counters(s)
      result.sim.kfp_requests, result.sim.faults, result.sim.handlers = c.kfp_requests, c.faults,
        c.handlers
    end
    return result
  end,

  cleanup_timeout = 60,
  cleanup = function()
    if session then
      session:cleanup()
      session:finish()
    end
  end,

  report = storm.report,
}
