-- Every run of a storm accounted for (docs/storm.md, "Outcomes"), against
-- the in-memory KFP server (storm_mock.lua): refused and failing polls end
-- in Unknown (never Timed out) and stop the polling; a storm that fails or
-- is interrupted before its first create still has a row per requested
-- run; creates whose answer was lost (truncated, interrupted, killed) are
-- found by name, by cleanup, by reconcile_runs and by `kbrun report`'s
-- rebuild, which says Unknown when it cannot reach the server.
local kb = require "kb"
local T = require "kb.testing"
local fs = require "kb.fs"
local csv = require "kb.csv"
local json = require "kb.json"
local log = require "kb.log"
local metrics = require "kb.metrics"
local experiment = require "kb.experiment"
local rebuild = require "kb.results.rebuild"
local storm = require "kb.kfp.storm"
local mocks = require "storm_mock"

local tmp = fs.tmpdir("storm-accounting-")
local PIPELINE = fs.join(tmp, "hello.yaml")
fs.write(PIPELINE, "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {generateName: x-}\n"
  .. "spec: {entrypoint: main, templates: [{name: main, container: {image: alpine}}]}\n")

local function new_exp(name)
  return experiment.create{ out = fs.join(tmp, "out"), name = name }
end

local function params(m, extra)
  local p = { host = m.url, pipeline_file_url = PIPELINE, num_runs = 5,
    run_status_polling_interval_sec = 0.01, concurrency = 2, api = "v2beta1", progress = false,
    scrape_metrics = false }
  for k, v in pairs(extra or {}) do p[k] = v end
  return p
end

local function read_csv(path)
  return (csv.parse(fs.read(path), { header = true }))
end

local function full_storm(s)
  s:create_pipeline()
  s:create_experiment()
  s:create_runs()
  s:wait_runs()
  s:get_runs()
  s:delete_runs()
  s:cleanup()
  return s:finish()
end

