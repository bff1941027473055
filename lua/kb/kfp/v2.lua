--- kb.kfp.v2: the kb.kfp methods on the v2beta1 REST API (KFP 2.x).
-- Internal: each function takes the client (for c:request and defaults) and
-- the method's arguments; kb.kfp documents them.
local C = require "kb.kfp.common"
local states = require "kb.kfp.states"

local str, tbl, need, need_id, seg = C.str, C.tbl, C.need, C.need_id, C.seg
local time = C.parse_time

local V = { api = "v2beta1" }

-- ---- normalisers -------------------------------------------------------------

local function status_message(e)
  if type(e) == "table" then return str(e.message) end
  return str(e)
end

function V.pipeline(p)
  return {
    id = str(p.pipeline_id), name = str(p.name), display_name = str(p.display_name) or str(p.name),
    description = str(p.description), created_at = time(p.created_at),
    namespace = str(p.namespace), error = status_message(p.error), raw = p,
  }
end

function V.version(v)
  return {
    id = str(v.pipeline_version_id), pipeline_id = str(v.pipeline_id), name = str(v.name),
    display_name = str(v.display_name) or str(v.name), description = str(v.description),
    created_at = time(v.created_at), package_url = str(tbl(v.package_url).pipeline_url),
    error = status_message(v.error), raw = v,
  }
end

function V.experiment(e)
  return {
    id = str(e.experiment_id), name = str(e.display_name), description = str(e.description),
    created_at = time(e.created_at), namespace = str(e.namespace),
    storage_state = str(e.storage_state), last_run_created_at = time(e.last_run_created_at), raw = e,
  }
end

function V.run(r)
  local state = states.from_v2(r.state)
  local ref = tbl(r.pipeline_version_reference)
  return {
    id = str(r.run_id), name = str(r.display_name), description = str(r.description),
    state = state, state_raw = str(r.state), finished = states.is_finished(state),
    succeeded = state == "Succeeded",
    created_at = time(r.created_at), scheduled_at = time(r.scheduled_at),
    finished_at = time(r.finished_at), error = status_message(r.error),
    experiment_id = str(r.experiment_id), pipeline_id = str(ref.pipeline_id),
    pipeline_version_id = str(ref.pipeline_version_id) or str(r.pipeline_version_id),
    recurring_run_id = str(r.recurring_run_id), storage_state = str(r.storage_state), raw = r,
  }
end

function V.recurring_run(j)
  local cron, interval = C.trigger_fields(j.trigger)
  local ref = tbl(j.pipeline_version_reference)
  local enabled
  if j.status == "ENABLED" or j.status == "DISABLED" then enabled = j.status == "ENABLED"
  else enabled = j.mode == "ENABLE" end
  return {
    id = str(j.recurring_run_id), name = str(j.display_name), description = str(j.description),
    enabled = enabled, mode = str(j.mode), status = str(j.status), cron = cron,
    interval_seconds = interval, max_concurrency = math.tointeger(tonumber(j.max_concurrency)),
    no_catchup = j.no_catchup == true, experiment_id = str(j.experiment_id),
    namespace = str(j.namespace), pipeline_id = str(ref.pipeline_id),
    pipeline_version_id = str(ref.pipeline_version_id) or str(j.pipeline_version_id),
    created_at = time(j.created_at), updated_at = time(j.updated_at),
    error = status_message(j.error), raw = j,
  }
end

-- ---- pipelines and versions --------------------------------------------------------

local function pipeline_body(a)
  return { name = a.name, display_name = a.display_name, description = a.description,
    namespace = a.namespace }
end

function V.create_pipeline_version(c, a)
  a = C.args(a, "create_pipeline_version")
  local pid = need(a, "pipeline_id", "create_pipeline_version")
  need(a, "name", "create_pipeline_version")
  need(a, "url", "create_pipeline_version")
  local path = "/pipelines/" .. seg(pid) .. "/versions"
  return V.version(c:request{ op = "pipeline_version.create", method = "POST", path = path,
    recover = C.finder(c, 2, "pipeline_version.create", path, nil, "pipeline_versions", "name",
      "name", a.name),
    body = { pipeline_id = pid, name = a.name, display_name = a.display_name,
      description = a.description, package_url = { pipeline_url = a.url },
      code_source_url = a.code_source_url } })
