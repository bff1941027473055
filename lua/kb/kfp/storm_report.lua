--- kb.kfp.storm_report: what a run storm leaves behind (docs/storm.md):
-- the result table (result.json's "result"), result/runs.csv, the data and
-- sections of report.html, the experiment's row of <out>/kfp-storm-report.csv, the
-- live progress line and the summary printed at the end.
local kb = require "kb"
local fs = require "kb.fs"
local csv = require "kb.csv"
local json = require "kb.json"
local log = require "kb.log"
local metrics = require "kb.metrics"
local states = require "kb.kfp.states"

local M = {}

local OUTCOMES = { "Succeeded", "Failed", "Timed out", "Unknown", "Not created", "Dropped", "Lost",
  "Terminated", "Interrupted" }
M.OUTCOMES = OUTCOMES -- in their order in tables (kb.kfp.storm_sections too)

-- ---- small statistics --------------------------------------------------------------

--- Summary of a list of numbers: {count, min, p50, p90, p99, max, mean};
-- percentiles by nearest rank. {count = 0} for an empty list.
function M.stats(list)
  local v = {}
  for i, x in ipairs(list) do v[i] = x end
  if #v == 0 then return { count = 0 } end
  table.sort(v)
  local function rank(q) return v[math.max(1, math.ceil(q * #v))] end
  local sum = 0
  for _, x in ipairs(v) do sum = sum + x end
  return { count = #v, min = v[1], p50 = rank(0.5), p90 = rank(0.9), p99 = rank(0.99),
    max = v[#v], mean = sum / #v }
end

local function hist_summary(name)
  local h, kind = metrics.get(name)
  if kind ~= "histogram" then return nil end
  local s = h:summary()
  return s.count > 0 and s or nil
end

-- ---- the result table --------------------------------------------------------------

local function tally(s)
  local storm = require "kb.kfp.storm"
  local outcomes, by_state = {}, {}
  local durations, lags = {}, {}
  for _, run in ipairs(s.runs) do
    local o = storm.outcome(run)
    outcomes[o] = (outcomes[o] or 0) + 1
    local st = run.id and (run.state or "Unknown") or (o == "Dropped" and o or "Not created")
    by_state[st] = (by_state[st] or 0) + 1
    if o == "Succeeded" and run.duration then durations[#durations + 1] = run.duration end
    if run.observed_lag then lags[#lags + 1] = run.observed_lag end
  end
  local tail = s:unstarted()
  if tail then
    local n = tail.last - tail.first + 1
    outcomes["Not created"] = (outcomes["Not created"] or 0) + n
    by_state["Not created"] = (by_state["Not created"] or 0) + n
  end
  return outcomes, by_state, durations, lags
end

local function error_table(s)
  local out, total = {}, 0
  for class, e in pairs(s.errors) do
    out[class] = { count = e.count, ops = e.ops, samples = e.samples }
    total = total + e.count
  end
  return out, total
end

--- The result of a storm: runs {requested, created, succeeded, failed,
-- timed_out, not_created, interrupted, deleted}, outcomes, states (last
-- KFP state per run), success_rate, errors {[class] = {count, ops,
-- samples}}, error_count, durations and observed_lag (stats of succeeded
-- runs' finished_at - created_at and of every finished run's lag),
-- server_metrics, server_vs_client, clock, target, pipeline, experiment,
-- cleanup, elapsed (cluster s), calls.
function M.result(s)
  local outcomes, by_state, durations, lags = tally(s)
  local errors, nerr = error_table(s)
  local n = s:requested()
  local runs = {
    requested = n,
    created = s:count(function(r) return r.id ~= nil end),
    succeeded = outcomes.Succeeded or 0, failed = outcomes.Failed or 0,
    timed_out = outcomes["Timed out"] or 0, not_created = outcomes["Not created"] or 0,
    terminated = outcomes.Terminated or 0, interrupted = outcomes.Interrupted or 0,
    deleted = s:count(function(r) return r.deleted end),
  }
  -- only when there are any, so the table stays as it was otherwise
  runs.lost, runs.unknown, runs.dropped = outcomes.Lost, outcomes.Unknown, outcomes.Dropped
  local server = s:server_metrics()
  return {
    runs = runs, outcomes = outcomes, states = by_state,
    success_rate = n > 0 and runs.succeeded / n or 0,
    errors = errors, error_count = nerr,
    durations = M.stats(durations), observed_lag = M.stats(lags),
    server_metrics = server, server_vs_client = M.server_vs_client(server),
    clock = s.clock,
    target = { url = s.url, api = s.p.api, simulator = s.sim ~= nil or s.remote_sim ~= nil },
    pipeline = s.pipeline and { id = s.pipeline.id, name = s.pipeline.name,
      source = s.source and s.source.origin } or nil,
    experiment = s.experiment and { id = s.experiment.id, name = s.experiment.name } or nil,
    cleanup = s.cleaned and { deleted = s.cleaned, failures = s.cleanup_failures or 0,
      errors = s.cleanup_errors, stopped = s.cleanup_stopped } or nil,
    halted = s.halted, stop_reason = s.stop_reason, reconciled = s.reconciled,
    elapsed = s:elapsed(), calls = s.ncalls,
    -- the open model (arrival_rate, stages): offered vs achieved
    load = require("kb.kfp.storm_arrivals").summary(s),
  }
end

local CLIENT_OPS = { "run.create", "run.get", "run.list", "run.delete", "run.terminate",
  "pipeline.create", "pipeline.upload", "pipeline.get", "pipeline.delete",
  "pipeline_version.create", "pipeline_version.upload", "pipeline_version.get",
  "pipeline_version.list", "pipeline_version.delete", "experiment.create", "experiment.delete" }

--- Rows comparing client-side latency (the ops' histograms; status polls
-- and cleanup calls, "poll."/"aux.", counted with them) with the server's
-- grpc_server_handling_seconds for the same gRPC method.
function M.server_vs_client(server)
  local rows = json.array({})
  for _, op in ipairs(CLIENT_OPS) do
    local client = hist_summary(op)
    local srv = server.available and server.grpc[op] or nil
    if client or srv then
      local extra = 0
      for _, prefix in ipairs({ "poll.", "aux." }) do
        local h = hist_summary(prefix .. op)
        extra = extra + (h and h.count or 0)
      end
      rows[#rows + 1] = {
        op = op,
        client = client and { count = client.count, p50 = client.p50, p90 = client.p90,
          p99 = client.p99, other_calls = extra } or nil,
        server = srv and { method = srv.method, count = srv.count, mean = srv.mean, p50 = srv.p50,
          p90 = srv.p90, p99 = srv.p99, errors = srv.errors } or nil,
      }
    end
  end
  return rows
end

--- Compares measured figures with published ones: reference is a list of
-- {label, metric (a histogram or "durations"), stat, published, unit}.
-- Returns rows {label, published, measured, diff (relative), within}.
function M.compare(result, reference, tolerance)
  local rows = json.array({})
  for _, ref in ipairs(reference) do
    local source = ref.metric == "durations" and result.durations or hist_summary(ref.metric) or {}
    local measured = source[ref.stat]
    local diff = measured and (measured - ref.published) / ref.published or nil
    rows[#rows + 1] = { label = ref.label, metric = ref.metric, stat = ref.stat,
      published = ref.published, measured = measured, diff = diff, unit = ref.unit or "s",
      within = diff ~= nil and math.abs(diff) <= tolerance, tolerance = tolerance,
      source = ref.source }
  end
  return rows
end

-- ---- files -------------------------------------------------------------------------

local RUN_COLUMNS = { "index", "id", "name", "state", "outcome", "created_at", "scheduled_at",
  "finished_at", "duration", "observed_lag", "error", "deleted" }

local function time_text(t) return t and states.format_time(t) or nil end

local function run_error(run)
  if run.unknown and not run.finished then return run.unknown_reason end
  if run.create_error and not run.id then return run.create_error end
  if run.timed_out then return run.timeout_reason end
  local e = run.server_error or (not run.finished and run.poll_error) or nil
  for _, note in ipairs({ run.reconciled, run.gone_note }) do
    e = e and (note .. "; " .. e) or note
  end
  return e
end

--- The rows of result/runs.csv: one per run, in creation order.
function M.run_rows(s)
  local storm = require "kb.kfp.storm"
  local rows = {}
  for i, run in ipairs(s.runs) do
    local outcome = storm.outcome(run)
    rows[i] = { index = run.index, id = run.id, name = run.name,
      state = run.id and (run.state or "Unknown")
        or ((outcome == "Unknown" or outcome == "Dropped") and outcome or "Not created"),
      outcome = outcome,
      created_at = time_text(run.created_at), scheduled_at = time_text(run.scheduled_at),
      finished_at = time_text(run.finished_at), duration = run.duration,
      observed_lag = run.observed_lag, error = run_error(run), deleted = run.deleted and true or nil }
  end
  return rows
end

--- The CSV text of the runs never sent (s:unstarted()): one "Not created"
-- row each, with the reason; "" when there are none.
function M.unstarted_text(tail)
  if not tail then return "" end
  local out, row = {}, {}
  for i = tail.first, tail.last do
    row[1], row[4], row[5], row[11] = i, "Not created", "Not created", tail.reason
    row.n = #RUN_COLUMNS
    out[#out + 1] = csv.encode_row(row) .. "\n"
  end
  return table.concat(out)
end

--- result/runs.csv (rows: M.run_rows(s) unless given), then a row per run
-- never sent. Also journaled (event "storm.runs", the runs never sent as a
-- range) so that kbrun report rebuilds the same file.
function M.write_runs_csv(s, rows, tail)
  rows = rows or M.run_rows(s)
  if tail == nil then tail = s:unstarted() end
  fs.write(s.exp:path("result", "runs.csv"), csv.encode(rows, RUN_COLUMNS) .. M.unstarted_text(tail))
  if not s.rebuilt then
    s:journal_write{ event = "storm.runs", rows = json.array(rows), unstarted = tail }
  end
end

local function p50(name) local h = hist_summary(name) return h and h.p50 end
local function p99(name) local h = hist_summary(name) return h and h.p99 end

--- The storms' report in the experiments folder: one row per storm,
-- apart from Kubebench's report.csv (its own documented columns).
M.REPORT_CSV = "kfp-storm-report.csv"

--- How a storm ended, for its report row (never empty): "interrupted"
-- (Ctrl-C / SIGTERM), "succeeded" (every requested run succeeded),
-- "stopped" (the storm stopped early: its timeout, a failing step),
-- "failed" (some run failed, timed out, was not created or is unknown).
-- The storm's own outcome: thresholds decide result.json's status later.
function M.report_status(s, r)
  local runs = r.runs or {}
  if require("kb.core").pending_signal() or (r.outcomes and (r.outcomes.Interrupted or 0) > 0)
      or (s.stop_reason and s.stop_reason:find("interrupted", 1, true)) then
    return "interrupted"
  end
  if (runs.requested or 0) > 0 and runs.succeeded == runs.requested then return "succeeded" end
  if s.stop_reason then return "stopped" end
  return "failed"
end

--- Appends the experiment's row to <out>/kfp-storm-report.csv (M.REPORT_CSV,
-- shared by every storm in the out folder; columns are added as needed,
-- under a lock).
function M.write_report_row(s, r)
  local row = {
    experiment_id = s.exp.id, scenario = s.name, status = M.report_status(s, r),
    started_at = os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(s.started_wall)),
    host = s.url, api = s.p.api, clock = s.clock.kind, num_runs = r.runs.requested,
    concurrency = s.p.concurrency, created = r.runs.created, succeeded = r.runs.succeeded,
    failed = r.runs.failed, timed_out = r.runs.timed_out, not_created = r.runs.not_created,
    unknown = r.runs.unknown or 0, lost = r.runs.lost or 0, success_rate = r.success_rate, duration_p50 = r.durations.p50, lag_p50 = r.observed_lag.p50,
    run_create_p50 = p50("run.create"), run_create_p99 = p99("run.create"),
    run_get_p50 = p50("run.get"), run_get_p99 = p99("run.get"),
    run_delete_p50 = p50("run.delete"), run_list_p50 = p50("run.list"), errors = r.error_count,
  }
  local header = { "experiment_id", "scenario", "status", "started_at", "host", "api", "clock", "num_runs",
    "concurrency", "created", "succeeded", "failed", "timed_out", "not_created", "unknown", "lost",
    "success_rate",
    "duration_p50", "lag_p50", "run_create_p50", "run_create_p99", "run_get_p50", "run_get_p99",
    "run_delete_p50", "run_list_p50", "errors" }
  local w = csv.writer(fs.join(s.exp.out, M.REPORT_CSV), header, { extend = true, lock = true })
  w:write(row)
  w:close()
end

--- Hands the raw samples (every timed op, run.duration, run.observed_lag)
-- and the outcome counts to kb.report for report.html.
function M.attach_report(s, r)
  require("kb.report").attach(M.report_data(s, r))
end

--- The report data of a session: {samples = {[op] = latencies, ...},
-- outcomes}.
function M.report_data(s, r)
  local samples = {}
  for op, list in pairs(s.samples) do samples[op] = list end
  local durations, lags = {}, {}
  for _, run in ipairs(s.runs) do
    if run.duration and run.finished and run.state == "Succeeded" and not run.timed_out then
      durations[#durations + 1] = math.max(run.duration, 0)
    end
    if run.observed_lag then lags[#lags + 1] = math.max(run.observed_lag, 0) end
  end
  if #durations > 0 then samples["run.duration"] = durations end
  if #lags > 0 then samples["run.observed_lag"] = lags end
  return { samples = samples, outcomes = r.outcomes }
end

-- ---- rebuilt from a journal (kb.results.rebuild): kb.kfp.storm_rebuild -------------

--- A storm session rebuilt from the events of a journal, or nil when there
-- is no storm "start" event (kb.kfp.storm_rebuild.from_journal).
function M.from_journal(events, exp) return require("kb.kfp.storm_rebuild").from_journal(events, exp) end

--- Reconciles a storm rebuilt from a killed run's journal with the server
-- it ran against (kb.kfp.storm_rebuild.reconcile).
function M.reconcile(s) return require("kb.kfp.storm_rebuild").reconcile(s) end

--- Writes what a storm leaves in result/ from a rebuilt session; returns
-- the result table and the report data (kb.kfp.storm_rebuild.rebuild).
function M.rebuild(s) return require("kb.kfp.storm_rebuild").rebuild(s) end

--- Everything finish() writes; failures of one output never lose the others.
function M.write(s, r)
  local steps = {
    { "summary", function() M.print_summary(s, r) end },
  }
  if s.exp then
    table.insert(steps, 1, { "runs.csv", function() M.write_runs_csv(s) end })
    table.insert(steps, 2, { "report data", function() M.attach_report(s, r) end })
    table.insert(steps, 3, { M.REPORT_CSV, function() M.write_report_row(s, r) end })
  end
  for _, step in ipairs(steps) do
    local ok, err = pcall(step[2])
    if not ok then log.warn("storm: %s: %s", step[1], tostring(err)) end
  end
end

-- ---- terminal ----------------------------------------------------------------------

local function quiet()
  local level = log.level()
  return level == "warn" or level == "error"
end

local function stdout_is_tty()
  return os.getenv("TERM") ~= "dumb" and os.execute("[ -t 1 ]") == true
end

local Progress = {}
Progress.__index = Progress

--- The live progress line of a session: redrawn in place on a TTY
-- (progress = "auto" or true), otherwise milestone lines in the log.
function M.progress(s)
  local mode = s.p.progress
  local tty = not quiet() and (mode == true or (mode == "auto" and stdout_is_tty()))
  return setmetatable({ s = s, tty = tty, shown = false, quarter = 0, last = 0 }, Progress)
end

function Progress:line()
  local s = self.s
  local created = s:count(function(r) return r.id ~= nil end)
  local finished = s:count(function(r) return r.finished and not r.timed_out end)
  local ok = s:count(function(r) return r.finished and r.state == "Succeeded" and not r.timed_out end)
  local timed_out = s:count(function(r) return r.timed_out end)
  return string.format("runs: %d/%d created, %d running, %d finished (%d succeeded, %d failed), "
    .. "%d timed out | %.0f s", created, s:requested(), created - finished - timed_out, finished, ok,
    finished - ok, timed_out, s:elapsed())
end

--- Redraws the line (at most 10 times a real second) or logs each
-- quarter of the runs finished.
function Progress:update()
  if self.tty then
    local now = kb.time()
    if now - self.last < 0.1 then return end
    self.last, self.shown = now, true
    io.stdout:write("\r\27[K", self:line())
    io.stdout:flush()
    return
  end
  -- counted at most once a real second: the count walks every run
  local now = kb.time()
  if now - (self.counted or -math.huge) < 1 then return end
  self.counted = now
  local s = self.s
  local total = s:requested()
  local done = s:count(function(r) return r.finished or r.timed_out end)
  local quarter = total > 0 and math.floor(4 * done / total) or 0
  if quarter > self.quarter and done > 0 then
    self.quarter = quarter
    log.info("storm: %s", self:line())
  end
end

--- A one-off message (e.g. "50 of 50 runs created").
function Progress:milestone(text)
  if self.tty and self.shown then
    io.stdout:write("\r\27[K")
    io.stdout:flush()
  end
  log.info("storm: %s", text)
  self.shown = false
end

--- Ends the line.
function Progress:done()
  if self.tty then
    io.stdout:write("\r\27[K", self:line(), "\n")
    io.stdout:flush()
    self.shown = false
  else
    self.counted = nil -- the last quarter is logged, however soon it came
    self:update()
  end
end

local function seconds(v)
  if v == nil then return "-" end
  if v < 1 then return string.format("%.0f ms", v * 1000) end
  return string.format("%.1f s", v)
end

--- Prints the per-outcome table (counts and run durations) to stdout.
function M.print_summary(s, r)
  if quiet() then return end
  local by = {}
  for _, run in ipairs(s.runs) do
    local o = require("kb.kfp.storm").outcome(run)
    by[o] = by[o] or {}
    if run.duration then by[o][#by[o] + 1] = run.duration end
  end
  local lines = { "", string.format("  %-12s %6s %12s %12s %12s", "runs", "count", "duration p50",
    "min", "max") }
  for _, o in ipairs(OUTCOMES) do
    local n = r.outcomes[o] or 0
    if n > 0 or o == "Succeeded" or o == "Failed" then
      local st = M.stats(by[o] or {})
      lines[#lines + 1] = string.format("  %-12s %6d %12s %12s %12s", o, n, seconds(st.p50),
        seconds(st.min), seconds(st.max))
    end
  end
  lines[#lines + 1] = string.format("  observed lag p50 %s, max %s; %d API errors; success rate %.1f%%",
    seconds(r.observed_lag.p50), seconds(r.observed_lag.max), r.error_count, 100 * r.success_rate)
  io.stdout:write(table.concat(lines, "\n"), "\n")
end

-- ---- report.html sections: kb.kfp.storm_sections ------------------------------------

--- Options for kb.report from a result document: the notebook's plot
-- order and the storm's sections (runs, server vs client, calibration,
-- errors). Use as a scenario's `report` field.
function M.report(doc) return require("kb.kfp.storm_sections").report(doc) end

return M
