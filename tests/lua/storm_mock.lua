-- A small in-memory KFP API server (v2beta1 and v1beta1) on kb.httpd for
-- the run-storm tests: pipelines with versions, experiments, runs whose
-- progress is scripted per run, /metrics with per-handler counters and a
-- grpc_server_handling_seconds histogram, and KFP 2.x's refusal to delete a
-- pipeline that still has versions without cascade.
--
--   local mock = require("storm_mock").start{
--     script = function(i) return { polls = 2, final = "SUCCEEDED" } end,
--     fail = function(op, n) return op == "CreateRun" and n == 2 end,  -- 503
--   }
--   ... mock.url, mock.state, mock.log (every request), mock:close()
local kb = require "kb"
local httpd = require "kb.httpd"
local json = require "kb.json"
local states = require "kb.kfp.states"

local M = {}

local JSON = { ["Content-Type"] = "application/json" }

local function now() return math.floor(kb.time()) end
local function ts(t) return states.format_time(t) end

local function unescape(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

local function query(q)
  local t = {}
  for pair in (q or ""):gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=(.*)$")
    if k then t[unescape(k)] = unescape(v) end
  end
  return t
end

local Mock = {}
Mock.__index = Mock

function Mock:id(prefix)
  self.next_id = self.next_id + 1
  return string.format("%s-%04d", prefix, self.next_id)
end

local function grpc_error(status, code, msg)
  return status, { code = code, message = msg, details = json.array({}) }
end

-- ---- the model ------------------------------------------------------------------------

function Mock:new_pipeline(name, with_version)
  local p = { id = self:id("p"), name = name, versions = {}, created_at = now() }
  self.state.pipelines[p.id] = p
  if with_version then self:new_version(p, name) end
  return p
end

function Mock:new_version(p, name)
  local v = { id = self:id("v"), name = name, pipeline_id = p.id, created_at = now() }
  p.versions[#p.versions + 1] = v
  return v
end

function Mock:new_run(name, experiment_id)
  local index = self.run_count + 1
  self.run_count = index
  local script = self.script(index) or {}
  local r = { id = self:id("r"), name = name, experiment_id = experiment_id, index = index,
    created_at = now(), polls = 0, script = script, state = "PENDING" }
  self.state.runs[r.id] = r
  self.state.run_order[#self.state.run_order + 1] = r.id
  return r
end

-- Every GET moves a run along its script: `polls` GETs, then `final`
-- (nil: it never ends).
function Mock:advance(r)
  if r.finished_at or r.state == "CANCELED" then return end
  r.polls = r.polls + 1
  r.state = "RUNNING"
  if r.script.final and r.polls >= (r.script.polls or 1) then
    r.state, r.finished_at = r.script.final, now()
  end
end

-- ---- JSON of both API versions --------------------------------------------------------

local function v2_run(r)
  return { run_id = r.id, display_name = r.name, experiment_id = r.experiment_id,
    state = r.state, created_at = ts(r.created_at), scheduled_at = ts(r.created_at),
    finished_at = r.finished_at and ts(r.finished_at) or "1970-01-01T00:00:00Z",
    storage_state = "AVAILABLE" }
end

local V1_STATUS = { PENDING = "Pending", RUNNING = "Running", SUCCEEDED = "Succeeded",
  FAILED = "Failed", CANCELED = "Failed", CANCELING = "Terminating" }

local function v1_run(r)
  return { id = r.id, name = r.name, status = V1_STATUS[r.state],
    created_at = ts(r.created_at), scheduled_at = ts(r.created_at),
    finished_at = r.finished_at and ts(r.finished_at) or "1970-01-01T00:00:00Z",
    resource_references = { { key = { type = "EXPERIMENT", id = r.experiment_id }, relationship = "OWNER" } } }
end

local function v1_pipeline(p)
  local v = p.versions[1]
  return { id = p.id, name = p.name, created_at = ts(p.created_at),
    default_version = v and { id = v.id, name = v.name, created_at = ts(v.created_at) } or nil }
end

-- ---- routes -------------------------------------------------------------------------

local routes = {}

local function route(method, pattern, op, fn)
  routes[#routes + 1] = { method = method, pattern = "^" .. pattern .. "$", op = op, fn = fn }
end

-- v2beta1
route("POST", "/apis/v2beta1/pipelines", "CreatePipeline", function(m, req)
  local p = m:new_pipeline(req.body.name or req.body.display_name, false)
  return 200, { pipeline_id = p.id, name = p.name, display_name = p.name, created_at = ts(p.created_at) }
end)
route("POST", "/apis/v2beta1/pipelines/upload", "UploadPipeline", function(m, req)
  local p = m:new_pipeline(req.q.name or "uploaded", true)
  m.state.uploads = m.state.uploads + 1
  return 200, { pipeline_id = p.id, name = p.name, display_name = p.name, created_at = ts(p.created_at) }
end)
route("POST", "/apis/v2beta1/pipelines/([^/]+)/versions", "CreatePipelineVersion", function(m, req, pid)
  local p = m.state.pipelines[pid]
  if not p then return grpc_error(404, 5, "pipeline not found") end
  m.state.urls[#m.state.urls + 1] = req.body.package_url and req.body.package_url.pipeline_url
  local v = m:new_version(p, req.body.name)
  return 200, { pipeline_id = pid, pipeline_version_id = v.id, name = v.name, created_at = ts(v.created_at) }
end)
route("GET", "/apis/v2beta1/pipelines/([^/]+)/versions", "ListPipelineVersions", function(m, _, pid)
  local p = m.state.pipelines[pid]
  local items = json.array({})
  for _, v in ipairs(p and p.versions or {}) do
    items[#items + 1] = { pipeline_id = pid, pipeline_version_id = v.id, name = v.name }
  end
  return 200, { pipeline_versions = items, total_size = #items }
end)
route("DELETE", "/apis/v2beta1/pipelines/([^/]+)/versions/([^/]+)", "DeletePipelineVersion",
  function(m, _, pid, vid)
    local p = m.state.pipelines[pid]
    for i, v in ipairs(p and p.versions or {}) do
      if v.id == vid then table.remove(p.versions, i) return 200, {} end
    end
    return grpc_error(404, 5, "version not found")
  end)
route("DELETE", "/apis/v2beta1/pipelines/([^/]+)", "DeletePipeline", function(m, req, pid)
  local p = m.state.pipelines[pid]
  if not p then return grpc_error(404, 5, "pipeline not found") end
  if #p.versions > 0 and req.q.cascade ~= "true" then
    return grpc_error(400, 9, "Failed to delete pipeline " .. pid .. ": has existing pipeline "
      .. "versions. Set cascade=true")
  end
  m.state.pipelines[pid] = nil
  return 200, {}
end)
route("POST", "/apis/v2beta1/experiments", "CreateExperiment", function(m, req)
  local id = m:id("e")
  m.state.experiments[id] = { id = id, name = req.body.display_name }
  return 200, { experiment_id = id, display_name = req.body.display_name }
end)
-- the filter of a list call: name EQUALS (the one predicate kb.kfp.storm sends)
local function name_filter(req)
  local f = req.q.filter and json.decode(req.q.filter)
  local p = f and f.predicates and f.predicates[1]
  return p and p.string_value
end
route("GET", "/apis/v2beta1/experiments", "ListExperiments", function(m, req)
  local want, items = name_filter(req), json.array({})
  for id, e in pairs(m.state.experiments) do
    if want == nil or e.name == want then items[#items + 1] = { experiment_id = id, display_name = e.name } end
  end
  return 200, { experiments = items, total_size = #items }
end)
route("GET", "/apis/v2beta1/pipelines", "ListPipelines", function(m, req)
  local want, items = name_filter(req), json.array({})
  for id, p in pairs(m.state.pipelines) do
    if want == nil or p.name == want then items[#items + 1] = { pipeline_id = id, name = p.name } end
  end
  return 200, { pipelines = items, total_size = #items }
end)
route("DELETE", "/apis/v2beta1/experiments/([^/]+)", "DeleteExperiment", function(m, _, id)
  if not m.state.experiments[id] then return grpc_error(404, 5, "experiment not found") end
  m.state.experiments[id] = nil
  return 200, {}
end)
route("POST", "/apis/v2beta1/runs", "CreateRun", function(m, req)
  m.state.run_bodies[#m.state.run_bodies + 1] = req.body
  return 200, v2_run(m:new_run(req.body.display_name, req.body.experiment_id))
end)
route("GET", "/apis/v2beta1/runs/([^/:]+)", "GetRun", function(m, _, id)
  local r = m.state.runs[id]
  if not r then return grpc_error(404, 5, "run not found") end
  m:advance(r)
  m.state.gets[#m.state.gets + 1] = r.index
  return 200, v2_run(r)
end)
route("GET", "/apis/v2beta1/runs", "ListRuns", function(m, req)
  local items = json.array({})
  for _, id in ipairs(m.state.run_order) do
    local r = m.state.runs[id]
    if r and (req.q.experiment_id == nil or r.experiment_id == req.q.experiment_id) then
      items[#items + 1] = v2_run(r)
    end
  end
  return 200, { runs = items, total_size = #items }
end)
route("DELETE", "/apis/v2beta1/runs/([^/:]+)", "DeleteRun", function(m, _, id)
  if not m.state.runs[id] then return grpc_error(404, 5, "run not found") end
  m.state.runs[id] = nil
  return 200, {}
end)
route("POST", "/apis/v2beta1/runs/([^/:]+):terminate", "TerminateRun", function(m, _, id)
  local r = m.state.runs[id]
  if not r then return grpc_error(404, 5, "run not found") end
  r.state, r.finished_at = "CANCELED", now()
  m.state.terminated[#m.state.terminated + 1] = id
  return 200, {}
end)

-- v1beta1
route("POST", "/apis/v1beta1/pipelines", "CreatePipelineV1", function(m, req)
  m.state.urls[#m.state.urls + 1] = req.body.url and req.body.url.pipeline_url
  return 200, v1_pipeline(m:new_pipeline(req.body.name, true))
end)
route("POST", "/apis/v1beta1/pipelines/upload", "UploadPipelineV1", function(m, req)
  m.state.uploads = m.state.uploads + 1
  return 200, v1_pipeline(m:new_pipeline(req.q.name or "uploaded", true))
end)
route("POST", "/apis/v1beta1/pipelines/upload_version", "UploadPipelineVersionV1", function(m, req)
  local p = m.state.pipelines[req.q.pipelineid or ""]
  if not p then return 400, { error_message = "pipeline not found" } end
  local v = m:new_version(p, req.q.name or "uploaded")
  return 200, { id = v.id, name = v.name, created_at = ts(v.created_at) }
end)
route("POST", "/apis/v1beta1/pipeline_versions", "CreatePipelineVersionV1", function(m, req)
  local pid
  for _, ref in ipairs(req.body.resource_references or {}) do
    if ref.key.type == "PIPELINE" then pid = ref.key.id end
  end
  local p = m.state.pipelines[pid or ""]
  if not p then return grpc_error(404, 5, "pipeline not found") end
  m.state.urls[#m.state.urls + 1] = req.body.package_url and req.body.package_url.pipeline_url
  local v = m:new_version(p, req.body.name)
  return 200, { id = v.id, name = v.name, created_at = ts(v.created_at) }
end)
route("GET", "/apis/v1beta1/pipelines/([^/]+)", "GetPipelineV1", function(m, _, pid)
  local p = m.state.pipelines[pid]
  if not p then return grpc_error(404, 5, "pipeline not found") end
  return 200, v1_pipeline(p)
end)
route("GET", "/apis/v1beta1/pipeline_versions", "ListPipelineVersionsV1", function(m, req)
  local p = m.state.pipelines[req.q["resource_key.id"] or ""]
  local items = json.array({})
  for _, v in ipairs(p and p.versions or {}) do items[#items + 1] = { id = v.id, name = v.name } end
  return 200, { versions = items, total_size = #items }
end)
route("DELETE", "/apis/v1beta1/pipeline_versions/([^/]+)", "DeletePipelineVersionV1", function(m, _, vid)
  for _, p in pairs(m.state.pipelines) do
    for i, v in ipairs(p.versions) do
      if v.id == vid then table.remove(p.versions, i) return 200, {} end
    end
  end
  return grpc_error(404, 5, "version not found")
end)
route("DELETE", "/apis/v1beta1/pipelines/([^/]+)", "DeletePipelineV1", function(m, _, pid)
  local p = m.state.pipelines[pid]
  if not p then return grpc_error(404, 5, "pipeline not found") end
  if #p.versions > 0 then
    return grpc_error(400, 3, "Failed to delete pipeline " .. pid .. ": has existing pipeline "
      .. "versions. Set cascade=true")
  end
  m.state.pipelines[pid] = nil
  return 200, {}
end)
route("POST", "/apis/v1beta1/experiments", "CreateExperimentV1", function(m, req)
  local id = m:id("e")
  m.state.experiments[id] = { id = id, name = req.body.name }
  return 200, { id = id, name = req.body.name }
end)
route("DELETE", "/apis/v1beta1/experiments/([^/]+)", "DeleteExperimentV1", function(m, _, id)
  if not m.state.experiments[id] then return grpc_error(404, 5, "experiment not found") end
  m.state.experiments[id] = nil
  return 200, {}
end)
route("POST", "/apis/v1beta1/runs", "CreateRunV1", function(m, req)
  m.state.run_bodies[#m.state.run_bodies + 1] = req.body
  local exp
  for _, ref in ipairs(req.body.resource_references or {}) do
    if ref.key.type == "EXPERIMENT" then exp = ref.key.id end
  end
  return 200, { run = v1_run(m:new_run(req.body.name, exp)) }
end)
route("GET", "/apis/v1beta1/runs/([^/:]+)", "GetRunV1", function(m, _, id)
  local r = m.state.runs[id]
  if not r then return grpc_error(404, 5, "run not found") end
  m:advance(r)
  m.state.gets[#m.state.gets + 1] = r.index
  return 200, { run = v1_run(r), pipeline_runtime = { workflow_manifest = "{}" } }
end)
route("GET", "/apis/v1beta1/runs", "ListRunsV1", function(m, req)
  local items = json.array({})
  for _, id in ipairs(m.state.run_order) do
    local r = m.state.runs[id]
    if r and r.experiment_id == req.q["resource_reference_key.id"] then items[#items + 1] = v1_run(r) end
  end
  return 200, { runs = items, total_size = #items }
end)
route("DELETE", "/apis/v1beta1/runs/([^/:]+)", "DeleteRunV1", function(m, _, id)
  if not m.state.runs[id] then return grpc_error(404, 5, "run not found") end
  m.state.runs[id] = nil
  return 200, {}
end)
route("POST", "/apis/v1beta1/runs/([^/:]+)/terminate", "TerminateRunV1", function(m, _, id)
  local r = m.state.runs[id]
  if not r then return grpc_error(404, 5, "run not found") end
  r.state, r.finished_at = "CANCELED", now()
  m.state.terminated[#m.state.terminated + 1] = id
  return 200, {}
end)

-- ---- /metrics -----------------------------------------------------------------------

local HANDLERS = {
  CreateRun = "run_server_create_requests", GetRun = "run_server_get_requests",
  ListRuns = "run_server_list_requests", DeleteRun = "run_server_delete_requests",
  CreatePipeline = "pipeline_server_create_requests", CreateExperiment = "experiment_server_create_requests",
}

function Mock:metrics_text()
  local out = {}
  for method, name in pairs(HANDLERS) do
    local n = (self.counts[method] or 0) + (self.counts[method .. "V1"] or 0)
    out[#out + 1] = string.format("# TYPE %s counter\n%s %d", name, name, n)
  end
  out[#out + 1] = "# TYPE run_server_run_count gauge\nrun_server_run_count " .. self.run_count
  out[#out + 1] = "# TYPE grpc_server_handling_seconds histogram"
  out[#out + 1] = "# TYPE grpc_server_handled_total counter"
  for method, n in pairs(self.counts) do
    local l = string.format('grpc_method="%s",grpc_service="api.Service",grpc_type="unary"', method)
    -- every call took 0.02 s: all in the 0.03 bucket
    for _, le in ipairs({ "0.005", "0.01", "0.03", "0.1", "+Inf" }) do
      local c = (le == "0.005" or le == "0.01") and 0 or n
      out[#out + 1] = string.format('grpc_server_handling_seconds_bucket{%s,le="%s"} %d', l, le, c)
    end
    out[#out + 1] = string.format("grpc_server_handling_seconds_sum{%s} %g", l, 0.02 * n)
    out[#out + 1] = string.format("grpc_server_handling_seconds_count{%s} %d", l, n)
    out[#out + 1] = string.format('grpc_server_handled_total{grpc_code="OK",%s} %d', l, n)
  end
  return table.concat(out, "\n") .. "\n"
end

-- ---- the server ---------------------------------------------------------------------

function Mock:handle(req)
  local rec = { method = req.method, path = req.path, q = query(req.query), headers = req.headers }
  local ctype = req.headers["content-type"] or ""
  if ctype:find("json", 1, true) and req.body ~= "" then rec.body = json.decode(req.body) end
  rec.body = rec.body or {}
  self.log[#self.log + 1] = rec
  if req.path == "/metrics" then
    if self.no_metrics then return 404, "404 page not found\n", { ["Content-Type"] = "text/plain" } end
    return 200, self:metrics_text(), { ["Content-Type"] = "text/plain; version=0.0.4" }
  end
  for _, r in ipairs(routes) do
    local caps = { req.path:match(r.pattern) }
    if r.method == req.method and #caps > 0 then
      self.counts[r.op] = (self.counts[r.op] or 0) + 1
      if self.fail and self.fail(r.op, self.counts[r.op]) then
        return 503, json.encode{ code = 14, message = "mock: " .. r.op .. " unavailable" }, JSON
      end
      local h = self.hook and self.hook(r.op, self.counts[r.op], rec)
      if h and h.status then return h.status, json.encode(h.body or { code = 16, message = "mock" }), JSON end
      if h and h.delay then kb.sleep(h.delay) end -- handled after the delay, as a stalled server
      local status, body = r.fn(self, rec, table.unpack(caps))
      if h and h.hold then kb.sleep(h.hold) end -- handled, the answer held back
      local text = json.encode(body)
      if h and h.truncate then text = text:sub(1, math.max(1, #text // 2)) end
      return status, text, JSON
    end
  end
  return 404, json.encode{ code = 5, message = "mock: no route " .. req.method .. " " .. req.path }, JSON
end

--- Starts a mock. opts: script(i) -> {polls, final} for the i-th run
-- created (default: SUCCEEDED at the first GET), fail(op, n) -> true to
-- answer the n-th call of a gRPC method with 503, hook(op, n, req) -> nil
-- or {status =, body =} (answered instead), {delay = s} (handled after s
-- seconds), {hold = s} (handled, answered s seconds later), {truncate =
-- true} (handled, half the body sent), no_metrics.
function M.start(opts)
  opts = opts or {}
  local m = setmetatable({ next_id = 0, run_count = 0, counts = {}, log = {},
    script = opts.script or function() return { polls = 1, final = "SUCCEEDED" } end,
    fail = opts.fail, hook = opts.hook, no_metrics = opts.no_metrics,
    state = { pipelines = {}, experiments = {}, runs = {}, run_order = {}, gets = {},
      terminated = {}, urls = {}, uploads = 0, run_bodies = {} } }, Mock)
  m.srv = httpd.listen{ handler = function(req) return m:handle(req) end }
  m.url = m.srv.url
  return m
end

--- Objects still on the server: pipelines, experiments, runs.
function Mock:leftovers()
  local n = { pipelines = 0, experiments = 0, runs = 0 }
  for _ in pairs(self.state.pipelines) do n.pipelines = n.pipelines + 1 end
  for _ in pairs(self.state.experiments) do n.experiments = n.experiments + 1 end
  for _ in pairs(self.state.runs) do n.runs = n.runs + 1 end
  return n
end

function Mock:close() self.srv:close() end

return M
