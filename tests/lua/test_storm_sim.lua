-- kb.kfp.storm end to end against the embedded simulator: the numbers in
-- the result and runs.csv against what the simulator did (runs it was told
-- to fail, runs it never finishes), cleanup checked by listing, and every
-- request checked against the KFP swagger of its API version.
local kb = require "kb"
local T = require "kb.testing"
local fs = require "kb.fs"
local csv = require "kb.csv"
local json = require "kb.json"
local metrics = require "kb.metrics"
local kfp = require "kb.kfp"
local target = require "kb.target"
local openapi = require "kb.openapi"
local experiment = require "kb.experiment"
local storm = require "kb.kfp.storm"

local SRC = os.getenv("KBRUN_SOURCE_DIR") or ".."
local TAXI = SRC .. "/scenarios/pipelines/taxi_updated_pool.yaml"
-- the embedded simulator reads local pipelines from this folder only (as
-- it would from the scenario's), so the session creates from a file:// URL
target.defaults.pipeline_dir = SRC .. "/scenarios"
local tmp = fs.tmpdir("storm-sim-")

-- A one-step pipeline whose step takes ~12 days: it never ends in a test.
local STUCK = fs.join(tmp, "stuck.yaml")
fs.write(STUCK, [[
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: stuck-}
spec:
  entrypoint: main
  templates:
  - name: main
    metadata:
      annotations: {sim.kbrun.io/duration: "fixed:1000000"}
    container: {image: alpine, command: [sleep, infinity]}
]])

-- Every KFP request goes through the swagger of its version.
local recorders = {}
local function recording_http(api)
  recorders[api] = recorders[api] or openapi.recorder(openapi.kfp(api))
  local rec = recorders[api]
  return { request = function(_, req)
    local path = req.url:match("^https?://[^/]+(/[^?]*)")
    if path:match("^/apis/") then
      local body = req.body
      if type(body) == "string" and body ~= "" then body = json.decode(body) end
      rec:check({ method = req.method or "GET", path = path, query = req.query, body = body }, nil)
    end
    return kb.http.request(req)
  end }
end

local function new_session(api, extra)
  local p = { host = "", api = api, pipeline_file_url = TAXI, num_runs = 50, concurrency = 10,
    run_status_polling_interval_sec = 30, progress = false }
  for k, v in pairs(extra or {}) do p[k] = v end
  local exp = experiment.create{ out = fs.join(tmp, "out"), name = "sim-" .. api }
  return storm.new(p, { exp = exp, http = recording_http(api) }), exp
end

-- Nothing the session made is still listed by the server.
local function assert_gone(s)
  local c = kfp.client{ host = s.url, api = s.p.api }
  local ids = {}
  for _, run in ipairs(s.runs) do if run.id then ids[run.id] = true end end
  for _, r in ipairs(c:list_all_runs{}) do T.ok(not ids[r.id], "run " .. r.id .. " is gone") end
  for _, e in ipairs(c:list_all_experiments{}) do
    T.ok(e.id ~= s.experiment.id, "experiment " .. e.id .. " is gone")
  end
  for _, p in ipairs(c:list_all_pipelines{}) do
    T.ok(p.id ~= s.pipeline.id, "pipeline " .. p.id .. " is gone")
  end
end

local function read_runs(exp)
  return (csv.parse(fs.read(exp:path("result", "runs.csv")), { header = true }))
end

