--- kb.kubebench: Kubebench experiments without ksonnet.
--
--   local kubebench = require "kb.kubebench"
--   local exp = kubebench.load("scenarios/kubebench/tf-cnn.yaml")   -- or a table
--   local r = kubebench.render(exp, {params = {num_worker = 2}})    -- no cluster
--   local rec = kubebench.run(exp, {host = "sim", root = "experiments"})
--   local wf = kubebench.workflow(exp)          -- the same, as an Argo Workflow
--   return kubebench.scenario { experiment = "kubebench/tf-cnn.yaml" }  -- a kbrun scenario
--
-- An experiment (a Lua table, or a YAML file with the same fields):
--   name      = "tf-cnn-dummy",  -- default: the params file's base name
--   template  = fn | manifest table | "file.yaml" | "file.lua" (returns fn)
--   params    = table | "params.yaml"
--   kind      = "TFJob",         -- optional check of the rendered kind
--   namespace = "default",
--   volumes   = { experimentConfigPvc =, experimentRecordPvc =, experimentDataPvc = },
--   post_job  = fn(ctx) -> result | { image =, args = list or "a,b,c" } | { lua = "file.lua" },
--   reporter  = { csvReporterInput = "result.json", csvReporterOutput = "report.csv" },
--   timeout   = 3600,            -- seconds for the main job (and again the post job)
--   keep      = false,           -- true: leave the jobs in the cluster
--   env       = { NAME = value }, poll = 2 (seconds between status reads),
--   labels    = { k = v }, annotations = { k = v },   -- on the main job
--               (annotation sim.kbrun.io/fail: "true" makes the simulator fail it)
-- Relative file names are relative to the experiment file (or opts.dir).
--
-- The run: resolve params -> render -> inject volumes, env, labels -> save
-- config/ -> create -> wait by conditions (Succeeded/Complete vs Failed,
-- with timeout) -> every replica's log into output/ -> post job ->
-- result.json -> report.csv row -> delete the jobs (unless keep).
local kb = require "kb"
local fs = require "kb.fs"
local json = require "kb.json"
local yaml = require "kb.yaml"
local experiment = require "kb.experiment"
local template = require "kb.kubebench.template"
local inject = require "kb.kubebench.inject"
local report = require "kb.kubebench.report"
local client = require "kb.kubebench.client"

local M = {}

local format = string.format
local fail = template.fail
local null = json.null

M.DEFAULT_VOLUMES = {
  experimentConfigPvc = "kubebench-config-pvc",
  experimentRecordPvc = "kubebench-exp-pvc",
  experimentDataPvc = null,
}
M.DEFAULT_REPORTER = { csvReporterInput = "result.json", csvReporterOutput = "report.csv" }

local FIELDS = {
  name = "string", template = "any", params = "any", kind = "string", namespace = "string",
  volumes = "table", post_job = "any", reporter = "table", timeout = "number", keep = "boolean",
  env = "table", labels = "table", annotations = "table", poll = "number", dir = "string",
}

-- Control parameters a kubebench scenario adds to the experiment's params.
local CONTROL = { host = true, namespace = true, timeout = true, keep = true }
-- and the connection parameters every bundled scenario takes (kb.connection)
for k in pairs(require("kb.connection").DEFAULTS) do CONTROL[k] = true end

local Experiment = {}
Experiment.__index = Experiment
Experiment.__name = "kb.kubebench.experiment"

