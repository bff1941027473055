--- kb.kfp.storm: the run storm of KFP's benchmark notebook
-- (tools/benchmarks/run_service_api.ipynb), step by step, with the
-- improvements a benchmark needs. docs/storm.md is the reference.
--
--   local storm = require "kb.kfp.storm"
--   local s = storm.new(p)               -- p: the scenario's parameters (storm.params)
--   s:scrape_metrics("before")           -- the server's /metrics
--   s:create_pipeline()                  -- notebook step 1 (pipeline_file_url)
--   s:create_experiment()                -- step 2
--   s:create_runs()                      -- step 3, timed: run.create
--   s:wait_runs()                        -- step 4: poll until finished or timed out
--   s:get_runs()                         -- step 5, timed: run.get
--   s:delete_runs()                      -- step 6, timed: run.delete
--   s:cleanup()                          -- steps 7-8 and whatever is left; idempotent
--   s:scrape_metrics("after")
--   return s:finish()                    -- runs.csv, report data, kfp-storm-report.csv; the result
--
-- Improvements over the notebook, each on by default and switchable:
-- bounded client concurrency (`concurrency`; 1 = the notebook's sequential
-- calls), polling every pending run each interval (`poll_all`; the notebook
-- stops at the first unfinished run), ListRuns latency each poll
-- (`measure_list`), a global and a per-run timeout (`timeout`,
-- `run_timeout`: timed-out runs are terminated and counted), a cleanup that
-- always runs and works on KFP 2.x (cascading pipeline deletes), the lag
-- between a run's finished_at and the poll that saw it, and /metrics
-- scraped before and after (`scrape_metrics`). `notebook = true` turns the
-- improvements off at once.
--
-- Every requested run is accounted for (docs/storm.md, "Outcomes"): each
-- create's intent (name) is journaled and flushed before it is sent, so a
-- create whose answer is lost (truncated, interrupted, killed) is found by
-- name on the server, by reconcile_runs, by cleanup and by `kbrun report`
-- (kb.kfp.storm_report.reconcile); polls refused or failing stop after a
-- few rounds and leave the runs Unknown, never Timed out.
--
-- Time parameters are cluster seconds. Against the embedded simulator the
-- scenario clock is the simulator's virtual clock; against a standalone
-- simulator (`kbrun sim`) they are scaled by its speed.
local kb = require "kb"
local kfp = require "kb.kfp"
local target = require "kb.target"
local log = require "kb.log"
local metrics = require "kb.metrics"
local prom = require "kb.kfp.prom"
local states = require "kb.kfp.states"
local connection = require "kb.connection"
local arrivals = require "kb.kfp.storm_arrivals"

local M = {}

--- The parameters of a run storm and their defaults. A scenario takes
-- these (with its own defaults) through storm.params{...}. The connection
-- parameters (ca_file, client_cert, client_key, insecure, token_file,
-- cookie_file, header, request_timeout, proxy, namespace, kubeconfig,
-- context, ...) are kb.connection's, shared by every bundled scenario.
M.DEFAULTS = connection.params {
  host = "",                              -- "" or "sim": the embedded simulator
  api = "v1beta1",                        -- the notebook's API; or v2beta1
  pipeline_file_url = "",                 -- local path or http(s) URL
  pipeline_params = "",                   -- run parameters: JSON or YAML mapping (text)
  num_runs = 5,
  run_status_polling_interval_sec = 60,
  concurrency = 10,                       -- client requests in flight (1 = notebook)
  timeout = 7200,                         -- the whole storm, cluster seconds (0 = none)
  run_timeout = 3600,                     -- one run, from its creation (0 = none)
  poll_all = true,                        -- poll every pending run each interval
  tracking = "poll",                      -- poll: a GET per pending run each interval; list: ListRuns of the unfinished, a GET where a state changed
  measure_list = true,                    -- ListRuns of the experiment each interval
  scrape_metrics = true,                  -- the server's /metrics before and after
  prometheus_url = "",                    -- server figures from Prometheus instead (docs/observability.md)
  progress = "auto",                      -- live line: auto (on a TTY), true, false
  retry = true,                           -- retry transient API failures (kb.retry)
  retry_max_attempts = 5,                 -- attempts per call, the first included
  retry_budget_ratio = 0.2,               -- retries allowed per call (plus 10), per client
  notebook = false,                       -- true: all improvements off (concurrency 1, ...)
}
-- runs at a rate (the open model): arrival_rate, arrival, duration, stages,
-- max_in_flight, on_full (kb.kfp.storm_arrivals)
for k, v in pairs(arrivals.DEFAULTS) do M.DEFAULTS[k] = v end

