--- kb.kfp.v1: the kb.kfp methods on the v1beta1 REST API (the API of the
-- KFP v1 SDK and of the official benchmark notebooks; still served by 2.x).
-- Internal: each function takes the client (for c:request and defaults) and
-- the method's arguments; kb.kfp documents them.
local json = require "kb.json"
local C = require "kb.kfp.common"
local states = require "kb.kfp.states"

local str, tbl, need, need_id, seg = C.str, C.tbl, C.need, C.need_id, C.seg
local time, ref, find_ref = C.parse_time, C.ref, C.find_ref

local V = { api = "v1beta1" }

-- ---- normalisers -------------------------------------------------------------

-- STORAGESTATE_AVAILABLE -> AVAILABLE, as v2beta1 spells it.
local function storage(s, default)
  s = str(s)
  if not s then return default end
  return (s:gsub("^STORAGESTATE_", ""))
end

function V.version(v)
  return {
    id = str(v.id), pipeline_id = find_ref(v.resource_references, "PIPELINE"), name = str(v.name),
    display_name = str(v.name), description = str(v.description), created_at = time(v.created_at),
    package_url = str(tbl(v.package_url).pipeline_url), raw = v,
  }
end

function V.pipeline(p)
  local default = type(p.default_version) == "table" and V.version(p.default_version) or nil
  return {
    id = str(p.id), name = str(p.name), display_name = str(p.name),
    description = str(p.description), created_at = time(p.created_at),
    namespace = find_ref(p.resource_references, "NAMESPACE"), error = str(p.error),
    default_version_id = default and default.id, default_version = default, raw = p,
  }
end

function V.experiment(e)
  return {
    id = str(e.id), name = str(e.name), description = str(e.description),
    created_at = time(e.created_at), namespace = find_ref(e.resource_references, "NAMESPACE"),
    storage_state = storage(e.storage_state), raw = e,
  }
end

-- A run from an ApiRunDetail {run, pipeline_runtime} (create, get) or an
-- ApiRun (list); raw is the whole document.
function V.run(doc)
  local r = type(doc.run) == "table" and doc.run or doc
  local state = states.from_v1(r.status)
  local spec, refs = tbl(r.pipeline_spec), r.resource_references
  return {
    id = str(r.id), name = str(r.name), description = str(r.description),
    state = state, state_raw = str(r.status), finished = states.is_finished(state),
    succeeded = state == "Succeeded",
    created_at = time(r.created_at), scheduled_at = time(r.scheduled_at),
    finished_at = time(r.finished_at), error = str(r.error),
    experiment_id = find_ref(refs, "EXPERIMENT"),
    pipeline_id = str(spec.pipeline_id) or find_ref(refs, "PIPELINE"),
    pipeline_version_id = find_ref(refs, "PIPELINE_VERSION"),
    recurring_run_id = find_ref(refs, "JOB"),
    -- STORAGESTATE_AVAILABLE is the enum's zero, omitted by the server
    storage_state = storage(r.storage_state, "AVAILABLE"), raw = doc,
  }
end

function V.recurring_run(j)
  local cron, interval = C.trigger_fields(j.trigger)
  local spec, refs = tbl(j.pipeline_spec), j.resource_references
  return {
    id = str(j.id), name = str(j.name), description = str(j.description),
    enabled = j.enabled == true, mode = str(j.mode), status = str(j.status), cron = cron,
    interval_seconds = interval, max_concurrency = math.tointeger(tonumber(j.max_concurrency)),
    no_catchup = j.no_catchup == true, experiment_id = find_ref(refs, "EXPERIMENT"),
    namespace = find_ref(refs, "NAMESPACE"),
    pipeline_id = str(spec.pipeline_id) or find_ref(refs, "PIPELINE"),
    pipeline_version_id = find_ref(refs, "PIPELINE_VERSION"),
    created_at = time(j.created_at), updated_at = time(j.updated_at), error = str(j.error), raw = j,
  }
end

-- resource_reference_key.type/id of a list call, when filtering by owner.
local function owner_query(q, type_, id)
  if id then
    q["resource_reference_key.type"] = type_
    q["resource_reference_key.id"] = id
  end
  return q
