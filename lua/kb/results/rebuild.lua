--- kb.results.rebuild: an experiment's result files rebuilt from its journal alone
-- (output/journal.jsonl, written by kbrun's runner as the run goes; the
-- records are described in docs/results.md).
--
--   local rebuild = require "kb.results.rebuild"
--   if rebuild.needed(dir) then rebuild.experiment(dir) end   -- what `kbrun report` does
--   local state = rebuild.replay(records)   -- the metrics and events of a journal
--
-- A run killed with SIGKILL never writes result/result.json; its journal
-- holds every measurement up to the last flush. experiment(dir) replays it
-- and writes, each atomically: result/result.json (status "killed" unless
-- the journal ends with the runner's "end" record; metrics exactly as the
-- registry held them at the last flush; its time series as they stood
-- then, also as result/timeseries.csv), for a KFP run storm
-- result/runs.csv and result/latencies.csv (from its events), and
-- result/report.html.
local fs = require "kb.fs"
local hist = require "kb.hist"
local journal = require "kb.journal"
local metrics = require "kb.metrics"

local M = {}

local function journal_path(dir) return fs.join(dir, "output", "journal.jsonl") end
local function result_path(dir) return fs.join(dir, "result", "result.json") end

--- Does `dir` need a rebuild? True (and why) when it has a journal and
-- result/result.json is missing or older than the journal's last write.
function M.needed(dir)
  local j = journal_path(dir)
  if fs.exists(j) ~= "file" then return false end
  local r = result_path(dir)
  if fs.exists(r) ~= "file" then return true, "no result/result.json" end
  -- close_journal runs before result.json is written: equal times (a
  -- coarse clock tick) mean up to date
  if fs.stat(r).mtime < fs.stat(j).mtime then return true, "result/result.json is older than the journal" end
  return false
end

-- ---- replay -------------------------------------------------------------------

local Value = {}
Value.__index = Value
function Value:value() return self.n end