--- storm.params(overrides) -> a copy of M.DEFAULTS with the scenario's
-- own defaults (and extra parameters) merged in.
function M.params(overrides)
  local out = {}
  for k, v in pairs(M.DEFAULTS) do out[k] = v end
  for k, v in pairs(overrides or {}) do out[k] = v end
  return out
end

local Session = {}
Session.__index = Session
M.Session = Session

-- The Session's other parts add their methods to it, and kb.kfp.storm's
-- functions of their concern to M: kb.kfp.storm_setup (the parameters,
-- the clocks, the pipeline and the experiment), kb.kfp.storm_record (every
-- call recorded, the journal), kb.kfp.storm_wait (polling until the runs
-- end, the notebook's final GETs and deletes) and kb.kfp.storm_cleanup.
-- They require this module while it loads, so it is registered first.
package.loaded["kb.kfp.storm"] = M
local setup = require "kb.kfp.storm_setup"
local record = require "kb.kfp.storm_record"
local wait = require "kb.kfp.storm_wait"
require "kb.kfp.storm_cleanup"
local bad_param, normalize = setup.bad_param, setup.normalize
local message_of, absorb = record.message_of, wait.absorb

-- ---- construction -----------------------------------------------------------------

local tags_used = {} -- storms per experiment id in this process

local function client_opts(self, prefix)
  local p = self.p
  -- host (or kubeconfig's service proxy), TLS, token_file, cookie_file,
  -- header, namespace, request_timeout: kb.connection
  local o = connection.kfp_options(p, self.url)
  o.api, o.metrics_prefix, o.http = p.api, prefix, self.opts.http
  o.retry = p.retry and { max_attempts = p.retry_max_attempts,
    budget = { ratio = p.retry_budget_ratio } }
  return o
end

--- storm.new(params [, opts]) -> a session. params as M.DEFAULTS; opts:
-- exp (the experiment, default kb.exp), name (for kfp-storm-report.csv), kind
-- ("runs", or "pipelines" for the steps of kb.kfp.storm_pipelines),
-- base_dir (where relative pipeline paths are also looked up), http (a
-- kb.http client-like object for the KFP clients), keep_calls (keep every
-- call in s.calls), sim (options of the embedded simulator).
-- Three clients share the server: s.c (the notebook's timed calls),
-- s.poller (status polls, histograms "poll.*") and s.aux (scrapes and
-- cleanup, "aux.*"), so run.get holds the notebook's final GETs only.
function M.new(params, opts)
  opts = opts or {}
  local p = normalize(params)
  local self = setmetatable({ p = p, opts = opts, exp = opts.exp or rawget(kb, "exp"),
    name = opts.name or "storm", t0 = kb.now(), started_wall = kb.time(), runs = {},
    created = { pipelines = {}, experiments = {} }, gone = {}, errors = {}, samples = {}, calls = {},
    ncalls = 0, keep_calls = opts.keep_calls, scrapes = {}, planned = 0,
    intents = { pipelines = {}, experiments = {} } }, Session)
  -- run names are <tag>-r0001...: unique per storm and index, so a run
  -- whose create answer was lost is found on the server by its name
  self.tag = self.exp and self.exp.id or ("storm-" .. M.rand10())
  tags_used[self.tag] = (tags_used[self.tag] or 0) + 1
  if tags_used[self.tag] > 1 then self.tag = self.tag .. "-" .. tags_used[self.tag] end
  self.kind = opts.kind or "runs"
  if self.kind == "pipelines" and p.load then
    bad_param("arrival_rate and stages create runs at a rate: a pipeline storm takes num_pipelines")
  end
  if self.kind == "pipelines" then require("kb.kfp.storm_pipelines").setup(self) end
  if p.kubeconfig ~= "" then
    -- KFP through the API server's service proxy, as kfp.Client() with no host
    if not target.is_sim(p.host) then bad_param("give host= or kubeconfig=, not both") end
    self.url = connection.kubeconfig_target(p)
  else
    self.url, self.sim = target.resolve(p.host, opts.sim)
  end
  self:setup_clock()
  self:open_outputs()
  self.c = self:instrument(kfp.client(client_opts(self, "")))
  self.poller = self:instrument(kfp.client(client_opts(self, "poll.")))
  self.aux = self:instrument(kfp.client(client_opts(self, "aux.")))
  self.progress = require("kb.kfp.storm_report").progress(self)
  require("kb.kfp.prom_query").publish(self) -- runs by state for --metrics-listen, kb.live
  -- the target, so that `kbrun report` can reconcile with the server
  -- (never a secret: token_file is a path, read again there)
  self:journal_write{ event = "start", url = self.url, api = p.api, clock = self.clock,
    params = p, wall = self.started_wall, tag = self.tag,
    -- the runs this storm is asked for (this shard's part of num_runs)
    requested = self.kind == "runs" and p.num_runs and require("kb.shard").size(p.num_runs, "runs") or nil,
    target = { url = self.url, api = p.api, namespace = p.namespace ~= "" and p.namespace or nil,
      token_file = p.token_file ~= "" and p.token_file or nil, kind = self.clock.kind,
      request_timeout = p.request_timeout,
      -- how to reach it again: CA, client certificate, cookie file, kubeconfig (paths, flags)
      connection = connection.reach(p) } }
  log.info("storm: %s (%s, %s), %s, concurrency %d", self.url, p.api, self.clock.kind,
    self.kind == "pipelines" and (p.num_pipelines .. " pipelines") or (p.num_runs .. " runs"),
    p.concurrency)
  return self
end

-- ---- server metrics ---------------------------------------------------------------

--- Scrapes the server's /metrics (label "before" / "after"); a server
-- without /metrics is noted, not fatal. Returns the parsed scrape or nil.
function Session:scrape_metrics(label)
  if not self.p.scrape_metrics then return nil end
  local ok, text = pcall(self.aux.request, self.aux,
    { op = "metrics.get", path = "/metrics", root = true, raw = true })
  if not ok then
    if kb.is_cancelled(text) then error(text, 0) end
    self.scrape_error = message_of(text)
    log.warn("storm: no server metrics (%s)", self.scrape_error)
    return nil
  end
  local scrape = prom.parse(text)
  self.scrapes[label] = scrape
  return scrape
end

--- The server-side figures between the "before" and "after" scrapes:
-- { available, grpc = {[op] = {count, mean, p50, p90, p99, codes, errors}},
-- handlers = {run_server_create_requests = n, ...}, gauges = {...} }.
function Session:server_metrics()
  -- prometheus_url: the run's window from Prometheus (kb.kfp.prom_query)
  if self.p.prometheus_url ~= "" then return require("kb.kfp.prom_query").server_metrics(self) end
  local a, b = self.scrapes.before, self.scrapes.after
  if not (a and b) then
    return { available = false, reason = self.scrape_error
      or (self.p.scrape_metrics and "not scraped twice" or "scrape_metrics = false") }
  end
  local gauges = {}
  for _, g in pairs(prom.gauges(a, b)) do
    if next(g.labels) == nil then gauges[g.name] = { before = g.before, after = g.after } end
  end
  return { available = true, grpc = prom.grpc(a, b), handlers = prom.handler_counters(a, b),
    gauges = gauges }
end

-- ---- runs -------------------------------------------------------------------------

--- The name of run number i: <tag>-r0007, unique per storm and index
-- (notebook = true: the notebook's run-<rand10>; either way journaled
-- before the create is sent).
function Session:run_name(i)
  if self.p.notebook then return "run-" .. M.rand10() end
  return string.format("%s-r%04d", self.tag, i)
end

-- One CreateRun. Its intent (index, name) is journaled first; a run whose
-- answer never arrives (cancelled, killed) stays unanswered and is found by
-- name later (reconcile_runs, cleanup, kbrun report).
function Session:create_one(run)
  local p, pl = self.p, self.pipeline
  run.sent = kb.now()
  self:journal_intent{ event = "run.intent", index = run.index, name = run.name, t = self:elapsed() }
  local ok, r = pcall(self.c.create_run, self.c, { name = run.name,
    experiment_id = self.experiment and self.experiment.id,
    pipeline_id = pl.id, pipeline_version_id = pl.default_version_id, params = p.run_params,
    status_only = true })
  if not ok then
    if kb.is_cancelled(r) then error(r, 0) end
    run.answered = true
    run.create_error = message_of(r)
    run.maybe_created = M.may_have_created(r)
    self:journal_write{ event = "run.create_failed", index = run.index, name = run.name,
      error = run.create_error, maybe = run.maybe_created }
    return
  end
  run.answered = true
  self:set_created(run, r)
  self:journal_write{ event = "run.created", index = run.index, id = r.id, name = run.name,
    t = self:elapsed(), state = r.state, created_at = r.created_at }
end

-- A run the server holds (a create's answer, or found by name).
function Session:set_created(run, r)
  run.id, run.t_created = r.id, run.t_created or kb.now()
  run.create_error = nil
  absorb(run, r)
  arrivals.created(self, run)
end

-- Runs (of list) without an id whose create may have made one on the server.
--- The creates of `list` (runs, or the intents of pipelines and
-- experiments) that were sent and have no id: no answer came, or a failure
-- that may still have made the object. kb.kfp.storm_report uses it too.
function M.unanswered(list)
  local out = {}
  for _, x in ipairs(list) do
    if not x.id and x.sent and (not x.answered or x.maybe_created) then out[#out + 1] = x end
  end
  return out
end

--- Looks the runs of `list` whose create may have made one (a failure that
-- was not the server's refusal: a timeout, a truncated answer, an
-- interrupted call) up by name in the storm's experiments, and takes the
-- ones the server holds: their id and real state. client: default s.aux.
-- Returns the number found, or nil and the error when listing failed.
function Session:reconcile_runs(list, client)
  local todo = M.unanswered(list or self.runs)
  if #todo == 0 then return 0 end
  local c = client or self.aux
  local by_name = {}
  for _, run in ipairs(todo) do by_name[run.name] = run end
  local found = 0
  for _, eid in ipairs(self.created.experiments) do
    if not self.gone[eid] then
      local ok, items = pcall(c.list_all_runs, c, { experiment_id = eid, page_size = 200 })
      if not ok then
        if kb.is_cancelled(items) then error(items, 0) end
        return nil, items
      end
      for _, r in ipairs(items) do
        local run = r.name and by_name[r.name]
        if run and not run.id then
          self:set_created(run, r)
          run.reconciled = "created on the server, found by name: the create's answer was lost ("
            .. (run.create_error or "kbrun stopped before it arrived") .. ")"
          by_name[r.name], found = nil, found + 1
          self:journal_write{ event = "run.reconciled", index = run.index, id = r.id, name = run.name,
            state = r.state, created_at = r.created_at, t = self:elapsed() }
        end
      end
    end
  end
  for _, run in pairs(by_name) do
    if run.answered then run.maybe_created = false end -- looked for, not there
  end
  return found
end

--- Creates n runs (default num_runs) of s.pipeline in s.experiment, at
-- most `concurrency` requests in flight (notebook step 3, timed:
-- run.create). A failed create is recorded, not raised; after the global
-- timeout the remaining runs are not created. Returns the new run records.
function Session:create_runs(n)
  assert(self.pipeline, "kb.kfp.storm: create_pipeline() before create_runs()")
  -- arrival_rate / stages: created at their arrival times (kb.kfp.storm_arrivals)
  if n == nil and self.p.load then return arrivals.create_runs(self) end
  -- sharded (kb.shard, kbrun --shard I/N): this shard's part of num_runs
  n = n or require("kb.shard").size(self.p.num_runs, "runs")
  self.planned = self.planned + n
  -- a record only for a run about to be sent (pool:spawn waits for a
  -- slot), so memory follows the runs started; the rest are counted
  -- (s.planned) and written as not created by finish()
  local pool, made = kb.pool(self.p.concurrency), {}
  local ok, err = pcall(function()
    for _ = 1, n do
      if self:expired() then
        self.stop_reason = self.stop_reason or "the global timeout passed"
        break
      end
      local run = { index = #self.runs + 1 }
      run.name = self:run_name(run.index)
      self.runs[run.index], made[#made + 1] = run, run
      pool:spawn(self.create_one, self, run)
      self.progress:update()
    end
    pool:wait()
  end)
  -- a record made while waiting for a pool slot but never sent is dropped:
  -- that run is one of the runs never sent (s:unstarted())
  while #self.runs > 0 and not self.runs[#self.runs].sent do
    self.runs[#self.runs] = nil
    if made[#made] and not made[#made].sent then made[#made] = nil end
  end
  if not ok then
    if kb.is_cancelled(err) then
      self.stop_reason = self.stop_reason or "kbrun was interrupted"
      -- the creates in flight go with the storm (their answers are lost;
      -- cleanup and kbrun report find the runs by name)
      for _, t in ipairs(pool.tasks or {}) do pcall(t.cancel, t) end
    end
    error(err, 0)
  end
  if #M.unanswered(made) > 0 then self:reconcile_runs(made) end
  self.progress:milestone(string.format("%d of %d runs created", self:count(function(r)
    return r.id ~= nil end, made), n))
  return made
end

--- Number of runs (of `list`, default all) for which fn(run) is true.
function Session:count(fn, list)
  local n = 0
  for _, r in ipairs(list or self.runs) do
    if fn(r) then n = n + 1 end
  end
  return n
end

--- The outcome of a run: Succeeded, Failed (finished otherwise), Timed out,
-- Not created, Unknown (its state could not be read: polls refused or
-- failing, or a rebuild could not reach the server to learn whether an
-- unanswered create made it), Lost (the server answered 404 for it: see Session:lose),
-- Terminated (stopped by terminate_runs, as the probe does), or
-- Interrupted (still running when the storm stopped), Dropped (an arrival
-- of the open model over max_in_flight: never sent).
function M.outcome(run)
  if run.dropped then return "Dropped" end
  if not run.id then return run.unknown and "Unknown" or "Not created" end
  if run.lost and not run.finished then return "Lost" end
  if run.unknown and not run.finished then return "Unknown" end
  if run.timed_out then return "Timed out" end
  if run.finished then return run.state == "Succeeded" and "Succeeded" or "Failed" end
  if run.terminated then return "Terminated" end
  return "Interrupted"
end

M.is_finished = states.is_finished

--- storm.compare(result, reference, tolerance) -> rows comparing measured
-- figures with published ones (see kb.kfp.storm_report.compare).
function M.compare(...) return require("kb.kfp.storm_report").compare(...) end

--- storm.report(doc) -> kb.report options (plot order, sections): use as a
-- scenario's `report` field.
function M.report(doc) return require("kb.kfp.storm_report").report(doc) end

-- Counters of the storm's three clients (prefixes "", "poll.", "aux."),
-- summed over the prefixes: {[op] = {[label] = n}} for the label given.
local function client_counters(name, label)
  local out, total = {}, 0
  for _, _, e in metrics.each("counter") do
    for _, prefix in ipairs({ "", "poll.", "aux." }) do
      if e.name == prefix .. name then
        local op = prefix .. (e.labels.op or "-")
        local row = out[op] or {}
        local key = label and e.labels[label] or "n"
        row[key] = (row[key] or 0) + e.metric:value()
        out[op] = row
        total = total + e.metric:value()
      end
    end
  end
  return out, total
end

--- Adds what the retry policy did (result.retries) and the lost runs
-- (result.runs.lost, when there are any) to a result.
function Session:add_retry_figures(r)
  -- only when there are any, so the runs table stays as it was otherwise
  if r.runs and r.outcomes and r.outcomes.Lost then r.runs.lost = r.outcomes.Lost end
  if r.runs and r.outcomes and r.outcomes.Unknown then r.runs.unknown = r.outcomes.Unknown end
  local by_op, total = client_counters("kfp.retries", "reason")
  local exhausted, nexhausted = client_counters("kfp.retry_budget_exhausted")
  local recovered, nrecovered = client_counters("kfp.recovered")
  r.retries = { enabled = self.p.retry, total = total, by_op = by_op,
    budget_exhausted = nexhausted, budget_exhausted_by_op = exhausted,
    recovered = nrecovered, recovered_by_op = recovered }
end

--- The number of runs requested: every run create_runs was asked for
-- (num_runs when the storm stopped before its first create_runs).
function Session:requested()
  local n = math.max(self.planned, #self.runs)
  if n == 0 and self.kind == "runs" then
    -- the open model: the arrivals of its schedule (this shard's)
    n = self.p.load and #require("kb.load").shard_times(self.p.load, "runs")
      or require("kb.shard").size(self.p.num_runs or 0, "runs")
  end
  return n
end

--- The runs requested but never sent (no record is kept for them): the
-- indexes #s.runs + 1 .. s:requested(), and why they were not created.
function Session:unstarted()
  local first, last = #self.runs + 1, self:requested()
  if last < first then return nil end
  return { first = first, last = last, reason = "not created: "
    .. (self.stop_reason or "the storm ended before creating it") }
end

--- Writes runs.csv, hands the samples and outcomes to the report, appends
-- the experiment's row to <out>/kfp-storm-report.csv, prints the summary and returns
-- the result table for result.json (see storm_report.result). Idempotent.
function Session:finish()
  if self.result then return self.result end
  -- the report reads it; a call after this (none in the notebook's
  -- steps) is written at once
  if self.latencies then self.latencies:set_buffered(false) end
  local out = require(self.kind == "pipelines" and "kb.kfp.storm_pipelines" or "kb.kfp.storm_report")
  self.result = out.result(self)
  self:add_retry_figures(self.result)
  -- how the server was reached (insecure=true is recorded here; never a secret)
  self.result.connection = connection.describe(self.p, self.url)
  out.write(self, self.result)
  self:journal_write{ event = "finish", result = self.result }
  return self.result
end

return M