end

-- ---- pipelines and versions --------------------------------------------------------

local function namespace_refs(ns)
  if ns then return json.array({ ref("NAMESPACE", ns, "OWNER") }) end
  return nil
end

function V.create_pipeline(c, a)
  a = C.args(a, "create_pipeline")
  need(a, "name", "create_pipeline")
  need(a, "url", "create_pipeline")
  return V.pipeline(c:request{ op = "pipeline.create", method = "POST", path = "/pipelines",
    body = { name = a.name, description = a.description, url = { pipeline_url = a.url },
      resource_references = namespace_refs(a.namespace) },
    recover = C.finder(c, 1, "pipeline.create", "/pipelines",
      owner_query({}, "NAMESPACE", a.namespace), "pipelines", "name", "name", a.name) })
end

-- v1beta1 has no CreatePipelineAndVersion: CreatePipeline from a URL makes
-- the pipeline and its default version in one call.
V.create_pipeline_and_version = V.create_pipeline

function V.create_pipeline_version(c, a)
  a = C.args(a, "create_pipeline_version")
  local pid = need(a, "pipeline_id", "create_pipeline_version")
  need(a, "name", "create_pipeline_version")
  need(a, "url", "create_pipeline_version")
  return V.version(c:request{ op = "pipeline_version.create", method = "POST",
    path = "/pipeline_versions",
    recover = C.finder(c, 1, "pipeline_version.create", "/pipeline_versions",
      { ["resource_key.type"] = "PIPELINE", ["resource_key.id"] = pid }, "versions", "name",
      "name", a.name),
    body = { name = a.name, description = a.description, package_url = { pipeline_url = a.url },
      code_source_url = a.code_source_url,
      resource_references = json.array({ ref("PIPELINE", pid, "OWNER") }) } })
end

function V.upload_pipeline(c, a)
  a = C.args(a, "upload_pipeline")
  local part = C.upload_part(a, "upload_pipeline")
  return V.pipeline(c:request{ op = "pipeline.upload", method = "POST", path = "/pipelines/upload",
    query = { name = a.name, description = a.description, namespace = a.namespace },
    multipart = { part },
    recover = a.name and C.finder(c, 1, "pipeline.upload", "/pipelines",
      owner_query({}, "NAMESPACE", a.namespace), "pipelines", "name", "name", a.name) or nil })
end

function V.upload_pipeline_version(c, a)
  a = C.args(a, "upload_pipeline_version")
  local pid = need(a, "pipeline_id", "upload_pipeline_version")
  local part = C.upload_part(a, "upload_pipeline_version")
  return V.version(c:request{ op = "pipeline_version.upload", method = "POST",
    path = "/pipelines/upload_version",
    query = { pipelineid = pid, name = a.name, description = a.description },
    multipart = { part },
    recover = a.name and C.finder(c, 1, "pipeline_version.upload", "/pipeline_versions",
      { ["resource_key.type"] = "PIPELINE", ["resource_key.id"] = pid }, "versions", "name",
      "name", a.name) or nil })
end

function V.get_pipeline(c, id)
  need_id(id, "pipeline", "get_pipeline")
  return V.pipeline(c:request{ op = "pipeline.get", method = "GET", path = "/pipelines/" .. seg(id) })
end

function V.get_pipeline_by_name(c, name, namespace)
  need_id(name, "pipeline name", "get_pipeline_by_name")
  -- "-" stands for shared pipelines (and single-user installs)
  return V.pipeline(c:request{ op = "pipeline.get_by_name", method = "GET",
    path = "/namespaces/" .. seg(namespace or "-") .. "/pipelines/" .. seg(name) })
end

function V.list_pipelines(c, a)
  a = C.args(a, "list_pipelines")
  local doc = c:request{ op = "pipeline.list", method = "GET", path = "/pipelines",
    query = owner_query(C.list_query(a), "NAMESPACE", a.namespace) }
  return C.page(doc, "pipelines", V.pipeline)
end

