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

-- ---- rebuilt from a journal (kb.results.rebuild) ------------------------------------------------

local Rebuilt = {}
Rebuilt.__index = function(_, k)
  return Rebuilt[k] or require("kb.kfp.storm").Session[k]
end
function Rebuilt:elapsed() return self.last_t end
function Rebuilt:journal_write() end

local LATENCY_COLUMNS = { "op", "start", "latency", "status", "error_class", "error" }

local MAX_INDEX = 1000000 -- above any num_runs kb.kfp.storm accepts

-- The run record of an event: by index (journals since intents), else a
-- new one at the end.
local function run_of(s, ev)
  local i = math.tointeger(ev.index)
  if i and i >= 1 and i <= MAX_INDEX then
    for j = #s.runs + 1, i do s.runs[j] = { index = j } end
    return s.runs[i]
  end
  local run = { index = #s.runs + 1 }
  s.runs[run.index] = run
  return run
end

-- Applies one storm event of the journal to the rebuilt session.
local function absorb_event(s, ev, by_id)
  local kind = ev.event
  if kind == "start" then
    s.p, s.url, s.clock, s.started_wall = ev.params or {}, ev.url, ev.clock or { scale = 1 }, ev.wall
    s.target, s.tag, s.requested_n = ev.target, ev.tag, math.tointeger(ev.requested)
  elseif kind == "run.intent" then
    local run = run_of(s, ev)
    run.name, run.sent, run.intent_t = ev.name, true, ev.t
  elseif kind == "run.reconciled" then
    local run = run_of(s, ev)
    run.id, run.name, run.state, run.created_at, run.answered = ev.id, ev.name or run.name, ev.state,
      ev.created_at, true
    run.reconciled = "created on the server, found by name: the create's answer was lost"
    run.create_error = nil
    if ev.id then by_id[ev.id] = run end
  elseif kind == "run.dropped" then
    local run = run_of(s, ev)
    run.name, run.dropped = ev.name, true
  elseif kind == "arrivals" then
    s.arrival = { offered = math.tointeger(ev.offered) }
  elseif kind == "arrivals.start" then
    if s.arrival then s.arrival.start = ev.start end
  elseif kind == "run.unknown" then
    local run = (ev.id and by_id[ev.id]) or (ev.index and s.runs[ev.index])
    if run then run.unknown, run.unknown_reason, run.state = true, ev.error, ev.state or run.state end
  elseif kind == "storm.halted" then
    s.halted = { reason = ev.reason, error = ev.error }
  elseif kind == "delete.intent" then
    local run = ev.kind == "run" and ev.id and by_id[ev.id]
    if run then run.delete_sent = true end
  elseif kind == "deleted" then
    if ev.kind == "run" then
      local run = ev.id and by_id[ev.id]
      if run then run.deleted = true end
    end
    s.deletes[#s.deletes + 1] = { kind = ev.kind, id = ev.id, name = ev.name }
    s.gone[ev.id or ""] = true
  elseif kind == "pipeline.intent" or kind == "experiment.intent" then
    local list = kind == "pipeline.intent" and s.intents.pipelines or s.intents.experiments
    list[#list + 1] = { name = ev.name, sent = true }
  elseif kind == "pipeline.reconciled" or kind == "experiment.reconciled" then
    local list = kind == "pipeline.reconciled" and s.intents.pipelines or s.intents.experiments
    for _, it in ipairs(list) do
      if it.name == ev.name then it.id = ev.id end
    end
    if kind == "experiment.reconciled" then
      s.created.experiments[#s.created.experiments + 1] = ev.id
      s.experiment = s.experiment or { id = ev.id, name = ev.name }
    else
      s.created.pipelines[#s.created.pipelines + 1] = ev.id
    end
  elseif kind == "call" then
    s.ncalls = s.ncalls + 1
    s.calls[#s.calls + 1] = ev
    if ev.class then
      s:record_error(ev.op, ev.class, ev.error)
    else
      local list = s.samples[ev.op] or {}
      list[#list + 1] = ev.latency
      s.samples[ev.op] = list
    end
  elseif kind == "run.created" or kind == "run.create_failed" then
    local run = run_of(s, ev)
    run.id, run.name, run.state, run.created_at = ev.id, ev.name or run.name, ev.state, ev.created_at
    run.create_error, run.answered, run.maybe_created = ev.error, true, ev.maybe
    if ev.id then by_id[ev.id] = run end
  elseif kind == "run.finished" or kind == "run.timeout" then
    local run = by_id[ev.id]
    if not run then return end
    run.state = ev.state or run.state
    if kind == "run.finished" then
      run.finished, run.duration, run.observed_lag = true, ev.duration, ev.observed_lag
      if run.created_at and run.duration then run.finished_at = run.created_at + run.duration end
    else
      run.timed_out, run.timeout_reason, run.terminated = true, ev.reason, ev.terminated
    end
  elseif kind == "pipeline.created" then
    s.pipeline = s.pipeline or { id = ev.id, name = ev.name }
    s.source = s.source or { origin = ev.source }
    s.created.pipelines[#s.created.pipelines + 1] = ev.id
    for _, it in ipairs(s.intents.pipelines) do
      if it.name == ev.name then it.id = ev.id end
    end
  elseif kind == "experiment.created" then
    s.experiment = s.experiment or { id = ev.id, name = ev.name }
    s.created.experiments[#s.created.experiments + 1] = ev.id
    for _, it in ipairs(s.intents.experiments) do
      if it.name == ev.name then it.id = ev.id end
    end
  elseif kind == "cleanup" then
    s.cleaned, s.cleanup_errors = ev.cleaned, ev.errors
    s.cleanup_failures = type(ev.errors) == "table" and #ev.errors or 0
  elseif kind == "finish" then
    s.final = ev.result
  elseif kind == "storm.runs" then
    s.rows, s.rows_unstarted = ev.rows, ev.unstarted or false
  end
end

--- A storm session rebuilt from the events of a journal (records with an
-- "event" field, in order), or nil when there is no storm "start" event.
-- It has what M.result, M.run_rows and M.report_data read: the runs (in
-- the order the journal saw them created), every call, the errors. Runs
-- the storm had not created yet are counted as not created.
function M.from_journal(events, exp)
  local s = setmetatable({ exp = exp, rebuilt = true, runs = {}, errors = {}, samples = {},
    calls = {}, ncalls = 0, scrapes = {}, last_t = 0, name = "storm", planned = 0,
    created = { pipelines = {}, experiments = {} }, gone = {}, deletes = {},
    intents = { pipelines = {}, experiments = {} } }, Rebuilt)
  local by_id, started = {}, false
  for _, ev in ipairs(events) do
    if ev.event == "start" then started = true end
    if started then
      absorb_event(s, ev, by_id)
      if type(ev.t) == "number" and ev.t > s.last_t then s.last_t = ev.t end
    end
  end
  if not started then return nil end
  s.kind = s.p.num_pipelines ~= nil and "pipelines" or "runs"
  -- a record without an intent (a gap: intents journaled out of order)
  for _, run in ipairs(s.runs) do
    if not run.sent and not run.id then run.create_error = "not created: kbrun stopped before sending it" end
  end
  s.planned = s.arrival and s.arrival.offered or s.requested_n or math.tointeger(s.p.num_runs) or 0
  s.stop_reason = s.final and s.final.stop_reason or "kbrun stopped before sending it"
  s.scrape_error = "kbrun stopped before the second scrape of /metrics"
  return s
end

local function message_of(err)
  local text = type(err) == "table" and (err.message or tostring(err)) or tostring(err)
  return (text:gsub("%s+", " "))
end

-- Runs of a rebuilt storm whose create was sent (intent journaled) and whose
-- answer never came, or failed in a way that may have created the run.
local function unanswered(s)
  return require("kb.kfp.storm").unanswered(s.runs)
end

-- A KFP client on the journaled target, or nil and why there is none.
local function target_client(s)
  local t = s.target or { url = s.url, api = s.p.api, kind = s.clock and s.clock.kind }
  if t.kind == "embedded simulator" then
    return nil, "the server was kbrun's embedded simulator, which ended with it"
  end
  if type(t.url) ~= "string" or t.url == "" then return nil, "the journal does not name the server" end
  if t.token_file and fs.exists(t.token_file) ~= "file" then
    return nil, "token_file " .. t.token_file .. " is no longer there"
  end
  -- the journaled connection parameters (kb.connection.reach): the same CA,
  -- client certificate, cookie file or kubeconfig as the run
  local cp = {}
  for k, v in pairs(type(t.connection) == "table" and t.connection or {}) do cp[k] = v end
  cp.token_file, cp.namespace = t.token_file, t.namespace
  local okc, opts = pcall(require("kb.connection").kfp_options, cp, t.url)
  if not okc then return nil, message_of(opts) end
  opts.api, opts.timeout, opts.retry = t.api or "v1beta1", 10, { max_attempts = 2 }
  local ok, c = pcall(require("kb.kfp").client, opts)
  if not ok then return nil, message_of(c) end
  return c, nil, t
end

--- Reconciles a storm rebuilt from a killed run's journal with the server
-- it ran against (the journal's target): each run whose create was sent
-- but not answered is looked up by name in the storm's experiment (itself
-- found by name when its answer was lost too). A run the server holds gets
-- its id and real state; one it does not hold is Not created; when the
-- server cannot be asked, Unknown ("created? intent journaled, server
-- unreachable"). Runs the journal knows get the server's current state.
-- Creates still in flight at the kill can land a little later: the server
-- is asked again until request_timeout after the journal's last write.
function M.reconcile(s)
  local todo = unanswered(s)
  local exp_pending = {}
  for _, it in ipairs(s.intents.experiments) do
    if not it.id then exp_pending[#exp_pending + 1] = it end
  end
  if #todo == 0 and #exp_pending == 0 and #s.created.experiments == 0 then return nil end
  local c, why, t = target_client(s)
  if not c and #todo == 0 then return nil end -- nothing the server could change
  local info = { server = t and t.url or (s.target and s.target.url) or s.url, asked = c ~= nil,
    unanswered = #todo, found = 0 }
  if c then
    local jpath = s.exp:path("output", "journal.jsonl")
    local last_write = fs.exists(jpath) == "file" and fs.stat(jpath).mtime or kb.time()
    local wait = math.min(tonumber(t.request_timeout) or 30, 60)
    local deadline = kb.now() + math.max(0, last_write + wait - kb.time())
    local by_name, listed = {}, {}
    for _, run in ipairs(todo) do by_name[run.name] = run end
    while true do
      local ok, err = pcall(function()
        for _, it in ipairs(exp_pending) do
          if not it.id then
            local found = s:find_by_name(c, "list_experiments",
              (s.p.api or t.api) == "v2beta1" and "display_name" or "name", it.name)
            if found[1] then
              it.id = found[1].id
              s.created.experiments[#s.created.experiments + 1] = it.id
              s.experiment = s.experiment or { id = it.id, name = it.name }
            end
          end
        end
        for _, eid in ipairs(s.created.experiments) do
          if not s.gone[eid] then
            listed[eid] = {}
            for _, r in ipairs(c:list_all_runs{ experiment_id = eid, page_size = 200 }) do
              listed[eid][r.id] = true
              local run = r.name and by_name[r.name]
              if run then
                by_name[r.name] = nil
                run.id, run.state, run.created_at = r.id, r.state, r.created_at
                run.scheduled_at, run.finished_at = r.scheduled_at, r.finished_at
                run.reconciled = "created on the server, found by name by kbrun report: the "
                  .. "create's answer was lost (" .. (run.create_error or "kbrun stopped before it arrived") .. ")"
                run.create_error = nil
                info.found = info.found + 1
              else
                local known
                for _, x in ipairs(s.runs) do
                  if x.id == r.id then known = x break end
                end
                if known then
                  known.state = r.state -- its state now
                elseif not info.foreign_seen or not info.foreign_seen[r.id] then
                  info.foreign_seen = info.foreign_seen or {}
                  info.foreign_seen[r.id] = true
                  info.foreign = info.foreign or json.array({})
                  info.foreign[#info.foreign + 1] = { id = r.id, name = r.name, state = r.state }
                end
              end
            end
          end
        end
      end)
      if not ok then
        if kb.is_cancelled(err) then error(err, 0) end
        why = message_of(err)
        break
      end
      -- a delete sent before the kill may still land: wait for it too
      local deleting = false
      for _, run in ipairs(s.runs) do
        if run.delete_sent and not run.deleted then
          for _, ids in pairs(listed) do
            if ids[run.id] then deleting = true end
          end
        end
      end
      if (next(by_name) == nil and not deleting) or kb.now() >= deadline then break end
      kb.sleep(math.min(0.5, math.max(deadline - kb.now(), 0.01)))
    end
    info.foreign_seen = nil
    -- a run the journal knows that its experiment no longer holds was
    -- deleted: by the cleanup the kill cut short (its delete's answer, or
    -- the journal line of it, lost) or by someone else
    if not why and next(listed) then
      local all = {}
      for _, ids in pairs(listed) do
        for id in pairs(ids) do all[id] = true end
      end
      for _, run in ipairs(s.runs) do
        if run.id and not run.deleted and not all[run.id] then
          run.deleted = true
          run.gone_note = "not on the server at rebuild: deleted (by the interrupted cleanup, or by someone else)"
          info.gone = (info.gone or 0) + 1
        end
      end
    end
  end
  for _, run in ipairs(unanswered(s)) do
    if why then
      run.unknown = true
      run.unknown_reason = "unknown (created? intent journaled, server unreachable: " .. why .. ")"
    else
      run.create_error = string.format("not created: the server holds no run named %s in the "
        .. "storm's experiment (asked by kbrun report)", tostring(run.name))
      run.maybe_created = false
    end
  end
  info.unreachable = why
  if why then
    log.warn("kbrun report: could not ask %s about %d unanswered create(s): %s; those runs are "
      .. "reported Unknown", tostring(info.server), #todo, why)
  end
  s.reconciled = info
  return info
end

--- Writes what a storm leaves in result/ from a rebuilt session: runs.csv
-- (the journaled rows of a storm that finished, else rebuilt from its
-- events) and latencies.csv (every call). Returns the result table (the
-- journaled one of a storm that finished) and the report data.
function M.rebuild(s)
  local r = s.final
  if s.kind == "runs" then
    if not r then M.reconcile(s) end
    r = r or M.result(s)
    if s.final and s.deletes[1] then r.deleted_after = s.deletes end
    if s.rows then M.write_runs_csv(s, s.rows, s.rows_unstarted or nil) else M.write_runs_csv(s) end
  end
  local rows = {}
  for i, c in ipairs(s.calls) do
    rows[i] = { op = c.op, start = c.t, latency = c.latency, status = c.status,
      error_class = c.class, error = c.error }
  end
  fs.write(s.exp:path("result", "latencies.csv"), csv.encode(rows, LATENCY_COLUMNS))
  local data = s.kind == "runs" and M.report_data(s, r) or { samples = s.samples }
  return r, data
end

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

-- ---- report.html sections ------------------------------------------------------------

local function esc(v) return require("kb.report.svg").escape(tostring(v)) end

-- A table cell: durations with the unit that keeps 1-3 digits (the plots'
-- units: "31.2 min", "140 ms"), other floats to 4 significant digits.
local function cell(v, unit)
  if v == nil or v == json.null then return "-" end
  if type(v) == "number" and unit == "s" then return esc(require("kb.report.svg").format_value(v, "s")) end
  if type(v) == "number" and math.type(v) == "float" then return esc(string.format("%.4g", v)) end
  return esc(v)
end

-- An HTML table: header list and rows of already escaped cells; row.class
-- marks a row (e.g. "fail", shown in red).
local function html_table(header, rows)
  local out = { '<table class="grid">', "<thead><tr>" }
  for _, h in ipairs(header) do out[#out + 1] = "<th>" .. esc(h) .. "</th>" end
  out[#out + 1] = "</tr></thead><tbody>"
  for _, row in ipairs(rows) do
    out[#out + 1] = row.class and ('<tr class="' .. row.class .. '">') or "<tr>"
    for _, c in ipairs(row) do out[#out + 1] = "<td>" .. c .. "</td>" end
    out[#out + 1] = "</tr>"
  end
  out[#out + 1] = "</tbody></table>"
  return table.concat(out)
end

local function runs_section(r)
  if type(r.runs) ~= "table" then return nil end
  local rows = {}
  for _, o in ipairs(OUTCOMES) do
    if (r.outcomes[o] or 0) > 0 then rows[#rows + 1] = { esc(o), cell(r.outcomes[o]) } end
  end
  local states_rows = {}
  for _, st in ipairs(require("kb.kfp.common").sorted_keys(r.states)) do
    states_rows[#states_rows + 1] = { esc(st), cell(r.states[st]) }
  end
  local d, l = r.durations, r.observed_lag
  local html = '<div class="side">' .. html_table({ "outcome", "runs" }, rows)
    .. html_table({ "Last KFP state of each run", "runs" }, states_rows) .. "</div>"
    .. html_table({ "", "count", "min", "p50", "p90", "p99", "max" }, {
      { "run duration (succeeded, finished_at - created_at)", cell(d.count), cell(d.min, "s"),
        cell(d.p50, "s"), cell(d.p90, "s"), cell(d.p99, "s"), cell(d.max, "s") },
      { "observed lag (poll that saw the end - finished_at)", cell(l.count), cell(l.min, "s"),
        cell(l.p50, "s"), cell(l.p90, "s"), cell(l.p99, "s"), cell(l.max, "s") } })
  return { title = "Runs", html = html }
end

local function server_section(r)
  local sm = r.server_metrics
  if sm and sm.source == "prometheus" then return require("kb.kfp.prom_query").report_section(r) end
  if not sm or not sm.available then
    return { title = "Server-side vs client-side", html = "<p class=\"muted\">No server metrics: "
      .. esc(sm and sm.reason or "not scraped") .. "</p>" }
  end
  local rows = {}
  for _, row in ipairs(r.server_vs_client or {}) do
    local c, sv = row.client or {}, row.server or {}
    rows[#rows + 1] = { esc(row.op), cell(c.count), cell(c.p50, "s"), cell(c.p99, "s"),
      cell(c.other_calls), esc(sv.method or "-"), cell(sv.count), cell(sv.mean, "s"),
      cell(sv.p50, "s"), cell(sv.p99, "s"), cell(sv.errors) }
  end
  return { title = "Server-side vs client-side", html = "<p>Client: kbrun's timed calls "
    .. "(round trip). Server: <code>grpc_server_handling_seconds</code> between the scrapes "
    .. "before and after (every call, polls and cleanup included; p50/p99 interpolated in "
    .. "its buckets).</p>" .. html_table({ "op", "client calls", "client p50", "client p99",
      "polls/cleanup calls", "gRPC method", "server calls", "server mean", "server p50 (est.)",
      "server p99 (est.)", "server errors" }, rows) }
end

local function calibration_section(r)
  if type(r.comparison) ~= "table" or #r.comparison == 0 then return nil end
  local rows = {}
  for _, c in ipairs(r.comparison) do
    rows[#rows + 1] = { esc(c.label), cell(c.published, c.unit), cell(c.measured, c.unit),
      c.diff and esc(string.format("%+.1f%%", 100 * c.diff)) or "-",
      c.within and "yes" or "<b>no</b>", class = (not c.within) and "fail" or nil }
  end
  local tol = r.comparison[1].tolerance or 0
  return { title = "Calibration", html = string.format("<p>This run next to the 50-run result "
    .. "published with KFP's benchmark scripts (kubeflow/website, benchmark-examples; figures "
    .. "read off its plots). Within: |measured - published| ≤ %.0f%% of published.</p>", 100 * tol)
    .. html_table({ "figure", "published", "measured", "difference", "within" }, rows) }
end

local function errors_section(r)
  if (r.error_count or 0) == 0 then return nil end
  local rows = {}
  for _, class in ipairs(require("kb.kfp.common").sorted_keys(r.errors)) do
    local e = r.errors[class]
    local ops = {}
    for _, op in ipairs(require("kb.kfp.common").sorted_keys(e.ops)) do
      ops[#ops + 1] = op .. " ×" .. e.ops[op]
    end
    local samples = {}
    for _, m in ipairs(e.samples) do samples[#samples + 1] = "<code>" .. esc(m) .. "</code>" end
    rows[#rows + 1] = { esc(class), cell(e.count), esc(table.concat(ops, ", ")),
      table.concat(samples, "<br>") }
  end
  return { title = "Errors", html = html_table({ "class", "count", "ops", "sample messages" }, rows) }
end

--- Options for kb.report from a result document: the notebook's plot
-- order and the storm's sections (runs, server vs client, calibration,
-- errors). Use as a scenario's `report` field.
function M.report(doc)
  local r = type(doc) == "table" and type(doc.result) == "table" and doc.result or nil
  local opts = { order = { "run.create", "run.duration", "run.get", "run.delete", "run.list",
    "run.observed_lag" } }
  if not r then return opts end
  local sections = {}
  -- what a reader looks for first: how the runs ended, how this run
  -- compares with the published one, server- vs client-side figures
  for _, make in ipairs({ runs_section, calibration_section, server_section, errors_section }) do
    local sec = make(r)
    if sec then sections[#sections + 1] = sec end
  end
  opts.sections = sections
  return opts
end

return M