end

function V.create_pipeline(c, a)
  a = C.args(a, "create_pipeline")
  need(a, "name", "create_pipeline")
  local p = V.pipeline(c:request{ op = "pipeline.create", method = "POST", path = "/pipelines",
    body = pipeline_body(a), recover = C.finder(c, 2, "pipeline.create", "/pipelines",
      { namespace = a.namespace }, "pipelines", "name", "name", a.name) })
  if a.url ~= nil then
    -- v2beta1 creates a pipeline empty; its first version comes from the URL.
    local ok, v = pcall(V.create_pipeline_version, c, { pipeline_id = p.id,
      name = a.version_name or a.name, url = a.url, description = a.description })
    if not ok then
      pcall(V.delete_pipeline, c, p.id) -- leave nothing half-made behind
      error(v, 0)
    end
    p.default_version_id, p.default_version = v.id, v
  end
  return p
end

function V.create_pipeline_and_version(c, a)
  a = C.args(a, "create_pipeline_and_version")
  need(a, "name", "create_pipeline_and_version")
  need(a, "url", "create_pipeline_and_version")
  return V.pipeline(c:request{ op = "pipeline.create_and_version", method = "POST",
    path = "/pipelines/create", recover = C.finder(c, 2, "pipeline.create_and_version", "/pipelines",
      { namespace = a.namespace }, "pipelines", "name", "name", a.name),
    body = { pipeline = pipeline_body(a),
      pipeline_version = { name = a.version_name or a.name, display_name = a.version_display_name,
        description = a.description, package_url = { pipeline_url = a.url },
        code_source_url = a.code_source_url } } })
end

function V.upload_pipeline(c, a)
  a = C.args(a, "upload_pipeline")
  local part = C.upload_part(a, "upload_pipeline")
  return V.pipeline(c:request{ op = "pipeline.upload", method = "POST", path = "/pipelines/upload",
    query = { name = a.name, display_name = a.display_name, description = a.description,
      namespace = a.namespace }, multipart = { part },
    recover = a.name and C.finder(c, 2, "pipeline.upload", "/pipelines", { namespace = a.namespace },
      "pipelines", "name", "name", a.name) or nil })
end

function V.upload_pipeline_version(c, a)
  a = C.args(a, "upload_pipeline_version")
  local pid = need(a, "pipeline_id", "upload_pipeline_version")
  local part = C.upload_part(a, "upload_pipeline_version")
  return V.version(c:request{ op = "pipeline_version.upload", method = "POST",
    path = "/pipelines/upload_version",
    query = { pipelineid = pid, name = a.name, display_name = a.display_name,
      description = a.description }, multipart = { part },
    recover = a.name and C.finder(c, 2, "pipeline_version.upload",
      "/pipelines/" .. seg(pid) .. "/versions", nil, "pipeline_versions", "name", "name", a.name)
      or nil })
end

function V.get_pipeline(c, id)
  need_id(id, "pipeline", "get_pipeline")
  return V.pipeline(c:request{ op = "pipeline.get", method = "GET", path = "/pipelines/" .. seg(id) })
end

function V.get_pipeline_by_name(c, name, namespace)
  need_id(name, "pipeline name", "get_pipeline_by_name")
  return V.pipeline(c:request{ op = "pipeline.get_by_name", method = "GET",
    path = "/pipelines/names/" .. seg(name), query = { namespace = namespace } })
end

function V.list_pipelines(c, a)
  a = C.args(a, "list_pipelines")
  local doc = c:request{ op = "pipeline.list", method = "GET", path = "/pipelines",
    query = C.list_query(a, { namespace = a.namespace }) }
  return C.page(doc, "pipelines", V.pipeline)
end

function V.get_pipeline_version(c, pipeline_id, version_id)
  need_id(pipeline_id, "pipeline", "get_pipeline_version")
  need_id(version_id, "pipeline version", "get_pipeline_version")
  return V.version(c:request{ op = "pipeline_version.get", method = "GET",
    path = "/pipelines/" .. seg(pipeline_id) .. "/versions/" .. seg(version_id) })