local function sorted(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

local function resolve_path(dir, path)
  if path:sub(1, 1) == "/" or not dir or dir == "" then return path end
  return fs.join(dir, path)
end

local function load_lua_file(path, what)
  local chunk, err = loadfile(path)
  if not chunk then fail("%s: %s", what, err) end
  local fn = chunk()
  if type(fn) ~= "function" then fail("%s: %s must return a function, got %s", what, path, type(fn)) end
  return fn
end

local function load_template(t, dir)
  if type(t) == "function" or type(t) == "table" then return t, "template" end
  if type(t) ~= "string" then fail("experiment: 'template' is required (a Lua function, a manifest or a file)") end
  if t:find("\n", 1, true) or t:match("^%s*apiVersion:") then return t, "template" end
  local path = resolve_path(dir, t)
  if not fs.exists(path) then fail("experiment: template file '%s' does not exist", path) end
  if path:match("%.lua$") then return load_lua_file(path, "template"), fs.basename(path) end
  return fs.read(path), fs.basename(path)
end

local function load_params(p, dir)
  if p == nil or p == null then return {}, nil, nil end
  if type(p) == "table" then return template.copy(p), nil, nil end
  if type(p) ~= "string" then fail("experiment: 'params' must be a table or a YAML file, got %s", type(p)) end
  local path = resolve_path(dir, p)
  if not fs.exists(path) then fail("experiment: params file '%s' does not exist", path) end
  local text = fs.read(path)
  local doc = yaml.decode(text, { name = fs.basename(path) })
  if doc == null then doc = {} end
  if type(doc) ~= "table" or (#doc > 0) then
    fail("experiment: params file '%s' must be a YAML mapping of name: value", path)
  end
  return doc, fs.basename(path), text
end

--- Loads an experiment from a table or a YAML file. opts.dir: the folder
-- relative file names start from (default: the YAML file's folder).
function M.load(spec, opts)
  opts = opts or {}
  if getmetatable(spec) == Experiment then return spec end
  local dir = opts.dir
  local source = "experiment"
  if type(spec) == "string" then
    if not fs.exists(spec) then fail("experiment file '%s' does not exist", spec) end
    source = spec
    dir = dir or fs.dirname(spec)
    spec = yaml.decode(fs.read(spec), { name = fs.basename(spec) })
  end
  if type(spec) ~= "table" then fail("experiment: wants a table or a YAML file, got %s", type(spec)) end
  for k, v in pairs(spec) do
    local want = FIELDS[k]
    if not want then
      fail("%s: unknown field '%s' (fields: %s)", source, tostring(k), table.concat(sorted(FIELDS), ", "))
    end
    if want ~= "any" and type(v) ~= want and v ~= null then
      fail("%s: field '%s' must be a %s, got %s", source, k, want, type(v))
    end
  end
  dir = spec.dir or dir
  local exp = setmetatable({ source = source, dir = dir }, Experiment)
  exp.template, exp.template_name = load_template(spec.template, dir)
  exp.params, exp.params_file, exp.params_text = load_params(spec.params, dir)
  exp.name = spec.name or (exp.params_file and exp.params_file:gsub("%.[^.]*$", "")) or "experiment"
  exp.kind = spec.kind
  exp.namespace = spec.namespace or "default"
  exp.volumes = {}
  for k, v in pairs(M.DEFAULT_VOLUMES) do exp.volumes[k] = v end
  for k, v in pairs(spec.volumes or {}) do
    if M.DEFAULT_VOLUMES[k] == nil then
      fail("%s: unknown volume '%s' (volumes: experimentConfigPvc, experimentDataPvc, experimentRecordPvc)", source, k)
    end
    exp.volumes[k] = v
  end
  exp.reporter = {}
  for k, v in pairs(M.DEFAULT_REPORTER) do exp.reporter[k] = v end
  for k, v in pairs(spec.reporter or {}) do
    if not M.DEFAULT_REPORTER[k] then
      fail("%s: unknown reporter field '%s' (csvReporterInput, csvReporterOutput)", source, k)
    end
    exp.reporter[k] = v
  end
  local post = spec.post_job
  if type(post) == "table" and post.lua then post = load_lua_file(resolve_path(dir, post.lua), "post_job") end
  if type(post) == "table" and type(post.image) ~= "string" then
    fail("%s: post_job needs an image (or is a Lua function)", source)
  end
  if post ~= nil and post ~= null and type(post) ~= "function" and type(post) ~= "table" then
    fail("%s: post_job must be a Lua function or {image =, args =}, got %s", source, type(post))
  end
  exp.post_job = post ~= null and post or nil
  exp.timeout = spec.timeout or 3600
  exp.keep = spec.keep or false
  exp.poll = spec.poll or 2
  exp.labels = spec.labels
  exp.annotations = spec.annotations
  exp.env = {}
  for _, k in ipairs(sorted(spec.env or {})) do
    exp.env[#exp.env + 1] = { name = k, value = template.text(spec.env[k], k, "env") }
  end
  return exp
end

--- The params of a run: the experiment's, overridden key by key.
function Experiment:resolve(overrides)
  local p = template.copy(self.params)
  for k, v in pairs(overrides or {}) do
    if p[k] == nil then
      fail("experiment %s: unknown parameter '%s' (params: %s)", self.name, tostring(k),
        table.concat(sorted(self.params), ", "))
    end
    p[k] = v
  end
  return p
end

--- A new Kubebench experiment ID for this experiment:
-- <name>-YYYYMMDDhhmm-xxxx.
function Experiment:new_id()
  return experiment.new_id(self.name)
end

--- Renders without touching a cluster. opts: params (overrides), id,
-- namespace. Returns {id, params, manifest, post_job (a Job manifest, or
-- nil for none or a Lua post job)}.
function M.render(exp, opts)
  exp = M.load(exp)
  opts = opts or {}
  local params = exp:resolve(opts.params)
  local id = opts.id or exp:new_id()
  local ns = opts.namespace or exp.namespace
  local manifest = template.render(exp.template, params,
    { id = id, namespace = ns, name = exp.name, template_name = exp.template_name })
  if exp.kind and manifest.kind ~= exp.kind then
    fail("experiment %s: the template renders a %s, the experiment says kind %s", exp.name,
      tostring(manifest.kind), exp.kind)
  end
  inject.apply(manifest, { id = id, namespace = ns, volumes = exp.volumes, env = exp.env, labels = exp.labels,
    annotations = exp.annotations })
  local post
  if type(exp.post_job) == "table" then
    post = inject.post_job(exp.post_job, { id = id, namespace = ns, volumes = exp.volumes, env = exp.env })
  end
  return { id = id, params = params, manifest = manifest, post_job = post, namespace = ns }
end

-- ---- running ----------------------------------------------------------------

local function iso(t) return os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(t)) end

local function parse_time(s)
  if type(s) ~= "string" then return nil end
  local y, mo, d, h, mi, sec = s:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)")
  if not y then return nil end
  return os.time { year = y, month = mo, day = d, hour = h, min = mi, sec = sec, isdst = false }
end

--- The terminal condition of a job object: "Succeeded", "Failed" or nil,
-- and that condition. Decided by condition type, never by completionTime
-- (which the training operator also sets when the job failed).
function M.outcome(obj)
  local conds = type(obj) == "table" and type(obj.status) == "table" and obj.status.conditions
  if type(conds) ~= "table" then return nil end
  local good = obj.kind == "Job" and "Complete" or "Succeeded"
  for _, c in ipairs(conds) do
    if c.status == "True" and c.type == "Failed" then return "Failed", c end
  end
  for _, c in ipairs(conds) do
    if c.status == "True" and c.type == good then return "Succeeded", c end
  end
  return nil
end

local function condition(obj, ctype)
  for _, c in ipairs(obj and obj.status and obj.status.conditions or {}) do
    if c.type == ctype then return c end
  end
end

-- Polls until the job has a terminal condition; the caller bounds it.
local function wait_job(c, kind, name, opts)
  local seen_running = false
  while true do
    local obj = c:get(kind, name, opts)
    if not obj then fail("%s %s/%s disappeared while kbrun was waiting for it", kind, opts.namespace, name) end
    local outcome, cond = M.outcome(obj)
    if outcome then return outcome, cond, obj end
    if not seen_running and condition(obj, "Running") then
      seen_running = true
      kb.log.info("%s %s is running", kind, name)
    end
    kb.sleep(opts.poll or 2)
  end
end

-- Tasks created by experiments not yet cleaned up, for scenario cleanup.
local live = {}

local function delete_quietly(c, kind, name, ns)
  local ok, err = pcall(c.delete, c, kind, name, { namespace = ns, propagation_policy = "Background" })
  if not ok then kb.log.warn("could not delete %s %s/%s: %s", kind, ns, name, tostring(err)) end
end

--- Deletes every job an unfinished run created (Ctrl-C, errors).
function M.cleanup_all()
  for key, o in pairs(live) do
    live[key] = nil
    if not o.keep then delete_quietly(o.client, o.kind, o.name, o.namespace) end
  end
end

local function track(c, kind, name, ns, keep)
  local key = format("%s/%s/%s", kind, ns, name)
  live[key] = { client = c, kind = kind, name = name, namespace = ns, keep = keep }
  return key
end

-- The experiment folder: the runner's (kb.exp) or a new one under root.
local function folder_for(id, opts)
  if opts.folder then return opts.folder end
  local dir = fs.join(opts.root or "experiments", id)
  local f = { id = id, dir = dir, out = opts.root or "experiments", config_dir = fs.join(dir, "config"),
    output_dir = fs.join(dir, "output"), result_dir = fs.join(dir, "result"), own = true }
  for _, d in ipairs({ f.config_dir, f.output_dir, f.result_dir }) do fs.mkdir(d) end
  return f
end

local function safe_name(s) return (tostring(s):gsub("[^%w%.%-_]", "_")) end

-- Pod logs of a job into output/: <replica type><index>.log for training
-- jobs (worker0.log, as Kubebench's runner named them), else <pod>.log.
local function collect_logs(c, kind, name, ns, out_dir, prefix)
  local selector = inject.KINDS[kind] and inject.KINDS[kind].training
    and ("training.kubeflow.org/job-name=" .. name) or ("job-name=" .. name)
  local logs = {}
  local pods = c:list("Pod", { namespace = ns, label_selector = selector })
  table.sort(pods, function(a, b) return a.metadata.name < b.metadata.name end)
  for _, pod in ipairs(pods) do
    local labels = pod.metadata.labels or {}
    local base = prefix or pod.metadata.name
    local rtype, index = labels["training.kubeflow.org/replica-type"], labels["training.kubeflow.org/replica-index"]
    if not prefix and rtype and index then base = rtype:lower() .. index end
    local containers = pod.spec and pod.spec.containers or {}
    for _, ct in ipairs(containers) do
      local file = safe_name(#containers > 1 and (base .. "." .. ct.name) or base) .. ".log"
      local ok, text = pcall(c.logs, c, pod.metadata.name, { namespace = ns, container = ct.name })
      if not ok then
        kb.log.warn("no log for pod %s container %s: %s", pod.metadata.name, ct.name, tostring(text))
        text = ""
      end
      fs.write(fs.join(out_dir, file), text)
      logs[file] = text
    end
  end
  return logs
end

-- The result a post job container left: result/<csvReporterInput> when the
-- experiment volume is this folder, else the last line of its log that is
-- a JSON object.
local function post_job_result(folder, input, text)
  local path = fs.join(folder.result_dir, input)
  if folder.own and fs.exists(path) then return json.decode(fs.read(path)) end
  local found
  for line in (text or ""):gmatch("[^\n]+") do
    local body = line:match("^%S+Z (%{.*%})%s*$") or line:match("^%s*(%{.*%})%s*$")
    if body then
      local ok, v = pcall(json.decode, body)
      if ok and type(v) == "table" then found = v end
    end
  end
  return found
end

local function run_post_job(exp, r, c, folder, ctx, remaining)
  if type(exp.post_job) == "function" then
    local res = exp.post_job(ctx)
    if res ~= nil and type(res) ~= "table" then
      fail("post_job: the Lua post job must return a table (the result), got %s", type(res))
    end
    return res or {}
  end
  local job = r.post_job
  c:create(job)
  local key = track(c, "Job", job.metadata.name, r.namespace, exp.keep)
  local outcome, cond = kb.timeout(remaining, wait_job, c, "Job", job.metadata.name,
    { namespace = r.namespace, poll = exp.poll })
  local logs = collect_logs(c, "Job", job.metadata.name, r.namespace, folder.output_dir, "post-job")
  local text = logs["post-job.log"]
  if not exp.keep then delete_quietly(c, "Job", job.metadata.name, r.namespace) end
  live[key] = nil
  if outcome ~= "Succeeded" then
    fail("post job %s failed: %s", job.metadata.name, cond and cond.message or "?")
  end
  local res = post_job_result(folder, exp.reporter.csvReporterInput, text)
  if not res then
    kb.log.warn("post job %s left no result (no %s, no JSON line in its log)", job.metadata.name,
      exp.reporter.csvReporterInput)
  end
  return res or {}
end

-- A result file the post step left in result/ (a Lua post job writing
-- ctx.result_dir/result.json, or a container whose experiment volume is
-- this folder, as Kubebench's post-processors write
-- $KUBEBENCH_EXP_RESULT_PATH/result.json). kbrun's own document is
-- result/result.json, so the post step's file is kept byte for byte as
-- result/post-job-<name> (logged, named in the record as post_job_file)
-- and its content is the record's result when the post job returned none.
local function keep_post_result(folder, input, existed_before, res)
  local path = fs.join(folder.result_dir, input)
  if existed_before or not fs.exists(path) then return res, nil end
  local text = fs.read(path)
  local name = input
  if input == "result.json" then
    name = "post-job-" .. input
    fs.write(fs.join(folder.result_dir, name), text)
    os.remove(path)
    kb.log.info("the post job's result/%s is kept as result/%s (kbrun's result.json holds it as result)",
      input, name)
  end
  if res == nil or next(res) == nil then
    local ok, v = pcall(json.decode, text)
    if ok and type(v) == "table" then res = v end
  end
  return res, name
end

local RESERVED = { experiment_id = true, started_at = true, status = true, finished_at = true,
  duration = true, job_kind = true, message = true, params = true, timings = true }

--- The report.csv row of a record: experiment_id, started_at, status,
-- finished_at, duration, job_kind, message, params.<key> and the result's
-- keys (a result key that clashes with one of those gets "result.").
function M.report_row(rec)
  local row = {
    experiment_id = rec.experiment_id, started_at = rec.started_at, status = rec.status,
    finished_at = rec.finished_at, duration = rec.duration, job_kind = rec.job_kind,
    message = rec.message or "", params = rec.params, timings = rec.timings,
  }
  for k, v in pairs(type(rec.result) == "table" and rec.result or {}) do
    row[RESERVED[k] and ("result." .. k) or k] = v
  end
  return row
end

local function save_config(folder, exp, r)
  local scrub = require("kb.secrets").scrub -- docs/security.md
  fs.write(fs.join(folder.config_dir, "kf-job-manifest.yaml"), scrub(yaml.encode(r.manifest)))
  local pname = exp.params_file or "params.yaml"
  fs.write(fs.join(folder.config_dir, pname), scrub(yaml.encode(r.params)))
  if r.post_job then fs.write(fs.join(folder.config_dir, "post-job-manifest.yaml"), scrub(yaml.encode(r.post_job))) end
end

--- Runs one experiment and returns its record (also in result/result.json
-- of its folder and as a row of report.csv).
-- opts: params (overrides), host / url / kubeconfig / client, namespace,
-- connection (the kb.connection parameters: TLS, token_file, kubeconfig, ...),
-- root (experiments folder, default "experiments"), folder (an existing
-- experiment folder such as kb.exp: its id is the experiment ID and the
-- runner writes result.json), id, timeout, keep.
-- The record: experiment_id, status ("passed", "failed", "timeout" or
-- "error"), passed (1 or 0), message, started_at, finished_at, duration,
-- job_kind, job_name, namespace, timings, params, result, report, and
-- post_job_file when the post step left its own result file (kept as
-- result/post-job-result.json beside kbrun's result.json).
function M.run(exp, opts)
  exp = M.load(exp)
  opts = opts or {}
  local id = opts.id or (opts.folder and opts.folder.id) or exp:new_id()
  local keep = opts.keep
  if keep == nil then keep = exp.keep end
  local timeout = opts.timeout or exp.timeout
  local started, started_wall = kb.now(), kb.time()
  local folder = folder_for(id, opts)
  local rec = { experiment_id = id, started_at = iso(started_wall), status = "error", passed = 0 }
  local r, c, main_key

  local ok, err = pcall(function()
    r = M.render(exp, { params = opts.params, id = id, namespace = opts.namespace })
    rec.params, rec.job_kind, rec.job_name, rec.namespace = r.params, r.manifest.kind, id, r.namespace
    save_config(folder, exp, r)
    c = client.new { client = opts.client, host = opts.host, url = opts.url, kubeconfig = opts.kubeconfig,
      namespace = r.namespace, connection = opts.connection }
    c:create(r.manifest)
    main_key = track(c, r.manifest.kind, id, r.namespace, keep)
    kb.log.info("experiment %s: created %s %s/%s", id, r.manifest.kind, r.namespace, id)
    local t0 = kb.now()
    local wok, outcome, cond, obj = pcall(kb.timeout, timeout, wait_job, c, r.manifest.kind, id,
      { namespace = r.namespace, poll = exp.poll })
    if not wok then
      if type(outcome) == "table" and outcome.class == "timeout" then
        rec.status = "timeout"
        rec.message = format("%s %s did not finish within %g s", r.manifest.kind, id, timeout)
      else
        error(outcome, 0)
      end
    else
      rec.status = outcome == "Succeeded" and "passed" or "failed"
      rec.message = cond and cond.message or nil
      local created = parse_time(obj.metadata and obj.metadata.creationTimestamp)
      local t_end = parse_time(cond and cond.lastTransitionTime)
      rec.timings = { wait = kb.now() - t0 }
      if created and t_end then rec.timings.job = t_end - created end
    end
    local logs = collect_logs(c, r.manifest.kind, id, r.namespace, folder.output_dir)
    rec.logs = sorted(logs)
    if rec.status == "passed" and exp.post_job then
      local ctx = { id = id, params = r.params, status = rec.status, job = obj, logs = logs,
        output_dir = folder.output_dir, result_dir = folder.result_dir, manifest = r.manifest }
      local remaining = math.max(1, timeout - (kb.now() - started))
      local input = exp.reporter.csvReporterInput
      local existed = fs.exists(fs.join(folder.result_dir, input))
      local pok, res = pcall(run_post_job, exp, r, c, folder, ctx, remaining)
      if pok then
        rec.result, rec.post_job_file = keep_post_result(folder, input, existed, res)
      else
        rec.status = "failed"
        rec.message = "post job: " .. tostring(type(res) == "table" and res.message or res)
      end
    end
  end)
  if not ok then
    rec.status = "error"
    rec.message = tostring(type(err) == "table" and (err.message or err) or err)
    kb.log.error("experiment %s: %s", id, rec.message)
  elseif rec.status ~= "passed" then
    kb.log.error("experiment %s %s: %s", id, rec.status, tostring(rec.message))
  else
    kb.log.info("experiment %s passed", id)
  end
  if c and main_key then
    if not keep then delete_quietly(c, rec.job_kind, id, rec.namespace) end
    live[main_key] = nil
  end
  rec.passed = rec.status == "passed" and 1 or 0
  rec.finished_at = iso(kb.time())
  rec.duration = kb.now() - started
  rec.result = rec.result or {}
  local root = opts.root or folder.out or fs.dirname(folder.dir)
  rec.report = fs.join(root, exp.reporter.csvReporterOutput)
  if folder.own then
    fs.write(fs.join(folder.result_dir, "result.json"), require("kb.secrets").encode_json(rec, { pretty = true }) .. "\n")
  end
  report.append(rec.report, M.report_row(rec))
  return rec
end

-- ---- Argo ---------------------------------------------------------------------

--- The experiment as an Argo Workflow (see kb.kubebench.argo).
function M.workflow(exp, opts)
  return require("kb.kubebench.argo").workflow(M.render(exp, opts), M.load(exp), opts)
end

--- Submits the Workflow to argo-server; returns the created Workflow.
function M.submit(exp, opts)
  opts = opts or {}
  return require("kb.kubebench.argo").submit(M.workflow(exp, opts), opts)
end

-- ---- scenarios ------------------------------------------------------------------

-- Scenario params cannot be null (the command line could not override
-- them): a null param is offered as "" and turned back into null.
local function scenario_params(exp)
  local p, was_null = {}, {}
  for k, v in pairs(exp.params) do
    if CONTROL[k] then
      fail("experiment %s: param '%s' clashes with the scenario's own '%s' parameter", exp.name, k, k)
    end
    if v == null then p[k], was_null[k] = "", true else p[k] = v end
  end
  for k, v in pairs(require("kb.connection").params()) do p[k] = v end
  p.host, p.namespace, p.timeout, p.keep = "sim", exp.namespace, exp.timeout, exp.keep
  return p, was_null
end

-- Names the runner's experiment folder as Kubebench names experiments,
-- after the experiment config: <config name>-YYYYMMDDhhmm-xxxx
-- (tf-cnn-dummy-201809150923-z72k). kbrun made the folder before the
-- scenario file said which experiment it runs, so it is renamed once,
-- before anything is created, and the experiment object (kb.exp, the
-- runner's), the watched outputs and the run's journal follow it. Not in a
-- sweep's cell (the sweep names its cells) nor for a folder of our own.
local function adopt_kubebench_id(e, exp)
  if type(e) ~= "table" or e.own or not e.dir or require("kb.context").get("shard.part") then return end
  local base = experiment.sanitize(exp.name)
  if e.id:sub(1, #base + 1) == base .. "-" and e.id:sub(#base + 2):match("^%d+%-%w%w%w%w$") then return end
  local parent = fs.dirname(e.dir)
  local id, dir
  for _ = 1, 10 do
    id = experiment.new_id(exp.name)
    dir = fs.join(parent, id)
    if not fs.exists(dir) then break end
  end
  local ok, err = os.rename(e.dir, dir)
  if not ok then
    kb.log.warn("kb.kubebench: keeping the folder %s (could not rename it to %s: %s)", e.dir, dir, tostring(err))
    return
  end
  local old, old_dir = e.id, e.dir
  e.id, e.dir = id, dir
  e.config_dir, e.output_dir, e.result_dir = fs.join(dir, "config"), fs.join(dir, "output"), fs.join(dir, "result")
  require("kb.outputs").watch(dir)
  local j = require("kb.journal").active()
  if j and type(j.path) == "string" and j.path:sub(1, #old_dir + 1) == old_dir .. "/" then
    j.path = fs.join(e.output_dir, fs.basename(j.path))
    j.abspath = fs.abspath(j.path)
  end
  kb.log.info("experiment %s (was %s): named after its config %s, as Kubebench names experiments", id, old,
    exp.name)
end

--- A kbrun scenario running one experiment:
--   return kubebench.scenario { experiment = "kubebench/tf-cnn.yaml" }
-- def: experiment (table or file, relative to the calling scenario's
-- folder if that file is there, else to the current folder; a tail call
-- `return kubebench.scenario{}` hides the caller, so scenarios assign it
-- to a local first), name, dir, sim_config (a simulator config file used when the
-- target is the embedded simulator and kbrun got no --sim-config). Its params are the experiment's params plus host,
-- namespace, timeout and keep; a failed experiment fails the run
-- (threshold passed = 1). The experiment folder is kbrun's own (kb.exp),
-- renamed <config name>-YYYYMMDDhhmm-xxxx as Kubebench names experiments.
function M.scenario(def)
  local dir = def.dir
  if not dir and not debug.getinfo(1, "t").istailcall then
    local src = debug.getinfo(2, "S").source
    dir = src:sub(1, 1) == "@" and fs.dirname(src:sub(2)) or nil
  end
  local spec = def.experiment
  if type(spec) == "string" and dir and fs.exists(resolve_path(dir, spec)) then
    spec = resolve_path(dir, spec)
  end
  local exp = M.load(spec, { dir = type(spec) == "table" and (spec.dir or dir) or nil })
  local params, was_null = scenario_params(exp)
  local sim_config = def.sim_config and resolve_path(dir, def.sim_config)
  return {
    name = def.name or exp.name,
    params = params,
    thresholds = { passed = 1 },
    experiment = exp,
    run = function(p)
      -- one experiment is one item: N shards would run it N times
      local _, shards = require("kb.shard").current()
      if shards > 1 then
        error(setmetatable({ class = "usage", message = format("kb.kubebench: %s runs one experiment, which "
          .. "cannot be split into %d shards (it would run %d times); run it without --shard, or sweep "
          .. "experiments with kb.sweep, whose cells split", exp.name, shards, shards) },
          { __tostring = function(e) return e.message end }), 0)
      end
      adopt_kubebench_id(kb.exp, exp)
      local target = require "kb.target"
      if sim_config and target.is_sim(p.host) and not target.defaults.config_file and not target.defaults.config then
        target.defaults.config_file = sim_config
      end
      local overrides = {}
      for k, v in pairs(p) do
        if not CONTROL[k] then overrides[k] = (was_null[k] and v == "") and null or v end
      end
      local e = kb.exp
      return M.run(exp, { params = overrides, host = p.host, namespace = p.namespace,
        timeout = p.timeout, keep = p.keep, folder = e, root = e and e.out or nil, connection = p })
    end,
    cleanup = function() M.cleanup_all() end,
  }
end

return M
