--- kb.kfp.storm_pipelines: the steps of KFP's pipeline-service benchmark
-- notebook (tools/benchmarks/pipeline_service_api.ipynb) on a storm session.
--
--   local storm = require "kb.kfp.storm"
--   local s = storm.new(p, { kind = "pipelines" })
--   s:scrape_metrics("before")
--   s:create_pipelines()          -- num_pipelines x CreatePipeline   (pipeline.create)
--   s:create_versions()           -- versions per pipeline, 2 s apart (pipeline_version.create)
--   s:list_versions()             -- ListPipelineVersions per pipeline (pipeline_version.list)
--   s:get_pipelines()             -- GetPipeline per pipeline         (pipeline.get)
--   s:delete_pipelines()          -- DeletePipeline, cascading        (pipeline.delete)
--   s:cleanup()
--   s:scrape_metrics("after")
--   return s:finish()
--
-- The notebook creates each pipeline's versions one by one, sleeping 2 s
-- after each: versions of one pipeline fight over that pipeline's row lock
-- (each new version becomes its default). kbrun keeps that per pipeline
-- (`version_pause_sec`) and works on `concurrency` pipelines at once. On
-- KFP 2.x the notebook's DeletePipeline fails while versions exist
-- (kfp.md §1c); kbrun deletes with cascade.
local kb = require "kb"
local log = require "kb.log"
local metrics = require "kb.metrics"
local storm = require "kb.kfp.storm"
local out = require "kb.kfp.storm_report"

local M = {}

--- The parameters of the pipeline-service storm and their defaults.
M.DEFAULTS = require("kb.connection").params {
  host = "", api = "v1beta1",
  pipeline_file_url = "",
  num_pipelines = 10,
  num_pipeline_versions_per_pipeline = 10,
  version_pause_sec = 2,                  -- the notebook's sleep after each version
  concurrency = 10,                       -- pipelines worked on at once (1 = notebook)
  timeout = 3600,                         -- the whole storm, cluster seconds (0 = none)
  measure_list = true,                    -- ListPipelineVersions of each pipeline
  scrape_metrics = true,
  progress = "auto",
  notebook = false,
}

--- params(overrides) -> M.DEFAULTS with the scenario's own defaults.
function M.params(overrides)
  local p = {}
  for k, v in pairs(M.DEFAULTS) do p[k] = v end
  for k, v in pairs(overrides or {}) do p[k] = v end
  return p
end

local Session = storm.Session

local function check(p)
  for _, name in ipairs({ "num_pipelines", "num_pipeline_versions_per_pipeline" }) do
    local v = type(p[name]) == "number" and math.tointeger(p[name]) or nil
    if v == nil or v < 0 then
      error(string.format("kb.kfp.storm: %s must be an integer >= 0, got %s", name, tostring(p[name])), 0)
    end
    p[name] = v
  end
  if type(p.version_pause_sec) ~= "number" or p.version_pause_sec < 0 then
    error("kb.kfp.storm: version_pause_sec must be a number >= 0, got " .. tostring(p.version_pause_sec), 0)
  end
  if p.notebook then p.version_pause_sec = 2 end
end

--- Called by storm.new for kind = "pipelines".
function M.setup(s)
  for k, v in pairs(M.DEFAULTS) do if s.p[k] == nil then s.p[k] = v end end
  check(s.p)
  s.pipelines = {}
end

-- Runs fn(s, item) for every item, `concurrency` at a time; a failure is
-- recorded (by the instrumented client), never raised, except cancellation.
local function each(s, items, fn)
  local pool = kb.pool(s.p.concurrency)
  for _, item in ipairs(items) do
    pool:spawn(function()
      local ok, err = pcall(fn, s, item)
      if not ok and kb.is_cancelled(err) then error(err, 0) end
      if not ok then item.error = item.error or tostring(type(err) == "table" and err.message or err) end
    end)
  end
  pool:wait()
end

