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
local json = require "kb.json"
local yaml = require "kb.yaml"
local fs = require "kb.fs"
local log = require "kb.log"
local metrics = require "kb.metrics"
local csv = require "kb.csv"
local journal = require "kb.journal"
local core = require "kb.core"
local prom = require "kb.kfp.prom"
local states = require "kb.kfp.states"
local track = require "kb.kfp.storm_track"
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

-- ---- parameters -------------------------------------------------------------------

local function bad(fmt, ...)
  error("kb.kfp.storm: " .. string.format(fmt, ...), 0)
end

-- A bad parameter value is the user's mistake: one message, exit 2, no
-- traceback (kb.params.refuse).
local function bad_param(fmt, ...)
  require("kb.params").refuse("kb.kfp.storm: " .. fmt, ...)
end

local function check_int(p, name, min, max)
  local v = type(p[name]) == "number" and math.tointeger(p[name]) or nil
  if v == nil or v < min or (max and v > max) then
    local got = math.tointeger(p[name]) and string.format("%d", math.tointeger(p[name])) or tostring(p[name])
    if max then bad_param("%s must be an integer from %d to %d, got %s", name, min, max, got) end
    bad_param("%s must be an integer >= %d, got %s", name, min, tostring(p[name]))
  end
  p[name] = v
end

--- Bounds of num_runs and concurrency (docs/storm.md): a storm keeps a
-- record per run it starts and writes a row per requested run, so a typo
-- like num_runs=1e12 is refused before any request.
M.MAX_RUNS = 100000
M.MAX_CONCURRENCY = 10000

local function check_number(p, name, min, strict)
  local v = p[name]
  if type(v) ~= "number" or v ~= v or v < min or (strict and v == min) then
    bad_param("%s must be a number %s %g, got %s", name, strict and ">" or ">=", min, tostring(v))
  end
end

local function flag(v, name)
  if v == true or v == "true" or v == "on" or v == "yes" then return true end
  if v == false or v == "false" or v == "off" or v == "no" then return false end
  bad_param("%s must be true or false, got %s", name, tostring(v))
end