end

function V.list_pipeline_versions(c, a)
  a = C.args(a, "list_pipeline_versions")
  local pid = need(a, "pipeline_id", "list_pipeline_versions")
  local doc = c:request{ op = "pipeline_version.list", method = "GET",
    path = "/pipelines/" .. seg(pid) .. "/versions", query = C.list_query(a) }
  return C.page(doc, "pipeline_versions", V.version)
end

function V.delete_pipeline_version(c, pipeline_id, version_id)
  need_id(pipeline_id, "pipeline", "delete_pipeline_version")
  need_id(version_id, "pipeline version", "delete_pipeline_version")
  c:request{ op = "pipeline_version.delete", method = "DELETE",
    path = "/pipelines/" .. seg(pipeline_id) .. "/versions/" .. seg(version_id) }
  return true
end

-- True for the server's refusal to delete a pipeline that still has versions
-- (a 2.x server older than the cascade parameter ignores it and says so).
local function has_versions_error(err)
  return type(err) == "table" and err.status == 400 and type(err.server_message) == "string"
    and err.server_message:lower():find("version", 1, true) ~= nil
end

function V.delete_pipeline(c, id, opts)
  need_id(id, "pipeline", "delete_pipeline")
  opts = C.args(opts, "delete_pipeline")
  local path = "/pipelines/" .. seg(id)
  if not opts.cascade then
    c:request{ op = "pipeline.delete", method = "DELETE", path = path }
    return true
  end
  local ok, err = pcall(c.request, c, { op = "pipeline.delete", method = "DELETE", path = path,
    query = { cascade = true } })
  if ok then return true end
  if not has_versions_error(err) then error(err, 0) end
  c:delete_pipeline_versions(id)
  c:request{ op = "pipeline.delete", method = "DELETE", path = path }
  return true
end

-- ---- experiments -----------------------------------------------------------------

function V.create_experiment(c, a)
  a = C.args(a, "create_experiment")
  need(a, "name", "create_experiment")
  local ns = a.namespace or c.namespace
  return V.experiment(c:request{ op = "experiment.create", method = "POST", path = "/experiments",
    body = { display_name = a.name, description = a.description, namespace = ns },
    recover = C.finder(c, 2, "experiment.create", "/experiments", { namespace = ns }, "experiments",
      "display_name", "display_name", a.name) })
end

function V.list_experiments(c, a)
  a = C.args(a, "list_experiments")
  local doc = c:request{ op = "experiment.list", method = "GET", path = "/experiments",
    query = C.list_query(a, { namespace = a.namespace or c.namespace }) }
  return C.page(doc, "experiments", V.experiment)
end

-- get, delete, archive, unarchive: the same paths in both APIs
C.experiment_methods(V)

-- ---- runs ------------------------------------------------------------------------

-- pipeline_version_reference and runtime_config of a run or recurring run.
local function pipeline_fields(body, a, fn)
  if a.pipeline_spec ~= nil then
    if type(a.pipeline_spec) ~= "table" then
      error("kb.kfp: " .. fn .. ": pipeline_spec= must be the pipeline IR as a table", 0)
    end
    body.pipeline_spec = a.pipeline_spec
  elseif a.pipeline_id ~= nil then
    need(a, "pipeline_id", fn)
    body.pipeline_version_reference = { pipeline_id = a.pipeline_id,
      pipeline_version_id = a.pipeline_version_id }
  elseif a.pipeline_version_id ~= nil then
    error("kb.kfp: " .. fn .. ": v2beta1 needs pipeline_id= together with pipeline_version_id=", 0)
  else
    error("kb.kfp: " .. fn .. " needs pipeline_id= (and optionally pipeline_version_id=; "
      .. "without it the latest version runs) or pipeline_spec=", 0)
  end
  if a.params ~= nil and type(a.params) ~= "table" then
    error("kb.kfp: " .. fn .. ": params= must be a table {name = value}", 0)
  end
  if (a.params ~= nil and next(a.params) ~= nil) or a.pipeline_root ~= nil then
    body.runtime_config = { parameters = a.params, pipeline_root = a.pipeline_root }
  end
  body.service_account = a.service_account
  return body