T.case("50 runs, 10 of them told to fail (v1beta1)", function()
  metrics.clear()
  local s, exp = new_session("v1beta1")
  T.eq(s.clock.kind, "embedded simulator")
  local before = target.status().cluster
  s:scrape_metrics("before")
  s:create_pipeline()
  s:create_experiment()
  target.faults{ step_fail_prob = 1 }
  local first = s:create_runs(10)
  s:wait_runs(first)
  local mid = target.status().cluster
  target.faults{ step_fail_prob = 0 }
  s:create_runs(40)
  s:wait_runs()
  s:get_runs()
  s:delete_runs()
  s:cleanup()
  s:scrape_metrics("after")
  local r = s:finish()
  local after = target.status().cluster
  T.eq(after.runs_total - before.runs_total, 50, "the simulator ran 50 runs")
  T.eq(mid.pods_failed - before.pods_failed, 10, "one failed step per failed run (failFast)")
  T.same(r.runs, { requested = 50, created = 50, succeeded = 40, failed = 10, timed_out = 0,
    not_created = 0, terminated = 0, interrupted = 0, deleted = 50 })
  T.same(r.outcomes, { Succeeded = 40, Failed = 10 })
  T.eq(r.durations.count, 40)
  T.ok(r.durations.p50 > 300 and r.durations.p50 < 1500, "taxi runs last ~10 min: " .. r.durations.p50)
  T.eq(r.observed_lag.count, 50)
  T.ok(r.observed_lag.min >= -1, "a run is never seen finished before it finished (1 s resolution)")
  T.ok(r.observed_lag.max < 600, "seen within about an interval plus the agent's lag (loose: a busy machine stretches virtual time)")
  T.eq(r.server_metrics.grpc["run.create"].count, 50)
  T.eq(r.server_metrics.grpc["run.create"].method, "CreateRunV1")
  T.eq(r.server_metrics.handlers.run_server_create_requests, 50)
  T.eq(r.server_metrics.handlers.run_server_delete_requests, 50)
  local rows = read_runs(exp)
  T.eq(#rows, 50)
  for i, row in ipairs(rows) do
    T.eq(row.outcome, i <= 10 and "Failed" or "Succeeded", "run " .. i)
    T.eq(row.state, i <= 10 and "Failed" or "Succeeded")
    T.ok(tonumber(row.duration) > 0, "duration of run " .. i)
  end
  T.eq(metrics.get("run.create"):summary().count, 50)
  T.eq(metrics.get("run.get"):summary().count, 50)
  T.eq(metrics.get("run.delete"):summary().count, 50)
  assert_gone(s)
  recorders.v1beta1:assert_clean()
  recorders.v1beta1:assert_covered({ "POST /apis/v1beta1/pipelines", "POST /apis/v1beta1/experiments",
    "POST /apis/v1beta1/runs", "GET /apis/v1beta1/runs/{run_id}", "GET /apis/v1beta1/runs",
    "DELETE /apis/v1beta1/runs/{id}", "DELETE /apis/v1beta1/pipelines/{id}",
    "DELETE /apis/v1beta1/experiments/{id}" })
end)

T.case("a v2beta1 storm with concurrency 5 succeeds and cleans up", function()
  metrics.clear()
  local s = new_session("v2beta1", { num_runs = 12, concurrency = 5 })
  s:scrape_metrics("before")
  s:create_pipeline()
  s:create_experiment()
  s:create_runs()
  s:wait_runs()
  s:get_runs()
  s:delete_runs()
  s:cleanup()
  s:scrape_metrics("after")
  local r = s:finish()
  T.eq(r.runs.succeeded, 12)
  T.eq(r.server_metrics.grpc["run.create"].method, "CreateRun")
  T.eq(r.server_metrics.grpc["run.create"].count, 12)
  assert_gone(s)
  recorders.v2beta1:assert_clean()
  recorders.v2beta1:assert_covered({ "POST /apis/v2beta1/runs", "GET /apis/v2beta1/runs/{run_id}",
    "GET /apis/v2beta1/runs", "DELETE /apis/v2beta1/runs/{run_id}" })
end)

T.case("run_timeout ends a stuck run: terminated, counted, cleaned up", function()
  metrics.clear()
  local s, exp = new_session("v2beta1", { num_runs = 3, pipeline_file_url = STUCK,
    run_timeout = 600, run_status_polling_interval_sec = 60 })
  s:create_pipeline()
  s:create_experiment()
  s:create_runs()
  s:wait_runs()
  T.ok(s:elapsed() < 100000, "the wait ended at the timeout, not at the end of the runs (1e6 s)")
  s:get_runs()
  s:delete_runs()
  s:cleanup()
  local r = s:finish()
  T.eq(r.runs.timed_out, 3)
  T.eq(r.runs.succeeded, 0)
  T.eq(r.success_rate, 0)
  for _, run in ipairs(s.runs) do
    T.ok(run.terminated, "run " .. run.id .. " was terminated")
    T.ok(run.state == "Terminating" or run.state == "Failed",
      "a terminated run is CANCELING or CANCELED, got " .. tostring(run.state))
  end
  local rows = read_runs(exp)
  T.eq(rows[1].outcome, "Timed out")
  T.contains(rows[1].error, "not finished within run_timeout (600 s)")
  assert_gone(s)
  recorders.v2beta1:assert_clean()
end)

-- The server's own record of every run of a session: state and duration.
local function server_runs(s)
  local c = kfp.client{ host = s.url, api = s.p.api }
  local by_id = {}
  for _, r in ipairs(c:list_all_runs{ experiment_id = s.experiment.id }) do by_id[r.id] = r end
  return by_id
end

-- 20 runs, the first 5 told to fail, followed to the end (not deleted).
local function tracked_storm(api, extra)
  metrics.clear()
  local s = new_session(api, extra)
  s:create_pipeline()
  s:create_experiment()
  target.faults{ step_fail_prob = 1 }
  local first = s:create_runs(5)
  s:wait_runs(first)
  target.faults{ step_fail_prob = 0 }
  s:create_runs(15)
  s:wait_runs()
  return s
end

for _, api in ipairs({ "v1beta1", "v2beta1" }) do
  T.case("tracking = list (" .. api .. "): every run as the server has it, a GET only where a state changed", function()
    local polled = tracked_storm(api, { num_runs = 20 })
    local poll_gets = metrics.get("poll.run.get"):summary().count
    polled:delete_runs()
    polled:cleanup()
    local s = tracked_storm(api, { num_runs = 20, tracking = "list" })
    local truth = server_runs(s)
    local n_failed = 0
    for i, run in ipairs(s.runs) do
      local r = truth[run.id]
      T.ok(r ~= nil, "run " .. i .. " is on the server")
      T.eq(run.state, r.state, "run " .. i .. "'s state")
      T.ok(r.finished, "run " .. i .. " finished")
      T.eq(run.duration, r.finished_at - r.created_at, "run " .. i .. "'s duration")
      if run.state == "Failed" then n_failed = n_failed + 1 end
    end
    T.eq(n_failed, 5)
    local gets = metrics.get("poll.run.get"):summary().count
    local lists = metrics.get("poll.run.list"):summary().count
    -- one GET when a run leaves the unfinished list, one more for each state
    -- it was listed in that we had not seen (Pending -> Running: at most 2)
    T.ok(gets >= 20 and gets <= 60, "GETs where a state changed: " .. gets)
    T.ok(lists >= 2, "a ListRuns page per round: " .. lists)
    T.ok(gets + lists < poll_gets, string.format("fewer calls than polling every run: %d + %d < %d",
      gets, lists, poll_gets))
    T.eq(s.track_unfiltered, nil, "the simulator takes the state filter")
    s:get_runs()
    s:delete_runs()
    s:cleanup()
    assert_gone(s)
    recorders[api]:assert_clean()
  end)
end

T.case("tracking = list: a server that refuses the state filter is listed without it, same outcome", function()
  metrics.clear()
  local refused = 0
  local inner = recording_http("v2beta1")
  local http = { request = function(self, req)
    local f = req.query and req.query.filter
    if req.url:match("/apis/v2beta1/runs$") and f and f:find('"IN"', 1, true) then
      refused = refused + 1
      return { status = 400, headers = { ["content-type"] = "application/json" },
        body = '{"code": 3, "message": "Invalid input error: filter key state", "details": []}',
        time = { total = 0.001 } }
    end
    return inner.request(self, req)
  end }
  local p = { host = "", api = "v2beta1", pipeline_file_url = TAXI, num_runs = 8, concurrency = 4,
    run_status_polling_interval_sec = 30, progress = false, tracking = "list", retry = false }
  local exp = experiment.create{ out = fs.join(tmp, "out"), name = "sim-refused" }
  local s = storm.new(p, { exp = exp, http = http })
  s:create_pipeline()
  s:create_experiment()
  s:create_runs()
  s:wait_runs()
  T.eq(refused, 1, "refused once, then listed without the filter")
  T.eq(s.track_unfiltered, true)
  local truth = server_runs(s)
  for i, run in ipairs(s.runs) do
    T.eq(run.state, "Succeeded", "run " .. i)
    T.eq(run.duration, truth[run.id].finished_at - truth[run.id].created_at, "run " .. i .. "'s duration")
  end
  s:delete_runs()
  s:cleanup()
end)

T.run()
fs.remove(tmp, { recursive = true })