--- Decodes pipeline_params: a table, or JSON / YAML text of a mapping of
-- parameter names to values ("" = none).
function M.decode_params(v)
  if type(v) == "table" then return v end
  if v == nil or v == "" then return {} end
  if type(v) ~= "string" then bad_param("pipeline_params must be a JSON or YAML mapping, got %s", type(v)) end
  if v:match("^table: 0x") then
    bad_param("pipeline_params: give the mapping as JSON or YAML text (pipeline_params: '{\"a\": 1}')")
  end
  local ok, doc = pcall(yaml.decode, v, { name = "pipeline_params" })
  if not ok or type(doc) ~= "table" or (#doc > 0) then
    bad_param("pipeline_params must be a JSON or YAML mapping of name: value, got %q%s", v,
      ok and "" or (" (" .. tostring(doc) .. ")"))
  end
  return doc
end

-- A checked copy of the parameters; `notebook = true` switches the
-- improvements off.
local function normalize(params)
  local p = M.params(params)
  for k, v in pairs(p) do -- a declaration {default =, secret =} not overridden
    if type(v) == "table" and v.default ~= nil and getmetatable(v) == nil then p[k] = v.default end
  end
  p.notebook = flag(p.notebook, "notebook")
  if p.notebook then
    p.concurrency, p.poll_all, p.measure_list, p.scrape_metrics = 1, false, false, false
    p.timeout, p.run_timeout = 0, 0
  end
  check_int(p, "num_runs", 1, M.MAX_RUNS)
  check_int(p, "concurrency", 1, M.MAX_CONCURRENCY)
  check_number(p, "run_status_polling_interval_sec", 0, true)
  check_number(p, "timeout", 0)
  check_number(p, "run_timeout", 0)
  for _, name in ipairs({ "poll_all", "measure_list", "scrape_metrics", "retry" }) do
    p[name] = flag(p[name], name)
  end
  check_int(p, "retry_max_attempts", 1)
  check_number(p, "retry_budget_ratio", 0)
  check_number(p, "request_timeout", 0, true)
  if p.progress ~= "auto" then p.progress = flag(p.progress, "progress") end
  if p.notebook then p.tracking = "poll" end
  if p.tracking ~= "poll" and p.tracking ~= "list" then
    bad_param("tracking must be poll or list, got %s", tostring(p.tracking))
  end
  if p.api ~= "v1beta1" and p.api ~= "v2beta1" then
    bad_param("api must be v1beta1 or v2beta1, got %s", tostring(p.api))
  end
  p.run_params = M.decode_params(p.pipeline_params)
  p.load = arrivals.options(p) -- nil: the closed mode
  connection.protect(p) -- header= stays <redacted> in the journal's copy
  return p
end

-- ---- names and clocks -------------------------------------------------------------

local ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"

--- Ten random lower-case letters and digits, as the notebook names things
-- ('run-' + 10 characters); from the kernel, so a repeated --seed never
-- reuses a name on a real server.
function M.rand10()
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(10) or tostring(kb.time()):rep(2)
  if f then f:close() end
  local out = {}
  for i = 1, 10 do
    local b = (bytes:byte(i) or math.random(0, 255)) % #ALPHABET + 1
    out[i] = ALPHABET:sub(b, b)
  end
  return table.concat(out)
end

-- A standalone simulator answers GET /sim/v1/status with its clock; a KFP
-- server answers 404. No credentials are sent.
local function probe_remote_sim(url)
  local ok, r = pcall(kb.http.get, url .. "/sim/v1/status", { timeout = 10 })
  if not ok or r.status ~= 200 then return nil end
  local okd, st = pcall(json.decode, r.body)
  if okd and type(st) == "table" and tonumber(st.sim_time) and tonumber(st.speed) then
    st.t_local = kb.now()
    return st
  end
  return nil
end

-- The server's clock (epoch seconds in the timestamps it writes) and the
-- cluster seconds per scenario-clock second.
function Session:setup_clock()
  if self.sim then
    local sim = self.sim
    self.clock = { kind = "embedded simulator", mode = core.clock_kind(), speed = sim.speed, scale = 1 }
    self.server_now = function() return sim.epoch + sim:now() end
    return
  end
  local st = probe_remote_sim(self.url)
  if st then
    local scale = st.speed / core.clock_speed()
    self.clock = { kind = "standalone simulator", speed = st.speed, scale = scale }
    self.server_now = function()
      return (st.epoch or 0) + st.sim_time + (kb.now() - st.t_local) * scale
    end
    self.remote_sim = st
    return
  end
  self.clock = { kind = "server", scale = 1 }
  self.server_now = kb.time
end

--- Cluster seconds since the storm started.
function Session:elapsed()
  return (kb.now() - self.t0) * self.clock.scale
end

--- Sleeps `seconds` of cluster time.
function Session:sleep(seconds)
  kb.sleep(seconds / self.clock.scale)
end

--- True once the global timeout has passed.
function Session:expired()
  return self.p.timeout > 0 and self:elapsed() >= self.p.timeout
end

-- ---- recording every call ---------------------------------------------------------

local function message_of(err)
  local text = type(err) == "table" and (err.message or tostring(err)) or tostring(err)
  text = text:gsub("%s+", " ")
  return #text > 300 and (text:sub(1, 300) .. "...") or text
end

--- Records an error of class `class` during `op` (kept with up to three
-- sample messages per class).
function Session:record_error(op, class, message)
  local e = self.errors[class]
  if not e then
    e = { count = 0, ops = {}, samples = json.array({}) }
    self.errors[class] = e
  end
  e.count = e.count + 1
  e.ops[op] = (e.ops[op] or 0) + 1
  if #e.samples < 3 then e.samples[#e.samples + 1] = message end
end

-- One timed call: a row of latencies.csv, a journal line, its sample.
function Session:record_call(op, t0, latency, status, err)
  local class = err and (type(err) == "table" and err.class or "lua") or nil
  local message = err and message_of(err) or nil
  local call = { op = op, start = t0 - self.t0, latency = latency, status = status,
    class = class, error = message }
  self.ncalls = self.ncalls + 1
  if self.keep_calls then self.calls[#self.calls + 1] = call end
  if self.latencies then
    self.latencies:write{ op, call.start, latency, status, class, message }
  end
  self:journal_write{ event = "call", op = op, t = call.start, latency = latency,
    status = status, class = class, error = message }
  if err then
    self:record_error(op, class, message)
    if class == "auth" then self:note_auth(op, err) end
  else
    local list = self.samples[op] or {}
    list[#list + 1] = latency
    self.samples[op] = list
  end
end

-- Wraps a client's request so every call is recorded as it happens, with
-- the latency kb.kfp records in its histograms.
function Session:instrument(c)
  local inner = c.request
  local session = self
  c.request = function(client, req)
    local t0 = kb.now()
    local ok, doc, resp = pcall(inner, client, req)
    if not ok and kb.is_cancelled(doc) then error(doc, 0) end
    local status = ok and resp and resp.status or (type(doc) == "table" and doc.status or nil)
    -- what kb.kfp records: the logical call (resp.elapsed: every attempt's
    -- kb.http time.total plus the retry delays; against the simulator
    -- time.total counts only the modelled hold as virtual time)
    local latency = ok and resp and (resp.elapsed or resp.time and resp.time.total) or kb.now() - t0
    session:record_call(client.metrics_prefix .. req.op, t0, latency, status, not ok and doc or nil)
    if not ok then error(doc, 0) end
    return doc, resp
  end
  return c
end

--- Appends an event to output/journal.jsonl (when there is an experiment).
function Session:journal_write(record)
  if self.journal then self.journal:write(record) end
end

--- Journals what the storm is about to ask the server to create, and hands
-- it to the kernel before the request is sent: a kill -9 after this line
-- can lose the answer but never the name, so `kbrun report` and cleanup
-- can find the object on the server (docs/storm.md, "Every run accounted
-- for").
function Session:journal_intent(record)
  if not self.journal then return end
  self.journal:write(record)
  local ok, err = pcall(self.journal.flush, self.journal)
  if not ok then log.warn("storm: journal: %s", message_of(err)) end
end

--- Names an authentication failure on stderr the first time an op meets
-- one: the op, the status, the server's message and what to check.
function Session:note_auth(op, err)
  self.auth_noted = self.auth_noted or {}
  if self.auth_noted[op] then return end
  self.auth_noted[op] = true
  local p = self.p
  log.error("storm: %s was refused by %s: HTTP %s%s. Check the credentials: token_file (%s) must "
    .. "hold a valid, unexpired token with access to %s; behind the Kubeflow gateway, cookie_file "
    .. "(%s) a current session cookie and header= the user (kubeflow-userid: ...); through "
    .. "kubeconfig=, the kubeconfig's user and its expiry", op, self.url,
    tostring(type(err) == "table" and err.status or "?"),
    type(err) == "table" and err.server_message and (": " .. err.server_message) or "",
    p.token_file ~= "" and p.token_file or "none given",
    p.namespace ~= "" and ("namespace " .. p.namespace) or "the KFP API",
    p.cookie_file ~= "" and p.cookie_file or "none given")
end

-- ---- construction -----------------------------------------------------------------

local LATENCY_HEADER = { "op", "start", "latency", "status", "error_class", "error" }

function Session:open_outputs()
  local exp = self.exp
  if not exp then return end
  self.journal = journal.open(exp:path("output", "journal.jsonl"))
  self.latencies = csv.writer(exp:path("result", "latencies.csv"), LATENCY_HEADER)
end

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

-- ---- the pipeline -----------------------------------------------------------------

-- fn() for a step before the runs (pipeline, experiment): a failure or an
-- interruption is kept as the reason why the runs were not created, then
-- raised. intent.answered: the create's answer (or its failure) arrived.
function Session:before_runs(step, fn, intent)
  local ok, v = pcall(fn)
  if intent then
    intent.answered = ok or not kb.is_cancelled(v)
    intent.maybe_created = not ok and M.may_have_created(v)
  end
  if ok then return v end
  if not self.stop_reason then
    self.stop_reason = kb.is_cancelled(v) and ("kbrun was interrupted while " .. step)
      or (step .. " failed: " .. message_of(v))
  end
  error(v, 0)
end

--- True when a failed create may still have made the object: anything but
-- the server's refusal (a 4xx answer) or a Lua error before sending.
function M.may_have_created(err)
  if type(err) ~= "table" then return false end
  if kb.is_cancelled(err) then return true end
  local st = tonumber(err.status)
  if st and st >= 400 and st < 500 and st ~= 408 then return false end
  return err.class ~= nil and err.class ~= "usage" and err.class ~= "security"
end

-- Fetches an http(s) URL as the server would, following redirects with a
-- warning: a KFP server does not follow them (the docs warn that
-- storage.cloud.google.com links redirect to a login page).
local function fetch_pipeline(url)
  local r = kb.http.get(url, { follow_redirects = true, timeout = 60 })
  local final = r.url or url
  if (r.redirects or 0) > 0 then
    log.warn("storm: pipeline_file_url %s redirects to %s; using the final URL "
      .. "(a KFP server does not follow redirects)", url, (final:gsub("[?#].*$", "")))
  end
  if r.status ~= 200 then
    bad("pipeline_file_url %s: HTTP %d", url, r.status)
  end
  if r.body:match("^%s*<") then
    bad("pipeline_file_url %s returned an HTML page, not a pipeline (a login page? use a "
      .. "public https://storage.googleapis.com/... URL or a local file)", final)
  end
  return final, r.body
end

local function local_path(self, u)
  local path = u:gsub("^file://", "")
  if not fs.exists(path) and self.opts.base_dir and path:sub(1, 1) ~= "/" then
    local alt = fs.join(self.opts.base_dir, path)
    if fs.exists(alt) then path = alt end
  end
  if fs.exists(path) ~= "file" then
    bad("pipeline_file_url: no such file '%s' (give a local path or an http(s) URL)", u)
  end
  return fs.abspath(path)
end

--- Where the pipeline comes from: {url = } (the server downloads it, as in
-- the notebook), {path = } (uploaded) or {content =, filename = }.
-- A local file inside the embedded simulator's pipeline folder (the
-- scenario's) goes to it as a file:// URL (CreatePipeline, like the
-- notebook) and is uploaded to anything else; an http(s) file is fetched
-- here and uploaded to a simulator (the result does not hang on its fetch).
function Session:pipeline_source()
  if self.source then return self.source end
  local u = self.p.pipeline_file_url
  if u == "" then bad("pipeline_file_url is required (a local path or an http(s) URL)") end
  local src
  if u:match("^[Hh][Tt][Tt][Pp][Ss]?://") then
    local final, content = fetch_pipeline(u)
    if self.sim or self.remote_sim then
      src = { content = content, filename = (final:match("([^/?#]+)%.ya?ml") or "pipeline") .. ".yaml",
        origin = final }
    else
      src = { url = final, origin = final }
    end
  else
    local path = local_path(self, u)
    -- the embedded simulator reads local files from its pipeline folder only
    -- (docs/security.md); anything else gets the file uploaded
    local prefix = target.pipeline_dir and (target.pipeline_dir:gsub("/+$", "") .. "/")
    if self.sim and prefix and path:sub(1, #prefix) == prefix then
      src = { url = "file://" .. path, origin = path }
    else
      src = { path = path, origin = path }
    end
  end
  self.source = src
  return src
end

--- Creates a pipeline from pipeline_file_url (notebook step 1): timed as
-- pipeline.create (from a URL) or pipeline.upload (a local file sent to a
-- real server). Returns the normalised pipeline (also s.pipeline).
function Session:create_pipeline(name)
  local src = self:pipeline_source()
  name = name or ("pipeline-" .. M.rand10())
  local intent = { name = name, sent = kb.now() }
  self.intents.pipelines[#self.intents.pipelines + 1] = intent
  self:journal_intent{ event = "pipeline.intent", name = name, t = self:elapsed() }
  local pl = self:before_runs("creating the pipeline", function()
    if src.url then
      return self.c:create_pipeline{ name = name, url = src.url }
    elseif src.path then
      return self.c:upload_pipeline{ name = name, file = src.path }
    end
    return self.c:upload_pipeline{ name = name, content = src.content, filename = src.filename }
  end, intent)
  intent.id = pl.id
  self.created.pipelines[#self.created.pipelines + 1] = pl.id
  self.pipeline = self.pipeline or pl
  self:journal_write{ event = "pipeline.created", id = pl.id, name = name, source = src.origin }
  return pl
end

--- Creates the experiment the runs belong to (notebook step 2).
function Session:create_experiment(name)
  name = name or ("experiment-" .. M.rand10())
  local intent = { name = name, sent = kb.now() }
  self.intents.experiments[#self.intents.experiments + 1] = intent
  self:journal_intent{ event = "experiment.intent", name = name, t = self:elapsed() }
  local e = self:before_runs("creating the experiment", function()
    return self.c:create_experiment{ name = name }
  end, intent)
  intent.id = e.id
  self.created.experiments[#self.created.experiments + 1] = e.id
  self.experiment = self.experiment or e
  self:journal_write{ event = "experiment.created", id = e.id, name = e.name }
  return e
end

-- ---- runs -------------------------------------------------------------------------

-- Copies what the server says about a run into our record of it.
local function absorb(run, r)
  run.state, run.state_raw = r.state, r.state_raw
  run.created_at, run.scheduled_at = r.created_at or run.created_at, r.scheduled_at or run.scheduled_at
  run.finished_at = r.finished_at or run.finished_at
  if r.error and r.error ~= "" then run.server_error = r.error end
  if r.finished and run.created_at and run.finished_at then
    run.duration = run.finished_at - run.created_at
  end
end

-- fn(self, run), with failures left to the instrumented client's records.
local function guarded(fn)
  return function(self, run)
    local ok, err = pcall(fn, self, run)
    if not ok and kb.is_cancelled(err) then error(err, 0) end
    return ok
  end
end

local function pending(run)
  return run.id ~= nil and not run.finished and not run.timed_out and not run.lost and not run.unknown
end

--- Consecutive failed status polls after which the storm stops polling:
-- auth failures (401/403: the token will not fix itself) and rounds in
-- which every poll failed (each poll already retried as configured).
M.MAX_AUTH_FAILURES = 3
M.MAX_FAILED_ROUNDS = 3

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
    pipeline_id = pl.id, pipeline_version_id = pl.default_version_id, params = p.run_params })
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

-- Histogram layout of run durations and lags: 1 ms to 30 days.
local LONG = { lowest = 1e-3, highest = 30 * 86400, digits = 3 }

-- A poll's answer: the first time a run is seen finished, the lag between
-- its finished_at and now (server clock).
function Session:observe(run, r)
  absorb(run, r)
  if not r.finished or run.finished or run.timed_out then return end
  run.finished = true
  arrivals.ended(self, run, M.outcome(run))
  if run.finished_at then run.observed_lag = self.server_now() - run.finished_at end
  if r.succeeded and run.duration then
    metrics.histogram("run.duration", nil, LONG):record(math.max(run.duration, 0))
  end
  if run.observed_lag then
    metrics.histogram("run.observed_lag", nil, LONG):record(math.max(run.observed_lag, 0))
  end
  self:journal_write{ event = "run.finished", id = run.id, state = run.state, t = self:elapsed(),
    duration = run.duration, observed_lag = run.observed_lag }
end

-- A status poll decodes what a run's state needs, not its pipeline spec.
local POLL = { status_only = true }

-- One status GET (poll client); false when the call failed (or polling
-- has stopped).
function Session:poll_one(run)
  if self.halted then return false end
  local ok, r = pcall(self.poller.get_run, self.poller, run.id, POLL)
  if not ok then
    if kb.is_cancelled(r) then error(r, 0) end
    run.poll_error, run.poll_failed = message_of(r), true
    local class = type(r) == "table" and r.class or "lua"
    if class == "not_found" then
      self:lose(run, r)
    elseif class == "auth" then
      self.auth_failures = (self.auth_failures or 0) + 1
      if self.auth_failures >= M.MAX_AUTH_FAILURES then
        self:halt(string.format("%d consecutive status polls were refused (auth)", self.auth_failures), r)
      end
    end
    return false
  end
  run.poll_failed, self.auth_failures = false, 0
  self:observe(run, r)
  return true
end

--- Stops polling (and the storm's further calls but cleanup): the server
-- keeps refusing or failing. Every pending run is then reported Unknown
-- with the last error: its state could not be read, it did not time out.
function Session:halt(why, err)
  if self.halted then return end
  self.halted = { reason = why, error = message_of(err), class = type(err) == "table" and err.class or nil }
  log.error("storm: stopped polling: %s; last error: %s", why, self.halted.error)
  self:journal_write{ event = "storm.halted", reason = why, error = self.halted.error, t = self:elapsed() }
end

-- After the polls stopped: every pending run is Unknown.
function Session:mark_unknown(list, why)
  for _, run in ipairs(list) do
    if pending(run) then
      run.unknown = true
      arrivals.ended(self, run, "Unknown")
      run.unknown_reason = string.format("state unknown (%s): last poll: %s", why,
        run.poll_error or ("not polled; the last refusal: " .. (self.halted and self.halted.error or "?")))
      self:journal_write{ event = "run.unknown", id = run.id, index = run.index, state = run.state,
        error = run.unknown_reason, t = self:elapsed() }
    end
  end
end

--- Marks a run the server no longer knows (a GET by id answered 404: it
-- was deleted behind the storm's back, or a restarted server lost its
-- state) as lost: outcome "Lost", class not_found; it is no longer polled,
-- fetched or deleted.
function Session:lose(run, err)
  if run.lost then return end
  run.lost, run.lost_class = true, type(err) == "table" and err.class or "not_found"
  arrivals.ended(self, run, "Lost")
  run.poll_error = string.format("lost (%s): the server no longer knows this run: %s",
    run.lost_class, message_of(err))
  self:journal_write{ event = "run.lost", id = run.id, t = self:elapsed(), class = run.lost_class,
    error = run.poll_error }
  log.warn("storm: run %s is lost: the server answered %s", run.id, message_of(err))
end

-- The notebook's loop: GET runs in creation order, stop at the first
-- unfinished one (finished runs are fetched again every time).
function Session:poll_in_order(list)
  for _, run in ipairs(list) do
    if run.id and not run.timed_out and not run.lost and not run.unknown then
      local ok = self:poll_one(run)
      self:count_round({ ok }, 1)
      if not run.finished then return end
    end
  end
end

-- Every pending run, `concurrency` GETs in flight.
function Session:poll_pending(list, count_rounds)
  local pool = kb.pool(self.p.concurrency)
  local tasks = {}
  for _, run in ipairs(list) do
    if self.halted then break end
    if pending(run) then tasks[#tasks + 1] = pool:spawn(self.poll_one, self, run) end
  end
  local results = pool:wait()
  -- wait_runs stops after rounds of failures; the probe's rounds measure them
  if count_rounds then self:count_round(results, #tasks) end
end

-- One round of tracking = "list" (kb.kfp.storm_track): the unfinished runs
-- listed, a GET for each whose state changed.
function Session:track_round(list)
  local _, all_failed = track.round(self, list, pending)
  self:count_round({ not all_failed }, 1, self.track_error and message_of(self.track_error))
end

-- A poll round in which every poll failed counts towards halting.
function Session:count_round(results, n, fallback)
  if n == 0 or self.halted then return end
  for i = 1, n do
    if results[i] then self.failed_rounds = 0 return end
  end
  self.failed_rounds = (self.failed_rounds or 0) + 1
  if self.failed_rounds >= M.MAX_FAILED_ROUNDS then
    local last
    for _, run in ipairs(self.runs) do
      if pending(run) and run.poll_error then last = run.poll_error end
    end
    self:halt(string.format("every status poll failed in %d consecutive rounds", self.failed_rounds),
      last or fallback or "?")
  end
end

--- ListRuns of the experiment (every page; timed: run.list). Returns the
-- number of runs listed, or nil when the call failed.
function Session:list_runs()
  local ok, items = pcall(self.c.list_all_runs, self.c,
    { experiment_id = self.experiment and self.experiment.id, page_size = 200, status_only = true })
  if not ok then
    if kb.is_cancelled(items) then error(items, 0) end
    return nil
  end
  return #items
end

-- Terminates a run that ran out of time and counts it as timed out.
function Session:time_out(run, why)
  run.timed_out, run.timeout_reason = true, why
  arrivals.ended(self, run, "Timed out")
  local ok, err = pcall(self.c.terminate_run, self.c, run.id)
  if not ok and kb.is_cancelled(err) then error(err, 0) end
  run.terminated = ok
  self:journal_write{ event = "run.timeout", id = run.id, state = run.state, reason = why,
    t = self:elapsed(), terminated = ok }
  log.warn("storm: run %s %s (state %s)%s", run.id, why, tostring(run.state),
    ok and "; terminated" or "; terminate failed")
end

-- Cluster seconds a run has existed (from its create call's answer).
function Session:age(run)
  return (kb.now() - run.t_created) * self.clock.scale
end

function Session:enforce_timeouts(list)
  local p, expired = self.p, self:expired()
  local pool = kb.pool(p.concurrency)
  for _, run in ipairs(list) do
    if pending(run) then
      local why
      if expired then
        why = string.format("not finished within the global timeout (%g s)", p.timeout)
      elseif p.run_timeout > 0 and self:age(run) >= p.run_timeout then
        why = string.format("not finished within run_timeout (%g s)", p.run_timeout)
      end
      if why and run.poll_failed then
        -- its last poll failed: we do not know that it is still running
        run.unknown = true
        arrivals.ended(self, run, "Unknown")
        run.unknown_reason = string.format("state unknown: %s and the last poll failed: %s", why,
          run.poll_error)
        self:journal_write{ event = "run.unknown", id = run.id, index = run.index, state = run.state,
          error = run.unknown_reason, t = self:elapsed() }
      elseif why then
        pool:spawn(self.time_out, self, run, why)
      end
    end
  end
  pool:wait()
end

-- Cluster seconds until the next poll: the interval, or less when a
-- timeout falls due first.
function Session:next_wait(list)
  local p = self.p
  local wait = p.run_status_polling_interval_sec
  if p.timeout > 0 then wait = math.min(wait, p.timeout - self:elapsed()) end
  if p.run_timeout > 0 then
    for _, run in ipairs(list) do
      if pending(run) then wait = math.min(wait, p.run_timeout - self:age(run)) end
    end
  end
  return math.max(wait, 1e-3)
end

--- Sets the number of requests in flight (the probe raises it step by step).
function Session:set_concurrency(n)
  self.p.concurrency = n
  check_int(self.p, "concurrency", 1, M.MAX_CONCURRENCY)
end

--- `rounds` polls of the runs (default all) without waiting for them to
-- finish, `run_status_polling_interval_sec` apart: a ListRuns (with
-- measure_list) and a GET of every pending run per round.
function Session:poll_rounds(list, rounds)
  list = list or self.runs
  for i = 1, rounds do
    if self:count(pending, list) == 0 then return end
    if self.p.measure_list then self:list_runs() end
    self:poll_pending(list)
    self.progress:update()
    if i < rounds then self:sleep(self.p.run_status_polling_interval_sec) end
  end
end

--- Terminates every run (default all) still pending (timed: run.terminate).
function Session:terminate_runs(list)
  self:each_created(list, guarded(function(s, run)
    if not pending(run) then return end
    s.c:terminate_run(run.id)
    run.terminated = true
  end))
end

--- Polls the runs (default all) until every created one finished or timed
-- out (notebook step 4). With poll_all, each interval GETs every pending
-- run; without it, the notebook's in-order walk. measure_list adds a
-- ListRuns per interval. Status GETs are timed as poll.run.get.
function Session:wait_runs(list)
  list = list or self.runs
  while not self.halted do
    -- open model: runs keep arriving until the schedule is over
    if self:count(pending, list) == 0 and not arrivals.arriving(self) then break end
    if self.p.measure_list then self:list_runs() end
    if self.p.tracking == "list" then self:track_round(list)
    elseif self.p.poll_all then self:poll_pending(list, true)
    else self:poll_in_order(list) end
    if self.halted then break end
    self:enforce_timeouts(list)
    self.progress:update()
    if self:count(pending, list) == 0 and not arrivals.arriving(self) then break end
    self:sleep(self:next_wait(list))
  end
  if self.halted then self:mark_unknown(list, "polling stopped: " .. self.halted.reason) end
  self.progress:done()
end

-- True (and said once per step) when polling stopped: the notebook's later
-- steps would only meet the same refusals.
function Session:skip_when_halted(what)
  if not self.halted then return false end
  log.warn("storm: skipping %s: %s", what, self.halted.reason)
  return true
end

-- Runs `fn(self, run)` for each run with an id, `concurrency` at a time.
function Session:each_created(list, fn)
  local pool = kb.pool(self.p.concurrency)
  for _, run in ipairs(list or self.runs) do
    if run.id then pool:spawn(fn, self, run) end
  end
  pool:wait()
end

--- One more GET of every created run, timed as run.get (notebook step 5:
-- these are the notebook's GetRun latencies).
function Session:get_runs(list)
  if self:skip_when_halted("the final GETs (run.get)") then return end
  self:each_created(list, guarded(function(s, run)
    if run.lost then return end
    local ok, r = pcall(s.c.get_run, s.c, run.id)
    if ok then return s:observe(run, r) end
    if type(r) == "table" and r.class == "not_found" then s:lose(run, r) end
    error(r, 0)
  end))
end

--- Deletes every created run, timed as run.delete (notebook step 6).
function Session:delete_runs(list)
  if self:skip_when_halted("the deletes (run.delete; cleanup still tries)") then return end
  self:each_created(list, guarded(function(s, run)
    if run.deleted or run.lost then return end
    s.c:delete_run(run.id)
    run.deleted = true
  end))
end

-- ---- cleanup ----------------------------------------------------------------------

local MAX_CLEANUP_ERRORS = 10

-- Calls fn(...); a failure is logged and kept (the first few), never raised.
-- After MAX_AUTH_FAILURES consecutive auth failures nothing more is sent.
local function try(self, what, fn, ...)
  if self.cleanup_stopped then return false end
  local ok, err = pcall(fn, ...)
  if ok then
    self.cleanup_auth = 0
    return true
  end
  if kb.is_cancelled(err) then error(err, 0) end
  if type(err) == "table" and err.class == "not_found" then return true end
  if type(err) == "table" and err.class == "auth" then
    self.cleanup_auth = (self.cleanup_auth or 0) + 1
    if self.cleanup_auth >= M.MAX_AUTH_FAILURES then
      self.cleanup_stopped = string.format("cleanup stopped after %d consecutive auth failures (%s)",
        self.cleanup_auth, message_of(err))
      log.error("storm: %s; what the storm created is left on the server", self.cleanup_stopped)
    end
  end
  local text = what .. ": " .. message_of(err)
  self.cleanup_failures = (self.cleanup_failures or 0) + 1
  if #self.cleanup_errors < MAX_CLEANUP_ERRORS then
    self.cleanup_errors[#self.cleanup_errors + 1] = text
    log.warn("storm: cleanup: %s", text)
  elseif self.cleanup_failures == MAX_CLEANUP_ERRORS + 1 then
    log.warn("storm: cleanup: more failures; only the first %d are kept", MAX_CLEANUP_ERRORS)
  end
  return false
end

-- Journals a delete with the object's id, so a rebuild after a kill during
-- cleanup says what was deleted.
function Session:journal_deleted(kind, id, name, index)
  self:journal_write{ event = "deleted", kind = kind, id = id, name = name, index = index,
    t = self:elapsed() }
end

-- Pipelines and experiments whose create may have made one but whose id
-- the storm does not know.

--- Items of a list method (list_pipelines, list_experiments) named `name`:
-- the server filters (name EQUALS), and the name is checked here too.
function Session:find_by_name(c, method, key, name)
  local page = c[method](c, { page_size = 20, filter = { predicates = json.array({ { key = key,
    [self.p.api == "v1beta1" and "op" or "operation"] = "EQUALS", string_value = name } }) } })
  local out = {}
  for _, x in ipairs(page.items) do
    if x.name == name then out[#out + 1] = x end
  end
  return out
end

-- Looks up, by name, what the unanswered creates made (experiments,
-- pipelines, runs) until all are found or `request_timeout` has passed
-- since the last was sent: a create the server received can land after
-- the client stopped waiting (Ctrl-C during a stalled create). Found
-- objects join s.created (and their runs get their id), so cleanup
-- deletes them.
function Session:resolve_intents()
  local aux, p = self.aux, self.p
  local kinds = {
    { list = self.intents.experiments, method = "list_experiments",
      key = p.api == "v1beta1" and "name" or "display_name", into = self.created.experiments,
      kind = "experiment" },
    { list = self.intents.pipelines, method = "list_pipelines", key = "name",
      into = self.created.pipelines, kind = "pipeline" },
  }
  local last_sent = 0
  for _, k in ipairs(kinds) do
    for _, it in ipairs(M.unanswered(k.list)) do last_sent = math.max(last_sent, it.sent) end
  end
  for _, run in ipairs(M.unanswered(self.runs)) do last_sent = math.max(last_sent, run.sent) end
  if last_sent == 0 then return end
  local deadline = last_sent + p.request_timeout
  local step = math.max(p.request_timeout / 15, 1e-3)
  local lookup_error
  while not self.cleanup_stopped do
    local left = 0
    for _, k in ipairs(kinds) do
      for _, it in ipairs(M.unanswered(k.list)) do
        local ok, found = pcall(self.find_by_name, self, aux, k.method, k.key, it.name)
        if not ok and kb.is_cancelled(found) then error(found, 0) end
        if ok and #found > 0 then
          for _, x in ipairs(found) do k.into[#k.into + 1] = x.id end
          it.id, it.found = found[1].id, true
          self:journal_write{ event = k.kind .. ".reconciled", id = it.id, name = it.name,
            t = self:elapsed() }
          log.info("storm: cleanup: found %s %s (%s) by name: its create's answer was lost",
            k.kind, it.name, it.id)
        else
          if not ok and not it.lookup_failed then -- kept once, not once a round
            it.lookup_failed = true
            try(self, "look up " .. k.kind .. " " .. it.name, error, found)
          end
          left = left + 1
        end
      end
    end
    local found, lerr = self:reconcile_runs(self.runs)
    lookup_error = found == nil and message_of(lerr) or nil
    left = left + #M.unanswered(self.runs)
    if left == 0 or kb.now() >= deadline then break end
    kb.sleep(math.min(step, math.max(deadline - kb.now(), 1e-3)))
  end
  for _, run in ipairs(M.unanswered(self.runs)) do
    run.looked_up = true
    if lookup_error then
      run.unknown = true
      run.unknown_reason = "unknown (created? intent journaled, the server's runs could not be "
        .. "listed: " .. lookup_error .. ")"
    else
      run.create_error = string.format("not created: no run named %s on the server (looked up by "
        .. "name until request_timeout after the create was sent; %s)", run.name,
        run.create_error or "its answer never arrived")
    end
    run.maybe_created = false
  end
end

-- Deletes our runs that are still there, then anything else the
-- experiment holds (a run whose create call failed may exist anyway).
function Session:cleanup_runs()
  local aux = self.aux
  self:each_created(nil, function(s, run)
    if run.deleted or run.lost then return end
    -- an Unknown run may still be running: terminated first like a pending one
    if pending(run) or (run.unknown and not run.finished) then
      try(s, "terminate run " .. run.id, aux.terminate_run, aux, run.id)
    end
    -- journaled first: a rebuild after a kill here waits for this delete
    s:journal_intent{ event = "delete.intent", kind = "run", id = run.id, t = s:elapsed() }
    if try(s, "delete run " .. run.id, aux.delete_run, aux, run.id) then
      run.deleted = true
      s.cleaned.runs = s.cleaned.runs + 1
      s:journal_deleted("run", run.id, run.name, run.index)
    end
  end)
  for _, eid in ipairs(self.created.experiments) do
    if self.gone[eid] or self.cleanup_stopped then goto next_experiment end
    local ok, items = pcall(aux.list_all_runs, aux, { experiment_id = eid, page_size = 200 })
    if not ok and kb.is_cancelled(items) then error(items, 0) end
    for _, r in ipairs(ok and items or {}) do
      if try(self, "delete leftover run " .. r.id, aux.delete_run, aux, r.id) then
        self.cleaned.leftover_runs = self.cleaned.leftover_runs + 1
        self:journal_deleted("run", r.id, r.name)
      end
    end
    ::next_experiment::
  end
end

--- Deletes everything the storm created: runs (terminated first when still
-- running), leftover runs of its experiments, pipelines with their
-- versions (KFP 2.x refuses a plain delete, kfp.md §1c) and experiments.
-- Idempotent; failures are counted (s.cleanup_failures), the first ten
-- logged and kept in s.cleanup_errors, never raised, so it is safe in a
-- scenario's cleanup after an error or Ctrl-C.
function Session:cleanup()
  self.cleanup_errors = self.cleanup_errors or {}
  self.cleaned = self.cleaned or { runs = 0, leftover_runs = 0, pipelines = 0, experiments = 0 }
  arrivals.stop(self) -- no run arrives during cleanup
  self:resolve_intents()
  self:cleanup_runs()
  local aux = self.aux
  for _, id in ipairs(self.created.pipelines) do
    if not self.gone[id]
        and try(self, "delete pipeline " .. id, aux.delete_pipeline, aux, id, { cascade = true }) then
      self.gone[id] = true
      self.cleaned.pipelines = self.cleaned.pipelines + 1
      self:journal_deleted("pipeline", id)
    end
  end
  for _, id in ipairs(self.created.experiments) do
    if not self.gone[id] and try(self, "delete experiment " .. id, aux.delete_experiment, aux, id) then
      self.gone[id] = true
      self.cleaned.experiments = self.cleaned.experiments + 1
      self:journal_deleted("experiment", id)
    end
  end
  self:journal_write{ event = "cleanup", cleaned = self.cleaned, errors = self.cleanup_errors,
    stopped = self.cleanup_stopped }
  return self.cleaned
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