local function define(st, r)
  if st.entries[r.m] then return end
  local metric
  if r.kind == "histogram" then
    metric = hist.new(r.layout)
  elseif r.kind == "counter" or r.kind == "gauge" then
    metric = setmetatable({ n = 0 }, Value)
  else
    st.problems[#st.problems + 1] = "unknown metric kind " .. tostring(r.kind)
    return
  end
  st.entries[r.m] = { key = r.m, name = r.name, labels = r.labels or {}, kind = r.kind, metric = metric }
end

local function apply(st, r)
  local k = r.k
  if k == "def" then return define(st, r) end
  if k == "reset" then
    for _, e in pairs(st.entries) do
      if e.kind == "histogram" then e.metric:reset() else e.metric.n = 0 end
    end
    return
  end
  if k == "clear" then st.entries = {} return end
  local e = st.entries[r.m]
  if not e then
    st.orphans = st.orphans + 1 -- its definition was lost (cut journal)
    return
  end
  local h = e.metric
  if k == "h" then
    local unit, counts = h:layout().lowest, r.n
    for i, u in ipairs(r.u or {}) do h:record(u * unit, counts and counts[i] or 1) end
  elseif k == "hc" then h:record_corrected(r.v, r.i, r.n)
  elseif k == "hm" then h:merge(hist.decode(r.e))
  elseif k == "hr" then h:reset()
  elseif k == "c" then h.n = h.n + r.d
  elseif k == "g" then h.n = r.v
  end
end

--- Replays journal records (in order). Returns {begin, params, ["end"],
-- speed (last clock speed other than 1, or nil), last_t (scenario seconds
-- of the last measurement), metrics (a kb.metrics snapshot), events
-- (records with an "event" field), orphans (measurements of metrics never
-- defined), problems, timeseries (kb.timeseries' rows as journaled, or nil)}.
function M.replay(records)
  local st = { entries = {}, events = {}, orphans = 0, problems = {}, last_t = 0 }
  for _, r in ipairs(records) do
    local k = r.k
    if r.event ~= nil and k == nil then
      st.events[#st.events + 1] = r
    elseif k == "begin" then st.begin = r
    elseif k == "params" then st.params = r
    elseif k == "end" then st["end"] = r
    elseif k == "clock" then
      if r.speed ~= 1 then st.speed = r.speed end
      if r.mode == "events" then st.events_clock = true end
    elseif k == "ts" or k == "ts_start" then -- kb.timeseries' rows: M.replay's second pass
      st.has_timeseries = true
    elseif k ~= nil then
      local ok, err = pcall(apply, st, r)
      if not ok then st.problems[#st.problems + 1] = string.format("%s %s: %s", k, tostring(r.m), tostring(err)) end
      if type(r.t) == "number" and r.t > st.last_t then st.last_t = r.t end
    end
  end
  local list = {}
  for _, e in pairs(st.entries) do list[#list + 1] = e end
  table.sort(list, function(a, b) return a.key < b.key end)
  st.metrics = metrics.snapshot_of(list)
  st.timeseries = st.has_timeseries and require("kb.timeseries").replay(records) or nil
  return st
end

-- ---- the result document ------------------------------------------------------

-- The experiment folder `dir` as an object like kb.experiment's (its id
-- is the folder's name, whatever it is).
local Folder = {}
Folder.__index = Folder
function Folder:path(folder, name) return fs.join(self.dir, folder, name) end
function Folder:write_json(folder, name, value)
  local path = self:path(folder, name)
  fs.write(path, require("kb.secrets").encode_json(value, { pretty = true }) .. "\n") -- scrubbed (docs/security.md)
  return path
end

local function experiment_of(dir)
  return setmetatable({ id = fs.basename(dir), dir = dir, config_dir = fs.join(dir, "config"),
    output_dir = fs.join(dir, "output"), result_dir = fs.join(dir, "result"),
    out = fs.dirname(dir) }, Folder)
end

--- The result document of a replayed journal (as kb.runner writes it;
-- `rebuilt` tells where it came from).
function M.document(st, info)
  local b, p, e = st.begin or {}, st.params or {}, st["end"]
  local doc = {
    kbrun = b.kbrun,
    experiment_id = b.experiment_id,
    scenario = { name = p.name or (b.scenario and b.scenario.name), file = b.scenario and b.scenario.file },
    status = e and e.status or "killed",
    exit_code = e and e.exit_code or nil,
    error = e and e.error or "kbrun stopped before writing its results (killed?); rebuilt from its journal",
    started_at = b.started_at,
    finished_at = e and e.finished_at or nil,
    duration = e and e.duration or st.last_t,
    clock = e and e.clock or (st.events_clock and { kind = "virtual", mode = "events", speed = 1 })
      or { kind = st.speed and "virtual" or "real", speed = st.speed or 1 },
    seed = b.seed,
    shard = b.shard,
    params = p.params or b.params,
    environment = b.environment,
    metrics = st.metrics,
    timeseries = st.timeseries,
    client = e and e.client or nil,
    rebuilt = info,
  }
  return doc
end

--- The thresholds of the replayed run (journaled with its parameters),
-- judged as kb.runner judges them: against the metrics as the journal
-- last held them and run()'s result (journaled at its end; a storm's
-- rebuilt from its events; a killed run's unknown, so its result checks
-- have no value). nil when the run declared none; an empty list
-- (the reason among the rebuild's problems) when they cannot be evaluated,
-- as kb.runner leaves it.
function M.thresholds(st, doc)
  local spec = st.params and st.params.thresholds
  if type(spec) ~= "table" then return nil end
  -- doc.result: the end record's (json.null when run() returned nothing),
  -- a storm's rebuilt one, or nil when the run was killed
  local result = type(doc.result) == "table" and doc.result or nil
  local ok, checks = pcall(require("kb.thresholds").evaluate, spec, doc.metrics, result,
    { result_unknown = doc.result == nil })
  if ok then return checks end
  st.problems[#st.problems + 1] = "thresholds: " .. tostring(checks)
  return {}
end

--- Rebuilds the result files of the experiment folder `dir` from its
-- journal (see above). Returns the path of report.html and the document.
-- Raises when there is no journal.
function M.experiment(dir)
  local path = journal_path(dir)
  if fs.exists(path) ~= "file" then
    error(string.format("kb.results.rebuild: '%s' has no journal (output/journal.jsonl)", dir), 2)
  end
  local records, skipped = journal.read(path)
  local st = M.replay(records)
  local exp = experiment_of(dir)
  local sr = require "kb.kfp.storm_report"
  local session = sr.from_journal(st.events, exp)
  if not st.begin and #st.metrics.metrics == 0 and not session then
    error(string.format("kb.results.rebuild: %s holds no kbrun run records", path), 2)
  end
  fs.mkdir(exp.result_dir)
  local doc = M.document(st, { from = "output/journal.jsonl", records = #records, skipped = skipped,
    orphans = st.orphans > 0 and st.orphans or nil,
    problems = #st.problems > 0 and st.problems or nil,
    at = os.date("!%Y-%m-%dT%H:%M:%SZ") })
  local opts = {}
  local e = st["end"]
  if session then
    local result, data = sr.rebuild(session)
    doc.result = result
    opts = M.report_options(doc)
    -- a finished storm left its data in output/report-data.json
    if fs.exists(fs.join(exp.output_dir, "report-data.json")) ~= "file" then
      opts.samples, opts.outcomes = data.samples, data.outcomes
    end
  end
  -- a run that ended journaled run()'s result as it returned it
  if e and e.result ~= nil then doc.result = e.result end
  doc.thresholds = M.thresholds(st, doc)
  doc.rebuilt.problems = #st.problems > 0 and st.problems or nil
  exp:write_json("result", "result.json", doc)
  if doc.timeseries then
    fs.write(fs.join(exp.result_dir, "timeseries.csv"), require("kb.timeseries").csv(doc.timeseries))
  end
  return require("kb.report").write(dir, doc, opts), doc
end

--- kb.report options for a result document kbrun cannot get from the
-- scenario file (a rebuild, `kbrun report`): a KFP run storm's sections.
function M.report_options(doc)
  local r = type(doc) == "table" and doc.result
  if type(r) == "table" and type(r.runs) == "table" and type(r.outcomes) == "table" then
    return require("kb.kfp.storm_report").report(doc)
  end
  return {}
end

return M