end

-- What a status poll leaves undecoded (create_run, get_run and
-- list_runs with status_only):
-- the pipeline's spec and manifests, tens of KB a run, never read by one.
local STATUS_SKIP = { pipeline_spec = true, run_details = true }

function V.create_run(c, a)
  a = C.args(a, "create_run")
  need(a, "name", "create_run")
  local body = pipeline_fields({ display_name = a.name, description = a.description,
    experiment_id = a.experiment_id }, a, "create_run")
  return V.run(c:request{ op = "run.create", method = "POST", path = "/runs", body = body,
    skip = a.status_only and STATUS_SKIP or nil,
    recover = C.finder(c, 2, "run.create", "/runs", { experiment_id = a.experiment_id,
      namespace = not a.experiment_id and c.namespace or nil }, "runs", "display_name",
      "display_name", a.name) })
end

function V.get_run(c, id, opts)
  need_id(id, "run", "get_run")
  return V.run(c:request{ op = "run.get", method = "GET", path = "/runs/" .. seg(id),
    skip = opts and opts.status_only and STATUS_SKIP or nil })
end

function V.list_runs(c, a)
  a = C.args(a, "list_runs")
  local doc = c:request{ op = "run.list", method = "GET", path = "/runs",
    skip = a.status_only and STATUS_SKIP or nil,
    query = C.list_query(a, { experiment_id = a.experiment_id,
      namespace = a.namespace or c.namespace }) }
  return C.page(doc, "runs", V.run)
end

local function run_action(op, verb)
  return C.object_action("/runs/", "run", "_run", op, verb)
end

V.delete_run = run_action("run.delete", "delete")
V.archive_run = run_action("run.archive", "archive")
V.unarchive_run = run_action("run.unarchive", "unarchive")
V.terminate_run = run_action("run.terminate", "terminate")
V.retry_run = run_action("run.retry", "retry")

-- ---- recurring runs -------------------------------------------------------------

function V.create_recurring_run(c, a)
  a = C.args(a, "create_recurring_run")
  need(a, "name", "create_recurring_run")
  local body = pipeline_fields({ display_name = a.name, description = a.description,
    experiment_id = a.experiment_id,
    trigger = C.trigger(a, "create_recurring_run"),
    max_concurrency = C.int64(a.max_concurrency, "max_concurrency"),
    no_catchup = a.no_catchup, mode = a.enabled == false and "DISABLE" or "ENABLE" },
    a, "create_recurring_run")
  return V.recurring_run(c:request{ op = "recurring_run.create", method = "POST",
    path = "/recurringruns", body = body,
    recover = C.finder(c, 2, "recurring_run.create", "/recurringruns",
      { experiment_id = a.experiment_id, namespace = not a.experiment_id and c.namespace or nil },
      "recurringRuns", "display_name", "display_name", a.name) })
end

function V.get_recurring_run(c, id)
  need_id(id, "recurring run", "get_recurring_run")
  return V.recurring_run(c:request{ op = "recurring_run.get", method = "GET",
    path = "/recurringruns/" .. seg(id) })
end

function V.list_recurring_runs(c, a)
  a = C.args(a, "list_recurring_runs")
  local doc = c:request{ op = "recurring_run.list", method = "GET", path = "/recurringruns",
    query = C.list_query(a, { experiment_id = a.experiment_id,
      namespace = a.namespace or c.namespace }) }
  -- The server writes this one key in camelCase.
  local key = doc.recurringRuns ~= nil and "recurringRuns" or "recurring_runs"
  return C.page(doc, key, V.recurring_run)
end

local function recurring_action(op, verb)
  return C.object_action("/recurringruns/", "recurring run", "_recurring_run", op, verb)
end

V.delete_recurring_run = recurring_action("recurring_run.delete", "delete")
V.enable_recurring_run = recurring_action("recurring_run.enable", "enable")
V.disable_recurring_run = recurring_action("recurring_run.disable", "disable")

-- ---- health ----------------------------------------------------------------------

function V.healthz(c)
  return C.healthz(c:request{ op = "healthz.get", method = "GET", path = "/healthz" })
end

return V