function V.get_pipeline_version(c, _, version_id)
  need_id(version_id, "pipeline version", "get_pipeline_version")
  return V.version(c:request{ op = "pipeline_version.get", method = "GET",
    path = "/pipeline_versions/" .. seg(version_id) })
end

function V.list_pipeline_versions(c, a)
  a = C.args(a, "list_pipeline_versions")
  local pid = need(a, "pipeline_id", "list_pipeline_versions")
  local q = C.list_query(a)
  q["resource_key.type"], q["resource_key.id"] = "PIPELINE", pid
  local doc = c:request{ op = "pipeline_version.list", method = "GET", path = "/pipeline_versions",
    query = q }
  return C.page(doc, "versions", V.version)
end

function V.delete_pipeline_version(c, _, version_id)
  need_id(version_id, "pipeline version", "delete_pipeline_version")
  c:request{ op = "pipeline_version.delete", method = "DELETE",
    path = "/pipeline_versions/" .. seg(version_id) }
  return true
end

-- DeletePipelineV1 never cascades on 2.x, so cascade deletes the versions
-- (the uploaded default one included) first.
function V.delete_pipeline(c, id, opts)
  need_id(id, "pipeline", "delete_pipeline")
  opts = C.args(opts, "delete_pipeline")
  if opts.cascade then c:delete_pipeline_versions(id) end
  c:request{ op = "pipeline.delete", method = "DELETE", path = "/pipelines/" .. seg(id) }
  return true
end

-- ---- experiments -----------------------------------------------------------------

function V.create_experiment(c, a)
  a = C.args(a, "create_experiment")
  need(a, "name", "create_experiment")
  local ns = a.namespace or c.namespace
  return V.experiment(c:request{ op = "experiment.create", method = "POST", path = "/experiments",
    body = { name = a.name, description = a.description, resource_references = namespace_refs(ns) },
    recover = C.finder(c, 1, "experiment.create", "/experiments",
      owner_query({}, "NAMESPACE", ns), "experiments", "name", "name", a.name) })
end

function V.list_experiments(c, a)
  a = C.args(a, "list_experiments")
  local doc = c:request{ op = "experiment.list", method = "GET", path = "/experiments",
    query = owner_query(C.list_query(a), "NAMESPACE", a.namespace or c.namespace) }
  return C.page(doc, "experiments", V.experiment)
end

-- get, delete, archive, unarchive: the same paths in both APIs
C.experiment_methods(V)

-- ---- runs ------------------------------------------------------------------------