-- Calls fn with log.error captured; returns the lines logged.
local function capture_errors(fn)
  local lines, saved = {}, log.error
  log.error = function(fmt, ...) lines[#lines + 1] = string.format(fmt, ...) end
  local ok, err = pcall(fn)
  log.error = saved
  if not ok then error(err, 0) end
  return lines
end

local function outcomes_of(rows)
  local n = {}
  for _, row in ipairs(rows) do n[row.outcome] = (n[row.outcome] or 0) + 1 end
  return n
end

T.case("401 on polls: named at once, polling stops, runs Unknown with the error, never Timed out", function()
  metrics.clear()
  local m = mocks.start{ hook = function(op)
    if op == "GetRun" then return { status = 401, body = { code = 16, message = "Jwt is expired" } } end
  end }
  local exp = new_exp("poll-401")
  local r
  local logged = capture_errors(function()
    r = full_storm(storm.new(params(m, { timeout = 2, run_timeout = 1 }), { exp = exp }))
  end)
  T.eq(r.runs.created, 5)
  T.eq(r.runs.timed_out, 0, "a run whose state could not be read did not time out")
  T.eq(r.outcomes.Unknown, 5)
  T.eq(r.runs.unknown, 5)
  T.contains(r.halted.reason, "3 consecutive status polls were refused (auth)")
  -- at most the failures that stop it plus the polls already in flight
  T.ok(m.counts.GetRun <= storm.MAX_AUTH_FAILURES + 2, "polls sent: " .. tostring(m.counts.GetRun))
  local text = table.concat(logged, "\n")
  T.contains(text, "poll.run.get was refused by " .. m.url .. ": HTTP 401: Jwt is expired")
  T.contains(text, "token_file (none given)")
  T.contains(text, "expiry")
  local rows = read_csv(exp:path("result", "runs.csv"))
  T.eq(#rows, 5)
  for _, row in ipairs(rows) do
    T.eq(row.outcome, "Unknown")
    T.ok(row.id ~= "", "the run has its id")
    T.contains(row.error, "state unknown (polling stopped")
    T.contains(row.error, "HTTP 401")
  end
  T.same(m:leftovers(), { pipelines = 0, experiments = 0, runs = 0 }, "cleanup still ran")
  local report = read_csv(fs.join(exp.out, "kfp-storm-report.csv"))
  T.eq(report[#report].unknown, "5")
  T.eq(report[#report].status, "failed", "5 Unknown runs: the storm's status")
  T.eq(report[#report].timed_out, "0")
  m:close()
end)

T.case("100% 503 on polls: retried as configured, then stopped; Unknown, never Timed out", function()
  metrics.clear()
  local m = mocks.start{ fail = function(op) return op == "GetRun" end }
  local exp = new_exp("poll-503")
  local r = full_storm(storm.new(params(m, { timeout = 5, run_timeout = 2, retry_max_attempts = 2,
    retry_budget_ratio = 1 }), { exp = exp }))
  T.eq(r.runs.timed_out, 0)
  T.eq(r.outcomes.Unknown, 5)
  T.contains(r.halted.reason, "every status poll failed in 3 consecutive rounds")
  -- 3 rounds of 5 polls, each attempted twice
  T.eq(m.counts.GetRun, storm.MAX_FAILED_ROUNDS * 5 * 2)
  T.eq(r.retries.by_op["poll.run.get"]["503"], storm.MAX_FAILED_ROUNDS * 5)
  for _, row in ipairs(read_csv(exp:path("result", "runs.csv"))) do
    T.eq(row.outcome, "Unknown")
    T.contains(row.error, "HTTP 503")
  end
  m:close()
end)

T.case("401 on the pipeline upload: a Not created row per requested run, with the reason", function()
  metrics.clear()
  local m = mocks.start{ hook = function(op)
    if op == "UploadPipeline" then return { status = 401, body = { code = 16, message = "no token" } } end
  end }
  local exp = new_exp("upload-401")
  local s = storm.new(params(m, { num_runs = 7 }), { exp = exp })
  local ok, err = pcall(s.create_pipeline, s)
  T.eq(ok, false)
  T.eq(err.class, "auth")
  s:cleanup()
  local r = s:finish()
  T.eq(r.runs.requested, 7)
  T.eq(r.runs.not_created, 7)
  T.eq(r.outcomes["Not created"], 7)
  T.contains(r.stop_reason, "creating the pipeline failed")
  local rows = read_csv(exp:path("result", "runs.csv"))
  T.eq(#rows, 7)
  for i, row in ipairs(rows) do
    T.eq(row.index, tostring(i))
    T.eq(row.outcome, "Not created")
    T.contains(row.error, "not created: creating the pipeline failed: pipeline.upload")
    T.contains(row.error, "HTTP 401")
  end
  m:close()
end)

T.case("interrupted while the experiment create is held: rows say so, cleanup deletes it by name", function()
  metrics.clear()
  local m = mocks.start{ hook = function(op)
    if op == "CreateExperiment" then return { hold = 0.3 } end
  end }
  local exp = new_exp("stalled-experiment")
  local s = storm.new(params(m, { num_runs = 4, request_timeout = 5 }), { exp = exp })
  local task = kb.spawn(function()
    s:create_pipeline()
    s:create_experiment()
    s:create_runs()
  end)
  kb.sleep(0.1)
  task:cancel()
  T.eq(m:leftovers().experiments, 1, "the server made it; its answer is lost")
  s:cleanup()
  T.same(m:leftovers(), { pipelines = 0, experiments = 0, runs = 0 },
    "the experiment made after the cancel was found by name and deleted")
  local r = s:finish()
  T.eq(r.runs.requested, 4)
  T.eq(r.runs.not_created, 4)
  local rows = read_csv(exp:path("result", "runs.csv"))
  T.eq(#rows, 4)
  for _, row in ipairs(rows) do
    T.contains(row.error, "not created: kbrun was interrupted while creating the experiment")
  end
  -- the deletes are journaled with the objects' ids
  local deleted = {}
  for _, rec in ipairs((require("kb.journal").read(exp:path("output", "journal.jsonl")))) do
    if rec.event == "deleted" then deleted[rec.kind] = rec.id end
  end
  T.ok(deleted.experiment and deleted.pipeline, "deletes journaled")
  m:close()
end)

T.case("a truncated create answer: the run is found by name, with its id and real outcome", function()
  metrics.clear()
  local m = mocks.start{ hook = function(op, n)
    if op == "CreateRun" and n == 2 then return { truncate = true } end
  end }
  local exp = new_exp("truncated")
  local r = full_storm(storm.new(params(m, { num_runs = 3, retry = false }), { exp = exp }))
  T.eq(r.runs.created, 3)
  T.eq(r.runs.succeeded, 3)
  T.eq(r.runs.not_created, 0)
  local rows = read_csv(exp:path("result", "runs.csv"))
  T.ok(rows[2].id ~= "", "row 2 has its id")
  T.eq(rows[2].outcome, "Succeeded")
  T.contains(rows[2].error, "found by name")
  T.same(m:leftovers(), { pipelines = 0, experiments = 0, runs = 0 })
  m:close()
end)

-- A storm interrupted while `inflight` creates are held by the server; the
-- server makes them after the cancel. Returns the mock, the session, the
-- experiment.
local function interrupted_creates(name, inflight)
  local m = mocks.start{ script = function() return { final = nil } end,
    hook = function(op, n)
      if op == "CreateRun" and n > 2 then return { hold = 0.3 } end
    end }
  local exp = new_exp(name)
  local s = storm.new(params(m, { num_runs = 10, concurrency = inflight, request_timeout = 5 }),
    { exp = exp })
  local task = kb.spawn(function()
    s:create_pipeline()
    s:create_experiment()
    s:create_runs()
  end)
  for _ = 1, 200 do
    if m.counts.CreateRun == 2 + inflight then break end
    kb.sleep(0.01)
  end
  kb.sleep(0.05)
  task:cancel()
  return m, s, exp
end

T.case("Ctrl-C while creates are in flight: what the server made is listed with its id, then deleted", function()
  metrics.clear()
  local m, s, exp = interrupted_creates("ctrl-c", 3)
  s:cleanup()
  T.same(m:leftovers(), { pipelines = 0, experiments = 0, runs = 0 }, "nothing left behind")
  local r = s:finish()
  T.eq(r.runs.requested, 10)
  T.eq(r.runs.created, 5, "2 answered + 3 found by name")
  local rows = read_csv(exp:path("result", "runs.csv"))
  T.eq(#rows, 10)
  local made = {}
  for _, id in ipairs(m.state.run_order) do made[id] = true end
  local with_id = 0
  for _, row in ipairs(rows) do
    if row.id ~= "" then
      with_id = with_id + 1
      T.ok(made[row.id], "an id the server gave: " .. row.id)
      T.eq(row.deleted, "true")
    else
      T.eq(row.outcome, "Not created")
      T.contains(row.error, "not created")
    end
  end
  T.eq(with_id, #m.state.run_order, "every run the server made has a row with its id")
  m:close()
end)

T.case("killed while creates are in flight: kbrun report reconciles with the server, or says Unknown", function()
  metrics.clear()
  local m, _, exp = interrupted_creates("killed", 3)
  -- "killed": neither cleanup nor finish runs; the held creates land now
  for _ = 1, 100 do
    if #m.state.run_order == 5 then break end
    kb.sleep(0.02)
  end
  T.eq(#m.state.run_order, 5)
  rebuild.experiment(exp.dir)
  local rows = read_csv(exp:path("result", "runs.csv"))
  T.eq(#rows, 10)
  local by_id = {}
  for _, row in ipairs(rows) do
    if row.id ~= "" then by_id[row.id] = row end
  end
  for _, id in ipairs(m.state.run_order) do
    local row = by_id[id]
    T.ok(row, "the server's run " .. id .. " has a row")
    T.eq(row.name, m.state.runs[id].name)
    T.eq(row.outcome, "Interrupted")
  end
  T.eq(outcomes_of(rows)["Not created"], 5)
  local doc = json.decode(fs.read(exp:path("result", "result.json")))
  T.eq(doc.result.runs.created, 5)
  T.eq(doc.result.reconciled.found, 3)
  -- the server is gone: the three unanswered creates are Unknown, not "not created"
  m:close()
  rebuild.experiment(exp.dir)
  rows = read_csv(exp:path("result", "runs.csv"))
  local n = outcomes_of(rows)
  T.eq(n.Unknown, 3)
  T.eq(n.Interrupted, 2)
  T.eq(n["Not created"], 5)
  doc = json.decode(fs.read(exp:path("result", "result.json")))
  T.eq(doc.result.runs.unknown, 3)
  T.eq(doc.result.runs.created, 2)
  T.contains(doc.result.reconciled.unreachable, "connect")
  for _, row in ipairs(rows) do
    if row.outcome == "Unknown" then
      T.contains(row.error, "unknown (created? intent journaled, server unreachable")
      T.ok(row.name ~= "", "the intent's name")
    end
  end
end)

-- Last: the embedded simulator switches the scenario clock to its virtual one.
T.case("401 on polls against the simulator: the runs finish there, the storm says Unknown, not Timed out", function()
  metrics.clear()
  local kfp = require "kb.kfp"
  local SRC = os.getenv("KBRUN_SOURCE_DIR") or ".."
  -- a proxy in the storm's HTTP path: every GET of one run is refused
  local refused = 0
  local proxy = { request = function(_, req)
    if (req.method or "GET") == "GET" and req.url:match("/apis/v1beta1/runs/[^/?]+$") then
      refused = refused + 1
      return { status = 401, body = '{"code":16,"message":"Jwt is expired"}',
        headers = { ["content-type"] = "application/json" }, time = { total = 0.001 } }
    end
    return kb.http.request(req)
  end }
  local exp = new_exp("sim-401")
  local s = storm.new({ host = "", api = "v1beta1", num_runs = 10, concurrency = 5,
    pipeline_file_url = SRC .. "/scenarios/pipelines/taxi_updated_pool.yaml",
    run_status_polling_interval_sec = 30, progress = false, scrape_metrics = false },
    { exp = exp, http = proxy })
  s:create_pipeline()
  s:create_experiment()
  s:create_runs()
  capture_errors(function() s:wait_runs() end)
  -- 3 refusals stop the polls (storm.MAX_AUTH_FAILURES), plus those in flight
  T.ok(refused <= 3 + 5, "refusals: " .. refused)
  -- the server's own view: every run finishes
  local direct = kfp.client{ host = s.url, api = "v1beta1" }
  local finished = 0
  for _ = 1, 200 do
    finished = 0
    for _, run in ipairs(s.runs) do
      local r = direct:get_run(run.id)
      if r.finished then
        finished = finished + 1
        T.eq(r.state, "Succeeded")
      end
    end
    if finished == #s.runs then break end
    kb.sleep(60)
  end
  T.eq(finished, 10, "the simulator finished every run")
  s:get_runs()
  s:delete_runs()
  s:cleanup()
  local r = s:finish()
  T.eq(r.outcomes.Unknown, 10)
  T.eq(r.runs.timed_out, 0)
  T.eq(r.runs.succeeded, 0, "the storm could not see them succeed")
  T.eq(#direct:list_all_runs{ experiment_id = s.experiment.id }, 0, "cleanup deleted them")
end)

T.run()
fs.remove(tmp, { recursive = true })
