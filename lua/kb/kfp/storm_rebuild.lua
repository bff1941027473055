--- kb.kfp.storm_rebuild: the part of kb.kfp.storm_report that rebuilds
-- what a storm leaves behind from its journal (kb.results.rebuild, `kbrun
-- report` of a killed run): a session rebuilt from the journal's events,
-- reconciled with the server it ran against, and its result/ files
-- written again (docs/storm.md, "Every run accounted for"). kb.kfp.storm_report's
-- from_journal, reconcile and rebuild are these.
local kb = require "kb"
local fs = require "kb.fs"
local csv = require "kb.csv"
local json = require "kb.json"
local log = require "kb.log"
local sr = require "kb.kfp.storm_report"

local M = {}


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
-- It has what storm_report's result, run_rows and report_data read: the runs (in
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
    r = r or sr.result(s)
    if s.final and s.deletes[1] then r.deleted_after = s.deletes end
    if s.rows then sr.write_runs_csv(s, s.rows, s.rows_unstarted or nil) else sr.write_runs_csv(s) end
  end
  local rows = {}
  for i, c in ipairs(s.calls) do
    rows[i] = { op = c.op, start = c.t, latency = c.latency, status = c.status,
      error_class = c.class, error = c.error }
  end
  fs.write(s.exp:path("result", "latencies.csv"), csv.encode(rows, LATENCY_COLUMNS))
  local data = s.kind == "runs" and sr.report_data(s, r) or { samples = s.samples }
  return r, data
end

return M