-- pipeline_spec and resource_references of a run or job, as the v1 SDK (and
-- the notebook) builds them.
local function pipeline_fields(body, a, fn)
  local refs = json.array({})
  if a.experiment_id ~= nil then
    refs[#refs + 1] = ref("EXPERIMENT", need(a, "experiment_id", fn), "OWNER")
  end
  local spec = {}
  if a.pipeline_version_id ~= nil then
    refs[#refs + 1] = ref("PIPELINE_VERSION", need(a, "pipeline_version_id", fn), "CREATOR")
  elseif a.pipeline_id ~= nil then
    spec.pipeline_id = need(a, "pipeline_id", fn)
  elseif a.workflow_manifest ~= nil then
    spec.workflow_manifest = type(a.workflow_manifest) == "table"
      and json.encode(a.workflow_manifest) or a.workflow_manifest
  else
    error("kb.kfp: " .. fn .. " needs pipeline_version_id= or pipeline_id= "
      .. "(or workflow_manifest=)", 0)
  end
  if a.params ~= nil then
    if type(a.params) ~= "table" then
      error("kb.kfp: " .. fn .. ": params= must be a table {name = value}", 0)
    end
    local list = json.array({})
    for _, k in ipairs(C.sorted_keys(a.params)) do
      list[#list + 1] = { name = k, value = C.param_text(a.params[k]) }
    end
    if #list > 0 then spec.parameters = list end
  end
  if next(spec) ~= nil then body.pipeline_spec = spec end
  if #refs > 0 then body.resource_references = refs end
  body.service_account = a.service_account
  return body
end

-- What a status poll leaves undecoded (create_run, get_run and
-- list_runs with status_only):
-- the pipeline's spec and manifests, tens of KB a run, never read by one.
local STATUS_SKIP = { pipeline_runtime = true, workflow_manifest = true, pipeline_manifest = true }

function V.create_run(c, a)
  a = C.args(a, "create_run")
  need(a, "name", "create_run")
  local body = pipeline_fields({ name = a.name, description = a.description }, a, "create_run")
  return V.run(c:request{ op = "run.create", method = "POST", path = "/runs", body = body,
    skip = a.status_only and STATUS_SKIP or nil,
    recover = C.finder(c, 1, "run.create", "/runs", a.experiment_id
      and owner_query({}, "EXPERIMENT", a.experiment_id) or owner_query({}, "NAMESPACE", c.namespace),
      "runs", "name", "name", a.name) })
end

function V.get_run(c, id, opts)
  need_id(id, "run", "get_run")
  return V.run(c:request{ op = "run.get", method = "GET", path = "/runs/" .. seg(id),
    skip = opts and opts.status_only and STATUS_SKIP or nil })
end

function V.list_runs(c, a)
  a = C.args(a, "list_runs")
  local q = C.list_query(a)
  if a.experiment_id then owner_query(q, "EXPERIMENT", a.experiment_id)
  else owner_query(q, "NAMESPACE", a.namespace or c.namespace) end
  local doc = c:request{ op = "run.list", method = "GET", path = "/runs",
    skip = a.status_only and STATUS_SKIP or nil, query = q }
  return C.page(doc, "runs", V.run)
end

-- The v1 paths are irregular: ":archive" but "/terminate".
local function run_action(op, verb, sep)
  return C.object_action("/runs/", "run", "_run", op, verb, sep)
end

V.delete_run = run_action("run.delete", "delete")
V.archive_run = run_action("run.archive", "archive", ":")
V.unarchive_run = run_action("run.unarchive", "unarchive", ":")
V.terminate_run = run_action("run.terminate", "terminate", "/")
V.retry_run = run_action("run.retry", "retry", "/")

-- ---- jobs (recurring runs) ------------------------------------------------------

function V.create_recurring_run(c, a)
  a = C.args(a, "create_recurring_run")
  need(a, "name", "create_recurring_run")
  local body = pipeline_fields({ name = a.name, description = a.description,
    trigger = C.trigger(a, "create_recurring_run"),
    max_concurrency = C.int64(a.max_concurrency, "max_concurrency"),
    no_catchup = a.no_catchup, enabled = a.enabled ~= false }, a, "create_recurring_run")
  return V.recurring_run(c:request{ op = "recurring_run.create", method = "POST", path = "/jobs",
    body = body, recover = C.finder(c, 1, "recurring_run.create", "/jobs", a.experiment_id
      and owner_query({}, "EXPERIMENT", a.experiment_id) or owner_query({}, "NAMESPACE", c.namespace),
      "jobs", "name", "name", a.name) })
end

function V.get_recurring_run(c, id)
  need_id(id, "job", "get_recurring_run")
  return V.recurring_run(c:request{ op = "recurring_run.get", method = "GET",
    path = "/jobs/" .. seg(id) })
end

function V.list_recurring_runs(c, a)
  a = C.args(a, "list_recurring_runs")
  local q = C.list_query(a)
  if a.experiment_id then owner_query(q, "EXPERIMENT", a.experiment_id)
  else owner_query(q, "NAMESPACE", a.namespace or c.namespace) end
  local doc = c:request{ op = "recurring_run.list", method = "GET", path = "/jobs", query = q }
  return C.page(doc, "jobs", V.recurring_run)
end

local function job_action(op, verb)
  return C.object_action("/jobs/", "job", "_recurring_run", op, verb, "/")
end

V.delete_recurring_run = job_action("recurring_run.delete", "delete")
V.enable_recurring_run = job_action("recurring_run.enable", "enable")
V.disable_recurring_run = job_action("recurring_run.disable", "disable")

-- ---- health ----------------------------------------------------------------------

function V.healthz(c)
  return C.healthz(c:request{ op = "healthz.get", method = "GET", path = "/healthz" })
end

return V