local function made(list)
  local ids = {}
  for _, x in ipairs(list) do if x.id then ids[#ids + 1] = x end end
  return ids
end

--- Creates num_pipelines pipelines from pipeline_file_url (notebook step
-- 1, timed: pipeline.create, or pipeline.upload for a local file sent to a
-- real server). Returns their records {index, name, id, versions, error}.
function Session:create_pipelines(n)
  n = n or self.p.num_pipelines
  local items = {}
  for i = 1, n do
    items[i] = { index = #self.pipelines + 1, name = "pipeline-" .. storm.rand10(), versions = {} }
    self.pipelines[items[i].index] = items[i]
  end
  each(self, items, function(s, item)
    if s:expired() then item.error = "not created: the global timeout passed" return end
    item.id = s:create_pipeline(item.name).id
  end)
  self.progress:milestone(string.format("%d of %d pipelines created", #made(items), n))
  return items
end

-- One version of a pipeline, from the same source as the pipeline.
function Session:create_version(item)
  local src, name = self:pipeline_source(), "pipeline-version-" .. storm.rand10()
  local v
  if src.url then
    v = self.c:create_pipeline_version{ pipeline_id = item.id, name = name, url = src.url }
  elseif src.path then
    v = self.c:upload_pipeline_version{ pipeline_id = item.id, name = name, file = src.path }
  else
    v = self.c:upload_pipeline_version{ pipeline_id = item.id, name = name, content = src.content,
      filename = src.filename }
  end
  item.versions[#item.versions + 1] = v.id
  self:journal_write{ event = "pipeline_version.created", pipeline = item.id, id = v.id }
end

--- Creates num_pipeline_versions_per_pipeline versions of each pipeline
-- (notebook step 2, timed: pipeline_version.create): one after the other
-- per pipeline with version_pause_sec between them, `concurrency`
-- pipelines at once.
function Session:create_versions(m)
  m = m or self.p.num_pipeline_versions_per_pipeline
  each(self, made(self.pipelines), function(s, item)
    for _ = 1, m do
      if s:expired() then return end
      local ok, err = pcall(s.create_version, s, item)
      if not ok and kb.is_cancelled(err) then error(err, 0) end
      if s.p.version_pause_sec > 0 then s:sleep(s.p.version_pause_sec) end
    end
  end)
  self.versions_requested = (self.versions_requested or 0) + m * #made(self.pipelines)
  self.progress:milestone(string.format("%d pipeline versions created", self:version_count()))
end

function Session:version_count()
  local n = 0
  for _, item in ipairs(self.pipelines) do n = n + #item.versions end
  return n
end

--- ListPipelineVersions of every pipeline (timed: pipeline_version.list).
function Session:list_versions()
  if not self.p.measure_list then return end
  each(self, made(self.pipelines), function(s, item)
    s.c:list_all_pipeline_versions{ pipeline_id = item.id, page_size = 200 }
  end)
end

--- GetPipeline of every pipeline (notebook step 3, timed: pipeline.get).
function Session:get_pipelines()
  each(self, made(self.pipelines), function(s, item) s.c:get_pipeline(item.id) end)
end

--- Deletes every pipeline with its versions (notebook step 4, timed:
-- pipeline.delete; on v1beta1 the versions are deleted first, timed as
-- pipeline_version.delete).
function Session:delete_pipelines()
  each(self, made(self.pipelines), function(s, item)
    if item.deleted then return end
    s.c:delete_pipeline(item.id, { cascade = true })
    item.deleted = true
    s.gone[item.id] = true
  end)
end

-- ---- the result ---------------------------------------------------------------------

local OPS = { "pipeline.create", "pipeline.upload", "pipeline_version.create",
  "pipeline_version.upload", "pipeline_version.list", "pipeline.get", "pipeline.delete" }

local function op_counts(s)
  local ok, failed = 0, 0
  for _, op in ipairs(OPS) do
    local h = metrics.get(op)
    ok = ok + (h and h:summary().count or 0)
    for _, e in pairs(s.errors) do failed = failed + (e.ops[op] or 0) end
  end
  return ok, failed
end

--- The result: pipelines {requested, created, deleted}, versions
-- {requested, created}, calls {succeeded, failed}, success_rate (share of
-- the notebook's calls that succeeded), errors, server_metrics,
-- server_vs_client, clock, target, cleanup, elapsed.
function M.result(s)
  local ok, failed = op_counts(s)
  local errors, nerr = {}, 0
  for class, e in pairs(s.errors) do
    errors[class] = { count = e.count, ops = e.ops, samples = e.samples }
    nerr = nerr + e.count
  end
  local server = s:server_metrics()
  local deleted = 0
  for _, item in ipairs(s.pipelines) do if item.deleted then deleted = deleted + 1 end end
  return {
    pipelines = { requested = #s.pipelines, created = #made(s.pipelines), deleted = deleted },
    versions = { requested = s.versions_requested or 0, created = s:version_count() },
    calls = { succeeded = ok, failed = failed },
    success_rate = ok + failed > 0 and ok / (ok + failed) or 0,
    outcomes = { Succeeded = ok, Failed = failed },
    errors = errors, error_count = nerr,
    server_metrics = server, server_vs_client = out.server_vs_client(server),
    clock = s.clock, target = { url = s.url, api = s.p.api },
    cleanup = s.cleaned and { deleted = s.cleaned, failures = s.cleanup_failures or 0,
      errors = s.cleanup_errors } or nil,
    elapsed = s:elapsed(),
  }
end

--- Hands the samples and outcomes to the report and prints a summary line.
function M.write(s, r)
  if s.exp then
    local ok, err = pcall(function()
      local samples = {}
      for op, list in pairs(s.samples) do samples[op] = list end
      require("kb.report").attach{ samples = samples, outcomes = r.outcomes }
    end)
    if not ok then log.warn("storm: report data: %s", tostring(err)) end
  end
  log.info("storm: %d/%d pipelines, %d/%d versions, %d calls failed", r.pipelines.created,
    r.pipelines.requested, r.versions.created, r.versions.requested, r.calls.failed)
end

--- Options for kb.report (the notebook's plot order, the server-side table
-- and the errors): use as a scenario's `report` field.
function M.report(doc)
  local opts = out.report(doc)
  opts.order = { "pipeline.create", "pipeline_version.create", "pipeline.get", "pipeline.delete",
    "pipeline_version.list" }
  return opts
end

return M
