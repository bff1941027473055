--- kb.kfp.storm_setup: the part of kb.kfp.storm that sets a storm up
-- before its runs: the parameters checked (storm.decode_params, the
-- bounds), run names and the clocks (the server's, cluster seconds), and
-- the notebook's steps 1 and 2 (the pipeline from pipeline_file_url, the
-- experiment). Its functions are kb.kfp.storm's and Session's
-- (docs/storm.md).
local kb = require "kb"
local target = require "kb.target"
local json = require "kb.json"
local yaml = require "kb.yaml"
local fs = require "kb.fs"
local log = require "kb.log"
local core = require "kb.core"
local connection = require "kb.connection"
local arrivals = require "kb.kfp.storm_arrivals"
local message_of = require("kb.kfp.storm_record").message_of
local storm = require "kb.kfp.storm"

local M = {}

local Session = storm.Session

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
storm.MAX_RUNS = 100000
storm.MAX_CONCURRENCY = 10000

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
function storm.decode_params(v)
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
  local p = storm.params(params)
  for k, v in pairs(p) do -- a declaration {default =, secret =} not overridden
    if type(v) == "table" and v.default ~= nil and getmetatable(v) == nil then p[k] = v.default end
  end
  p.notebook = flag(p.notebook, "notebook")
  if p.notebook then
    p.concurrency, p.poll_all, p.measure_list, p.scrape_metrics = 1, false, false, false
    p.timeout, p.run_timeout = 0, 0
  end
  check_int(p, "num_runs", 1, storm.MAX_RUNS)
  check_int(p, "concurrency", 1, storm.MAX_CONCURRENCY)
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
  p.run_params = storm.decode_params(p.pipeline_params)
  p.load = arrivals.options(p) -- nil: the closed mode
  connection.protect(p) -- header= stays <redacted> in the journal's copy
  return p
end

-- ---- names and clocks -------------------------------------------------------------

local ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"

--- Ten random lower-case letters and digits, as the notebook names things
-- ('run-' + 10 characters); from the kernel, so a repeated --seed never
-- reuses a name on a real server.
function storm.rand10()
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

-- ---- the pipeline -----------------------------------------------------------------

-- fn() for a step before the runs (pipeline, experiment): a failure or an
-- interruption is kept as the reason why the runs were not created, then
-- raised. intent.answered: the create's answer (or its failure) arrived.
function Session:before_runs(step, fn, intent)
  local ok, v = pcall(fn)
  if intent then
    intent.answered = ok or not kb.is_cancelled(v)
    intent.maybe_created = not ok and storm.may_have_created(v)
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
function storm.may_have_created(err)
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
  name = name or ("pipeline-" .. storm.rand10())
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
  name = name or ("experiment-" .. storm.rand10())
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

-- for kb.kfp.storm's other parts
M.bad_param, M.check_int, M.normalize = bad_param, check_int, normalize

return M
