-- kb.kfp: the KFP API client against loopback mock servers that record every
-- request and answer canned KFP-shaped JSON. Requests are checked exactly
-- (method, path, query, body) and, where kb.openapi is available, against
-- the swagger of their API version.
local kb = require "kb"
local T = require "kb.testing"
local httpd = require "kb.httpd"
local json = require "kb.json"
local fs = require "kb.fs"
local metrics = require "kb.metrics"
local kfp = require "kb.kfp"
local states = require "kb.kfp.states"

local has_openapi, openapi = pcall(require, "kb.openapi")
local specs = {}
local function spec(api)
  if not has_openapi then return nil end
  specs[api] = specs[api] or openapi.kfp(api, { int64 = "strict" })
  return specs[api]
end

local JSON = { ["Content-Type"] = "application/json" }

local function unescape(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

-- The raw query string of a request as a table of decoded names and values.
local function Q(q)
  local t = {}
  for pair in q:gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=(.*)$")
    t[unescape(k)] = unescape(v)
  end
  return t
end

-- A mock KFP server. routes: ["METHOD /path"] = doc (answered 200 as JSON)
-- or function(req, m) -> status, body (table: JSON; string: as is), headers.
-- m.reqs records {method, path, query (raw), q (decoded), headers, raw_body,
-- body (decoded JSON), parts (multipart)}.
local function mock(routes)
  local m = { reqs = {} }
  m.srv = httpd.listen{ handler = function(req)
    local ctype = req.headers["content-type"] or ""
    local rec = { method = req.method, path = req.path, query = req.query, q = Q(req.query),
      headers = req.headers, raw_body = req.body }
    if ctype:find("json", 1, true) and req.body ~= "" then rec.body = json.decode(req.body) end
    if ctype:find("multipart/form-data", 1, true) then
      rec.parts = httpd.parse_multipart(ctype, req.body)
    end
    m.reqs[#m.reqs + 1] = rec
    local route = routes[req.method .. " " .. req.path]
    if route == nil then
      return 404, json.encode{ code = 5, message = "mock: no route " .. req.method .. " " .. req.path }, JSON
    end
    local status, body, headers = 200, route, JSON
    if type(route) == "function" then status, body, headers = route(req, m) end
    if type(body) == "table" then body, headers = json.encode(body), headers or JSON end
    return status, body or "", headers
  end }
  m.url = m.srv.url
  return m
end

local function with_mock(routes, fn)
  local m = mock(routes)
  local ok, err = pcall(fn, m)
  m.srv:close()
  if not ok then error(err, 0) end
end

-- Validates every recorded request against the swagger of api (when
-- kb.openapi is present).
local function validate_all(m, api)
  local s = spec(api)
  if not s then return end
  for i, r in ipairs(m.reqs) do
    local body = r.raw_body
    if r.parts then
      body = {}
      for _, p in ipairs(r.parts) do body[p.name] = p.data end
    end
    local ok, errs = s:validate_request{ method = r.method, path = r.path, query = r.query,
      headers = { ["content-type"] = r.headers["content-type"] }, body = body }
    T.ok(ok, string.format("request %d %s %s?%s: %s", i, r.method, r.path, r.query,
      table.concat(errs or {}, "; ")))
  end
end

-- Asserts the exact method, path, query and JSON body of a recorded request.
local function expect(r, method, path, query, body)
  T.ok(r, "a request was made")
  T.eq(r.method, method, "method")
  T.eq(r.path, path, "path")
  T.same(r.q, query or {}, "query of " .. path)
  if body == nil then
    T.eq(r.raw_body, "", "no body for " .. method .. " " .. path)
  else
    T.same(r.body, body, "body of " .. method .. " " .. path)
  end
end

local T0 = "2024-05-01T10:00:00Z"
local T0_EPOCH = 1714557600
local ZERO = "1970-01-01T00:00:00Z"

-- ---- canned v2beta1 objects -------------------------------------------------------

local v2 = {}
function v2.pipeline() return { pipeline_id = "p1", name = "hello", display_name = "Hello", created_at = T0 } end
function v2.version(id)
  return { pipeline_id = "p1", pipeline_version_id = id or "v1", name = "hello-v1", created_at = T0,
    package_url = { pipeline_url = "https://x/p.yaml" } }
end
function v2.experiment()
  return { experiment_id = "e1", display_name = "bench", namespace = "kubeflow-user",
    storage_state = "AVAILABLE", created_at = T0 }
end
function v2.run(state, finished_at)
  return { run_id = "r1", display_name = "run-1", experiment_id = "e1", state = state or "PENDING",
    created_at = T0, scheduled_at = "2024-05-01T10:00:01Z", finished_at = finished_at or ZERO,
    storage_state = "AVAILABLE",
    pipeline_version_reference = { pipeline_id = "p1", pipeline_version_id = "v1" } }
end
function v2.recurring()
  return { recurring_run_id = "rr1", display_name = "hourly", experiment_id = "e1",
    trigger = { cron_schedule = { cron = "0 0 * * * *" } }, mode = "ENABLE", status = "ENABLED",
    max_concurrency = "2", created_at = T0, updated_at = T0,
    pipeline_version_reference = { pipeline_id = "p1", pipeline_version_id = "v1" } }
end

-- ---- canned v1beta1 objects -------------------------------------------------------

local v1 = {}
local function ref(type_, id, rel) return { key = { type = type_, id = id }, relationship = rel } end
function v1.version(id)
  return { id = id or "v1", name = "hello-v1", created_at = T0,
    package_url = { pipeline_url = "https://x/p.yaml" }, resource_references = { ref("PIPELINE", "p1", "OWNER") } }
end
function v1.pipeline()
  return { id = "p1", name = "hello", created_at = T0, url = { pipeline_url = "https://x/p.yaml" },
    default_version = v1.version() }
end
function v1.experiment()
  return { id = "e1", name = "bench", created_at = T0, storage_state = "STORAGESTATE_AVAILABLE",
    resource_references = { ref("NAMESPACE", "kubeflow-user", "OWNER") } }
end
function v1.run(status, finished_at)
  return { id = "r1", name = "run-1", status = status, created_at = T0,
    scheduled_at = "2024-05-01T10:00:01Z", finished_at = finished_at or ZERO,
    pipeline_spec = { parameters = { { name = "n", value = "3" } } },
    resource_references = { ref("EXPERIMENT", "e1", "OWNER"), ref("PIPELINE_VERSION", "v1", "CREATOR") } }
end
function v1.detail(status, finished_at)
  return { run = v1.run(status, finished_at), pipeline_runtime = { workflow_manifest = "{}" } }
end
function v1.job()
  return { id = "j1", name = "hourly", enabled = true, mode = "ENABLED", max_concurrency = "2",
    trigger = { periodic_schedule = { interval_second = "3600" } }, created_at = T0,
    resource_references = { ref("EXPERIMENT", "e1", "OWNER"), ref("PIPELINE_VERSION", "v1", "CREATOR") } }
end

-- ---- v2beta1: every call --------------------------------------------------------

local P2 = "/apis/v2beta1"

T.case("v2beta1 pipelines and versions: exact requests, normalised results", function()
  with_mock({
    ["POST " .. P2 .. "/pipelines"] = v2.pipeline(),
    ["POST " .. P2 .. "/pipelines/p1/versions"] = v2.version(),
    ["POST " .. P2 .. "/pipelines/create"] = v2.pipeline(),
    ["POST " .. P2 .. "/pipelines/upload"] = v2.pipeline(),
    ["POST " .. P2 .. "/pipelines/upload_version"] = v2.version("v2"),
    ["GET " .. P2 .. "/pipelines/p1"] = v2.pipeline(),
    ["GET " .. P2 .. "/pipelines/names/my pipe"] = v2.pipeline(),
    ["GET " .. P2 .. "/pipelines/names/my%20pipe"] = v2.pipeline(),
    ["GET " .. P2 .. "/pipelines"] = { pipelines = { v2.pipeline() }, total_size = 7, next_page_token = "tok2" },
    ["GET " .. P2 .. "/pipelines/p1/versions"] = { pipeline_versions = { v2.version() }, total_size = 1 },
    ["GET " .. P2 .. "/pipelines/p1/versions/v1"] = v2.version(),
    ["DELETE " .. P2 .. "/pipelines/p1/versions/v1"] = {},
    ["DELETE " .. P2 .. "/pipelines/p1"] = {},
  }, function(m)
    local c = kfp.client{ host = m.url, api = "v2beta1", metrics_prefix = "t.v2p." }
    T.eq(c.api, "v2beta1")

    local p = c:create_pipeline{ name = "hello", display_name = "Hello", description = "d",
      url = "https://x/p.yaml" }
    expect(m.reqs[1], "POST", P2 .. "/pipelines", {},
      { name = "hello", display_name = "Hello", description = "d" })
    expect(m.reqs[2], "POST", P2 .. "/pipelines/p1/versions", {},
      { pipeline_id = "p1", name = "hello", description = "d",
        package_url = { pipeline_url = "https://x/p.yaml" } })
    T.eq(p.id, "p1")
    T.eq(p.name, "hello")
    T.eq(p.display_name, "Hello")
    T.eq(p.created_at, T0_EPOCH)
    T.eq(p.default_version_id, "v1")
    T.eq(p.default_version.package_url, "https://x/p.yaml")
    T.eq(p.raw.pipeline_id, "p1")

    c:create_pipeline_and_version{ name = "hello", url = "https://x/p.yaml", namespace = "ns1" }
    expect(m.reqs[3], "POST", P2 .. "/pipelines/create", {},
      { pipeline = { name = "hello", namespace = "ns1" },
        pipeline_version = { name = "hello", package_url = { pipeline_url = "https://x/p.yaml" } } })

    local up = c:upload_pipeline{ content = "pipelineInfo: {name: x}\n", name = "hello",
      description = "a b" }
    local r = m.reqs[4]
    T.eq(r.method, "POST")
    T.eq(r.path, P2 .. "/pipelines/upload")
    T.same(r.q, { name = "hello", description = "a b" })
    T.eq(#r.parts, 1)
    T.eq(r.parts[1].name, "uploadfile")
    T.eq(r.parts[1].filename, "pipeline.yaml")
    T.eq(r.parts[1].data, "pipelineInfo: {name: x}\n")
    T.eq(up.id, "p1")

    local dir = fs.tmpdir("kfpc")
    local file = fs.join(dir, "hello.yaml")
    fs.write(file, "pipelineInfo: {name: y}\n")
    local v = c:upload_pipeline_version{ pipeline_id = "p1", file = file, name = "v-2" }
    r = m.reqs[5]
    T.eq(r.path, P2 .. "/pipelines/upload_version")
    T.same(r.q, { pipelineid = "p1", name = "v-2" })
    T.eq(r.parts[1].name, "uploadfile")
    T.eq(r.parts[1].filename, "hello.yaml")
    T.eq(r.parts[1].data, "pipelineInfo: {name: y}\n")
    T.eq(v.id, "v2")
    T.eq(v.pipeline_id, "p1")
    fs.remove(dir, { recursive = true })

    T.eq(c:get_pipeline("p1").id, "p1")
    expect(m.reqs[6], "GET", P2 .. "/pipelines/p1")

    c:get_pipeline_by_name("my pipe", "ns1")
    T.eq(m.reqs[7].path, P2 .. "/pipelines/names/my%20pipe")
    T.same(m.reqs[7].q, { namespace = "ns1" })

    local page = c:list_pipelines{ page_size = 5, sort_by = "created_at desc", namespace = "ns1",
      filter = { predicates = { { key = "name", operation = "EQUALS", string_value = "hello" } } } }
    expect(m.reqs[8], "GET", P2 .. "/pipelines", { page_size = "5", sort_by = "created_at desc",
      namespace = "ns1",
      filter = '{"predicates":[{"key":"name","operation":"EQUALS","string_value":"hello"}]}' })
    T.contains(m.reqs[8].query, "filter=%7B%22predicates%22%3A%5B%7B%22key%22")
    T.eq(#page.items, 1)
    T.eq(page.items[1].id, "p1")
    T.eq(page.total_size, 7)
    T.eq(page.next_page_token, "tok2")

    local versions = c:list_pipeline_versions{ pipeline_id = "p1", page_token = "t1" }
    expect(m.reqs[9], "GET", P2 .. "/pipelines/p1/versions", { page_token = "t1" })
    T.eq(versions.items[1].id, "v1")
    T.eq(versions.next_page_token, nil)

    T.eq(c:get_pipeline_version("p1", "v1").name, "hello-v1")
    expect(m.reqs[10], "GET", P2 .. "/pipelines/p1/versions/v1")
    T.eq(c:delete_pipeline_version("p1", "v1"), true)
    expect(m.reqs[11], "DELETE", P2 .. "/pipelines/p1/versions/v1")
    T.eq(c:delete_pipeline("p1"), true)
    expect(m.reqs[12], "DELETE", P2 .. "/pipelines/p1")
    T.eq(#m.reqs, 12)
    validate_all(m, "v2beta1")
  end)
end)

T.case("v2beta1 experiments, runs, recurring runs, healthz: exact requests", function()
  with_mock({
    ["POST " .. P2 .. "/experiments"] = v2.experiment(),
    ["GET " .. P2 .. "/experiments/e1"] = v2.experiment(),
    ["GET " .. P2 .. "/experiments"] = { experiments = { v2.experiment() }, total_size = 1 },
    ["DELETE " .. P2 .. "/experiments/e1"] = {},
    ["POST " .. P2 .. "/experiments/e1:archive"] = {},
    ["POST " .. P2 .. "/experiments/e1:unarchive"] = {},
    ["POST " .. P2 .. "/runs"] = v2.run(),
    ["GET " .. P2 .. "/runs/r1"] = v2.run("SUCCEEDED", "2024-05-01T10:05:00Z"),
    ["GET " .. P2 .. "/runs"] = { runs = { v2.run("RUNNING") }, total_size = 1 },
    ["DELETE " .. P2 .. "/runs/r1"] = {},
    ["POST " .. P2 .. "/runs/r1:archive"] = {},
    ["POST " .. P2 .. "/runs/r1:unarchive"] = {},
    ["POST " .. P2 .. "/runs/r1:terminate"] = {},
    ["POST " .. P2 .. "/runs/r1:retry"] = {},
    ["POST " .. P2 .. "/recurringruns"] = v2.recurring(),
    ["GET " .. P2 .. "/recurringruns/rr1"] = v2.recurring(),
    ["GET " .. P2 .. "/recurringruns"] = { recurringRuns = { v2.recurring() }, total_size = 1 },
    ["DELETE " .. P2 .. "/recurringruns/rr1"] = {},
    ["POST " .. P2 .. "/recurringruns/rr1:enable"] = {},
    ["POST " .. P2 .. "/recurringruns/rr1:disable"] = {},
    ["GET " .. P2 .. "/healthz"] = { commit_sha = "abc", tag_name = "2.5.0", multi_user = true,
      pipeline_store = "database" },
  }, function(m)
    local c = kfp.client{ host = m.url, namespace = "kubeflow-user", metrics_prefix = "t.v2r." }
    local e = c:create_experiment{ name = "bench", description = "d" }
    expect(m.reqs[1], "POST", P2 .. "/experiments", {},
      { display_name = "bench", description = "d", namespace = "kubeflow-user" })
    T.eq(e.id, "e1")
    T.eq(e.name, "bench")
    T.eq(e.namespace, "kubeflow-user")
    T.eq(e.storage_state, "AVAILABLE")
    c:get_experiment("e1")
    expect(m.reqs[2], "GET", P2 .. "/experiments/e1")
    local el = c:list_experiments{ page_size = 2 }
    expect(m.reqs[3], "GET", P2 .. "/experiments", { page_size = "2", namespace = "kubeflow-user" })
    T.eq(el.items[1].id, "e1")
    c:archive_experiment("e1")
    expect(m.reqs[4], "POST", P2 .. "/experiments/e1:archive")
    c:unarchive_experiment("e1")
    expect(m.reqs[5], "POST", P2 .. "/experiments/e1:unarchive")
    c:delete_experiment("e1")
    expect(m.reqs[6], "DELETE", P2 .. "/experiments/e1")

    local run = c:create_run{ name = "run-1", experiment_id = "e1", pipeline_id = "p1",
      pipeline_version_id = "v1", params = { n = 3, msg = "hi" }, service_account = "sa" }
    expect(m.reqs[7], "POST", P2 .. "/runs", {},
      { display_name = "run-1", experiment_id = "e1", service_account = "sa",
        pipeline_version_reference = { pipeline_id = "p1", pipeline_version_id = "v1" },
        runtime_config = { parameters = { n = 3, msg = "hi" } } })
    T.eq(run.id, "r1")
    T.eq(run.state, "Pending")
    T.eq(run.state_raw, "PENDING")
    T.eq(run.finished, false)
    T.eq(run.finished_at, nil)
    T.eq(run.created_at, T0_EPOCH)
    T.eq(run.scheduled_at, T0_EPOCH + 1)
    T.eq(run.experiment_id, "e1")
    T.eq(run.pipeline_id, "p1")
    T.eq(run.pipeline_version_id, "v1")

    -- only a pipeline: its latest version runs; no params: no runtime_config
    c:create_run{ name = "run-2", pipeline_id = "p1" }
    expect(m.reqs[8], "POST", P2 .. "/runs", {},
      { display_name = "run-2", pipeline_version_reference = { pipeline_id = "p1" } })

    local got = c:get_run("r1")
    expect(m.reqs[9], "GET", P2 .. "/runs/r1")
    T.eq(got.state, "Succeeded")
    T.eq(got.finished, true)
    T.eq(got.succeeded, true)
    T.eq(got.finished_at - got.created_at, 300)

    local rl = c:list_runs{ experiment_id = "e1", page_size = 50, sort_by = "created_at desc",
      filter = { predicates = { { key = "name", operation = "IS_SUBSTRING", string_value = "run" } } } }
    expect(m.reqs[10], "GET", P2 .. "/runs", { experiment_id = "e1", namespace = "kubeflow-user",
      page_size = "50", sort_by = "created_at desc",
      filter = '{"predicates":[{"key":"name","operation":"IS_SUBSTRING","string_value":"run"}]}' })
    T.eq(rl.items[1].state, "Running")

    c:archive_run("r1")
    expect(m.reqs[11], "POST", P2 .. "/runs/r1:archive")
    c:unarchive_run("r1")
    expect(m.reqs[12], "POST", P2 .. "/runs/r1:unarchive")
    c:terminate_run("r1")
    expect(m.reqs[13], "POST", P2 .. "/runs/r1:terminate")
    c:retry_run("r1")
    expect(m.reqs[14], "POST", P2 .. "/runs/r1:retry")
    T.eq(c:delete_run("r1"), true)
    expect(m.reqs[15], "DELETE", P2 .. "/runs/r1")

    local rr = c:create_recurring_run{ name = "hourly", experiment_id = "e1", pipeline_id = "p1",
      pipeline_version_id = "v1", cron = "0 * * * *", max_concurrency = 2, params = { n = 1 } }
    expect(m.reqs[16], "POST", P2 .. "/recurringruns", {},
      { display_name = "hourly", experiment_id = "e1", mode = "ENABLE", max_concurrency = "2",
        trigger = { cron_schedule = { cron = "0 0 * * * *" } },
        pipeline_version_reference = { pipeline_id = "p1", pipeline_version_id = "v1" },
        runtime_config = { parameters = { n = 1 } } })
    T.eq(rr.id, "rr1")
    T.eq(rr.enabled, true)
    T.eq(rr.cron, "0 0 * * * *")
    T.eq(rr.max_concurrency, 2)
    c:create_recurring_run{ name = "every-minute", pipeline_id = "p1", interval_seconds = 60,
      enabled = false, no_catchup = true }
    expect(m.reqs[17], "POST", P2 .. "/recurringruns", {},
      { display_name = "every-minute", mode = "DISABLE", no_catchup = true,
        trigger = { periodic_schedule = { interval_second = "60" } },
        pipeline_version_reference = { pipeline_id = "p1" } })
    c:get_recurring_run("rr1")
    expect(m.reqs[18], "GET", P2 .. "/recurringruns/rr1")
    local rrl = c:list_recurring_runs{ experiment_id = "e1" }
    expect(m.reqs[19], "GET", P2 .. "/recurringruns", { experiment_id = "e1", namespace = "kubeflow-user" })
    T.eq(rrl.items[1].id, "rr1")
    c:enable_recurring_run("rr1")
    expect(m.reqs[20], "POST", P2 .. "/recurringruns/rr1:enable")
    c:disable_recurring_run("rr1")
    expect(m.reqs[21], "POST", P2 .. "/recurringruns/rr1:disable")
    c:delete_recurring_run("rr1")
    expect(m.reqs[22], "DELETE", P2 .. "/recurringruns/rr1")

    local h = c:healthz()
    expect(m.reqs[23], "GET", P2 .. "/healthz")
    T.eq(h.multi_user, true)
    T.eq(h.tag_name, "2.5.0")
    T.eq(h.pipeline_store, "database")
    T.eq(#m.reqs, 23)
    validate_all(m, "v2beta1")
  end)
end)

-- ---- v1beta1: every call --------------------------------------------------------

local P1 = "/apis/v1beta1"

T.case("v1beta1 pipelines and versions: exact requests (the notebook's calls)", function()
  with_mock({
    ["POST " .. P1 .. "/pipelines"] = v1.pipeline(),
    ["POST " .. P1 .. "/pipeline_versions"] = v1.version("v2"),
    ["POST " .. P1 .. "/pipelines/upload"] = v1.pipeline(),
    ["POST " .. P1 .. "/pipelines/upload_version"] = v1.version("v3"),
    ["GET " .. P1 .. "/pipelines/p1"] = v1.pipeline(),
    ["GET " .. P1 .. "/namespaces/-/pipelines/hello"] = v1.pipeline(),
    ["GET " .. P1 .. "/pipelines"] = { pipelines = { v1.pipeline() }, total_size = 1 },
    ["GET " .. P1 .. "/pipeline_versions"] = { versions = { v1.version() }, total_size = 1 },
    ["GET " .. P1 .. "/pipeline_versions/v1"] = v1.version(),
    ["DELETE " .. P1 .. "/pipeline_versions/v1"] = {},
    ["DELETE " .. P1 .. "/pipelines/p1"] = {},
  }, function(m)
    local c = kfp.client{ host = m.url, api = "v1beta1", metrics_prefix = "t.v1p." }
    T.eq(c.api, "v1beta1")
    local p = c:create_pipeline{ name = "pipeline-abc", url = "https://x/p.yaml" }
    expect(m.reqs[1], "POST", P1 .. "/pipelines", {},
      { name = "pipeline-abc", url = { pipeline_url = "https://x/p.yaml" } })
    T.eq(p.id, "p1")
    T.eq(p.default_version_id, "v1")
    T.eq(p.default_version.pipeline_id, "p1")

    local v = c:create_pipeline_version{ pipeline_id = "p1", name = "pipeline-version-1",
      url = "https://x/p.yaml" }
    expect(m.reqs[2], "POST", P1 .. "/pipeline_versions", {},
      { name = "pipeline-version-1", package_url = { pipeline_url = "https://x/p.yaml" },
        resource_references = { { key = { type = "PIPELINE", id = "p1" }, relationship = "OWNER" } } })
    T.eq(v.id, "v2")

    c:upload_pipeline{ content = "kind: Workflow\n", name = "up", namespace = "ns1" }
    T.eq(m.reqs[3].path, P1 .. "/pipelines/upload")
    T.same(m.reqs[3].q, { name = "up", namespace = "ns1" })
    T.eq(m.reqs[3].parts[1].name, "uploadfile")
    T.eq(m.reqs[3].parts[1].data, "kind: Workflow\n")
    local uv = c:upload_pipeline_version{ pipeline_id = "p1", content = "kind: Workflow\n",
      name = "uv", filename = "wf.json" }
    T.eq(m.reqs[4].path, P1 .. "/pipelines/upload_version")
    T.same(m.reqs[4].q, { pipelineid = "p1", name = "uv" })
    T.eq(m.reqs[4].parts[1].filename, "wf.json")
    T.eq(uv.id, "v3")

    c:get_pipeline("p1")
    expect(m.reqs[5], "GET", P1 .. "/pipelines/p1")
    c:get_pipeline_by_name("hello")
    expect(m.reqs[6], "GET", P1 .. "/namespaces/-/pipelines/hello")
    c:list_pipelines{ page_size = 3, namespace = "ns1" }
    expect(m.reqs[7], "GET", P1 .. "/pipelines", { page_size = "3",
      ["resource_reference_key.type"] = "NAMESPACE", ["resource_reference_key.id"] = "ns1" })
    local vl = c:list_pipeline_versions{ pipeline_id = "p1", page_size = 10 }
    expect(m.reqs[8], "GET", P1 .. "/pipeline_versions", { page_size = "10",
      ["resource_key.type"] = "PIPELINE", ["resource_key.id"] = "p1" })
    T.eq(vl.items[1].id, "v1")
    c:get_pipeline_version(nil, "v1")
    expect(m.reqs[9], "GET", P1 .. "/pipeline_versions/v1")
    c:delete_pipeline_version("p1", "v1")
    expect(m.reqs[10], "DELETE", P1 .. "/pipeline_versions/v1")
    c:delete_pipeline("p1")
    expect(m.reqs[11], "DELETE", P1 .. "/pipelines/p1")
    T.eq(#m.reqs, 11)
    validate_all(m, "v1beta1")
  end)
end)

T.case("v1beta1 experiments, runs, jobs, healthz: exact requests (the notebook's calls)", function()
  with_mock({
    ["POST " .. P1 .. "/experiments"] = v1.experiment(),
    ["GET " .. P1 .. "/experiments/e1"] = v1.experiment(),
    ["GET " .. P1 .. "/experiments"] = { experiments = { v1.experiment() } },
    ["DELETE " .. P1 .. "/experiments/e1"] = {},
    ["POST " .. P1 .. "/experiments/e1:archive"] = {},
    ["POST " .. P1 .. "/experiments/e1:unarchive"] = {},
    ["POST " .. P1 .. "/runs"] = v1.detail(nil),
    ["GET " .. P1 .. "/runs/r1"] = v1.detail("Succeeded", "2024-05-01T10:05:00Z"),
    ["GET " .. P1 .. "/runs"] = { runs = { v1.run("Running") }, total_size = 1 },
    ["DELETE " .. P1 .. "/runs/r1"] = {},
    ["POST " .. P1 .. "/runs/r1:archive"] = {},
    ["POST " .. P1 .. "/runs/r1:unarchive"] = {},
    ["POST " .. P1 .. "/runs/r1/terminate"] = {},
    ["POST " .. P1 .. "/runs/r1/retry"] = {},
    ["POST " .. P1 .. "/jobs"] = v1.job(),
    ["GET " .. P1 .. "/jobs/j1"] = v1.job(),
    ["GET " .. P1 .. "/jobs"] = { jobs = { v1.job() } },
    ["DELETE " .. P1 .. "/jobs/j1"] = {},
    ["POST " .. P1 .. "/jobs/j1/enable"] = {},
    ["POST " .. P1 .. "/jobs/j1/disable"] = {},
    ["GET " .. P1 .. "/healthz"] = { commit_sha = "abc", tag_name = "1.8.5", multi_user = false },
  }, function(m)
    local c = kfp.client{ host = m.url, api = "v1beta1", namespace = "kubeflow-user",
      metrics_prefix = "t.v1r." }
    local e = c:create_experiment{ name = "experiment-abc" }
    expect(m.reqs[1], "POST", P1 .. "/experiments", {}, { name = "experiment-abc",
      resource_references = { { key = { type = "NAMESPACE", id = "kubeflow-user" }, relationship = "OWNER" } } })
    T.eq(e.id, "e1")
    T.eq(e.namespace, "kubeflow-user")
    T.eq(e.storage_state, "AVAILABLE")
    c:get_experiment("e1")
    expect(m.reqs[2], "GET", P1 .. "/experiments/e1")
    c:list_experiments{}
    expect(m.reqs[3], "GET", P1 .. "/experiments",
      { ["resource_reference_key.type"] = "NAMESPACE", ["resource_reference_key.id"] = "kubeflow-user" })
    c:archive_experiment("e1")
    expect(m.reqs[4], "POST", P1 .. "/experiments/e1:archive")
    c:unarchive_experiment("e1")
    expect(m.reqs[5], "POST", P1 .. "/experiments/e1:unarchive")
    c:delete_experiment("e1")
    expect(m.reqs[6], "DELETE", P1 .. "/experiments/e1")

    -- the notebook's create_run: EXPERIMENT/OWNER + PIPELINE_VERSION/CREATOR,
    -- pipeline_spec.parameters as {name, value} strings
    local run = c:create_run{ name = "run-abc", experiment_id = "e1", pipeline_version_id = "v1",
      params = { ["pipeline-root"] = "gs://b/r", ["data-root"] = "gs://b/d", n = 3, f = 0.5, on = true } }
    expect(m.reqs[7], "POST", P1 .. "/runs", {}, { name = "run-abc",
      resource_references = {
        { key = { type = "EXPERIMENT", id = "e1" }, relationship = "OWNER" },
        { key = { type = "PIPELINE_VERSION", id = "v1" }, relationship = "CREATOR" } },
      pipeline_spec = { parameters = {
        { name = "data-root", value = "gs://b/d" }, { name = "f", value = "0.5" },
        { name = "n", value = "3" }, { name = "on", value = "true" },
        { name = "pipeline-root", value = "gs://b/r" } } } })
    T.eq(run.id, "r1")
    T.eq(run.state, "Unknown") -- no status yet
    T.eq(run.state_raw, nil)
    T.eq(run.finished, false)
    T.eq(run.finished_at, nil)
    T.eq(run.experiment_id, "e1")
    T.eq(run.pipeline_version_id, "v1")
    T.eq(run.storage_state, "AVAILABLE")
    T.eq(run.raw.pipeline_runtime.workflow_manifest, "{}")

    c:create_run{ name = "run-p", pipeline_id = "p1" }
    expect(m.reqs[8], "POST", P1 .. "/runs", {}, { name = "run-p", pipeline_spec = { pipeline_id = "p1" } })

    local got = c:get_run("r1")
    expect(m.reqs[9], "GET", P1 .. "/runs/r1")
    T.eq(got.state, "Succeeded")
    T.eq(got.finished, true)
    T.eq(got.finished_at - got.created_at, 300)

    local rl = c:list_runs{ experiment_id = "e1", page_size = 20 }
    expect(m.reqs[10], "GET", P1 .. "/runs", { page_size = "20",
      ["resource_reference_key.type"] = "EXPERIMENT", ["resource_reference_key.id"] = "e1" })
    T.eq(rl.items[1].state, "Running")
    c:list_runs()
    expect(m.reqs[11], "GET", P1 .. "/runs",
      { ["resource_reference_key.type"] = "NAMESPACE", ["resource_reference_key.id"] = "kubeflow-user" })

    c:archive_run("r1")
    expect(m.reqs[12], "POST", P1 .. "/runs/r1:archive")
    c:unarchive_run("r1")
    expect(m.reqs[13], "POST", P1 .. "/runs/r1:unarchive")
    c:terminate_run("r1")
    expect(m.reqs[14], "POST", P1 .. "/runs/r1/terminate")
    c:retry_run("r1")
    expect(m.reqs[15], "POST", P1 .. "/runs/r1/retry")
    c:delete_run("r1")
    expect(m.reqs[16], "DELETE", P1 .. "/runs/r1")

    local j = c:create_recurring_run{ name = "hourly", experiment_id = "e1", pipeline_version_id = "v1",
      interval_seconds = 3600, max_concurrency = 2 }
    expect(m.reqs[17], "POST", P1 .. "/jobs", {}, { name = "hourly", enabled = true,
      max_concurrency = "2", trigger = { periodic_schedule = { interval_second = "3600" } },
      resource_references = {
        { key = { type = "EXPERIMENT", id = "e1" }, relationship = "OWNER" },
        { key = { type = "PIPELINE_VERSION", id = "v1" }, relationship = "CREATOR" } } })
    T.eq(j.id, "j1")
    T.eq(j.enabled, true)
    T.eq(j.interval_seconds, 3600)
    T.eq(j.experiment_id, "e1")
    c:create_job{ name = "cron", pipeline_id = "p1", cron = "@hourly", start_time = T0_EPOCH }
    expect(m.reqs[18], "POST", P1 .. "/jobs", {}, { name = "cron", enabled = true,
      trigger = { cron_schedule = { cron = "@hourly", start_time = T0 } },
      pipeline_spec = { pipeline_id = "p1" } })
    c:get_recurring_run("j1")
    expect(m.reqs[19], "GET", P1 .. "/jobs/j1")
    c:list_jobs{ experiment_id = "e1" }
    expect(m.reqs[20], "GET", P1 .. "/jobs",
      { ["resource_reference_key.type"] = "EXPERIMENT", ["resource_reference_key.id"] = "e1" })
    c:enable_recurring_run("j1")
    expect(m.reqs[21], "POST", P1 .. "/jobs/j1/enable")
    c:disable_job("j1")
    expect(m.reqs[22], "POST", P1 .. "/jobs/j1/disable")
    c:delete_recurring_run("j1")
    expect(m.reqs[23], "DELETE", P1 .. "/jobs/j1")
    local h = c:healthz()
    expect(m.reqs[24], "GET", P1 .. "/healthz")
    T.eq(h.multi_user, false)
    T.eq(h.pipeline_store, nil)
    T.eq(#m.reqs, 24)
    validate_all(m, "v1beta1")
  end)
end)

-- ---- states and times ------------------------------------------------------------

T.case("ids are percent-encoded as path segments; plain ids are sent as they are", function()
  with_mock({
    ["GET " .. P2 .. "/runs/a%2Fb%20c%3F%25"] = v2.run("SUCCEEDED", "2024-05-01T10:05:00Z"),
    ["GET " .. P2 .. "/runs/A-z_0.9~"] = v2.run("SUCCEEDED", "2024-05-01T10:05:00Z"),
  }, function(m)
    local c = kfp.client{ host = m.url, metrics_prefix = "t.seg." }
    c:get_run("a/b c?%")
    expect(m.reqs[1], "GET", P2 .. "/runs/a%2Fb%20c%3F%25")
    c:get_run("A-z_0.9~")
    expect(m.reqs[2], "GET", P2 .. "/runs/A-z_0.9~")
  end)
end)

T.case("run states: the v2 enum maps as the 2.x server maps it to v1 (kfp.md 1c)", function()
  local cases = {
    { "PENDING", "Pending", false }, { "PAUSED", "Pending", false },
    { "RUNNING", "Running", false }, { "SUCCEEDED", "Succeeded", true },
    { "SKIPPED", "Skipped", true }, { "FAILED", "Failed", true },
    { "CANCELED", "Failed", true }, { "CANCELING", "Terminating", false },
    { "RUNTIME_STATE_UNSPECIFIED", "Unknown", false },
  }
  local i = 0
  with_mock({ ["GET " .. P2 .. "/runs/r1"] = function()
    i = i + 1
    return 200, v2.run(cases[i][1])
  end, ["GET " .. P2 .. "/runs/r2"] = function()
    local r = v2.run()
    r.state = nil
    r.error = { code = 2, message = "pod failed" }
    return 200, r
  end }, function(m)
    local c = kfp.client{ host = m.url, metrics_prefix = "t.st." }
    for _, case in ipairs(cases) do
      local r = c:get_run("r1")
      T.eq(r.state, case[2], case[1])
      T.eq(r.state_raw, case[1])
      T.eq(r.finished, case[3], case[1] .. " finished")
    end
    local r = c:get_run("r2")
    T.eq(r.state, "Unknown")
    T.eq(r.state_raw, nil)
    T.eq(r.error, "pod failed")
  end)
end)

T.case("run states: v1 strings kept, the notebook's finished set", function()
  local list = { "Pending", "Running", "Succeeded", "Failed", "Error", "Skipped", "Terminated",
    "Terminating", "Unknown", "" }
  local finished = { Succeeded = true, Failed = true, Error = true, Skipped = true, Terminated = true }
  local i = 0
  with_mock({ ["GET " .. P1 .. "/runs/r1"] = function()
    i = i + 1
    local d = v1.detail(list[i])
    d.run.error = i == 4 and "step failed" or nil
    return 200, d
  end }, function(m)
    local c = kfp.client{ host = m.url, api = "v1beta1", metrics_prefix = "t.st1." }
    for k, s in ipairs(list) do
      local r = c:get_run("r1")
      local want = s == "" and "Unknown" or s
      T.eq(r.state, want, s)
      T.eq(r.finished, finished[want] == true, s .. " finished")
      if k == 4 then T.eq(r.error, "step failed") end
    end
  end)
  T.eq(kfp.is_finished("Succeeded"), true)
  T.eq(kfp.is_finished("Unknown"), false)
end)

T.case("timestamps: RFC 3339 to epoch seconds, the epoch zero is nil", function()
  T.eq(states.parse_time("1970-01-01T00:00:00Z"), nil)
  T.eq(states.parse_time("0001-01-01T00:00:00Z"), nil)
  T.eq(states.parse_time(T0), T0_EPOCH)
  T.eq(math.type(states.parse_time(T0)), "integer")
  T.eq(states.parse_time("2024-05-01T12:00:00+02:00"), T0_EPOCH)
  T.eq(states.parse_time("2024-05-01T05:30:00-04:30"), T0_EPOCH)
  T.near(states.parse_time("2024-05-01T10:00:00.250Z"), T0_EPOCH + 0.25, 1e-6)
  T.eq(states.parse_time("2000-02-29T00:00:00Z"), 951782400)
  T.eq(states.parse_time("2100-03-01T00:00:00Z"), 4107542400)
  T.eq(states.parse_time("2024-05-01"), nil)
  T.eq(states.parse_time("2024-13-01T00:00:00Z"), nil)
  T.eq(states.parse_time("2024-05-01T10:00:00"), nil) -- no zone
  T.eq(states.parse_time(nil), nil)
  T.eq(states.parse_time(42), nil)
  T.eq(states.format_time(T0_EPOCH), T0)
  T.eq(states.format_time(T0_EPOCH + 0.5), "2024-05-01T10:00:00.5Z")
  T.eq(states.format_time("2030-01-01T00:00:00Z"), "2030-01-01T00:00:00Z")
end)

-- ---- errors --------------------------------------------------------------------

T.case("errors: KFP error bodies, upload errors, plain text, classes and hints", function()
  with_mock({
    ["GET " .. P2 .. "/runs/missing"] = function()
      return 404, { code = 5, message = "Failed to get run: ResourceNotFoundError: Run missing not found",
        details = { { ["@type"] = "type.googleapis.com/google.rpc.Status", code = 5,
          message = "Run missing not found" } } }
    end,
    ["POST " .. P2 .. "/pipelines/upload"] = function()
      return 409, { error_message = "Failed to create a pipeline due to conflict",
        error_details = "pipeline hello already exists" }
    end,
    ["POST " .. P2 .. "/pipelines/upload_version"] = function()
      return 400, "Failed to upload: unknown template format\n", { ["Content-Type"] = "text/plain" }
    end,
    ["GET " .. P2 .. "/runs/auth"] = function()
      return 401, { code = 16, message = "Unauthenticated: Request header error: there is no user identity header" }
    end,
    ["GET " .. P2 .. "/runs/busy"] = function()
      return 503, "<html><head><title>503 Service Unavailable</title></head><body>x</body></html>",
        { ["Content-Type"] = "text/html" }
    end,
    ["GET " .. P2 .. "/runs/slow"] = function()
      return 429, { code = 8, message = "too many requests" }, { ["Content-Type"] = "application/json",
        ["Retry-After"] = "7" }
    end,
    ["GET " .. P2 .. "/runs/login"] = function()
      return 302, "", { Location = "/dex/auth?client_id=x&state=abc" }
    end,
    ["GET " .. P2 .. "/runs/html"] = function()
      return 200, "<html>login</html>", { ["Content-Type"] = "text/html" }
    end,
    ["POST " .. P2 .. "/runs"] = function()
      return 400, { code = 3, message = "The run name is empty" }
    end,
  }, function(m)
    local c = kfp.client{ host = m.url, metrics_prefix = "t.err.", retry = false }
    local err = T.raises(function() c:get_run("missing") end, "Run missing not found")
    T.eq(err.class, "not_found")
    T.eq(err.status, 404)
    T.eq(err.op, "run.get")
    T.eq(err.method, "GET")
    T.eq(err.url, m.url .. P2 .. "/runs/missing")
    T.eq(err.code, 5)
    T.eq(err.server_message, "Failed to get run: ResourceNotFoundError: Run missing not found")
    T.eq(err.details, "Run missing not found")
    T.eq(err.hint, nil) -- a KFP answer: the path exists
    T.eq(tostring(err), "not_found: run.get: GET " .. m.url .. P2
      .. "/runs/missing -> HTTP 404: Failed to get run: ResourceNotFoundError: Run missing not found")

    err = T.raises(function() c:upload_pipeline{ content = "x: 1\n", name = "hello" } end,
      "Failed to create a pipeline due to conflict")
    T.eq(err.class, "conflict")
    T.eq(err.status, 409)
    T.eq(err.op, "pipeline.upload")
    T.eq(err.details, "pipeline hello already exists")

    err = T.raises(function() c:upload_pipeline_version{ pipeline_id = "p1", content = "x" } end,
      "HTTP 400: Failed to upload: unknown template format")
    T.eq(err.class, "http")
    T.eq(err.op, "pipeline_version.upload")

    err = T.raises(function() c:create_run{ name = "x", pipeline_id = "p1" } end, "The run name is empty")
    T.eq(err.class, "http")
    T.eq(err.code, 3)

    err = T.raises(function() c:get_run("auth") end, "there is no user identity header")
    T.eq(err.class, "auth")
    T.eq(err.status, 401)
    T.contains(tostring(err), "no credentials were sent")
    T.contains(tostring(err), "kubeflow-userid")

    err = T.raises(function() c:get_run("busy") end, "HTTP 503: 503 Service Unavailable")
    T.eq(err.class, "server")
    T.contains(tostring(err), "ml-pipeline")
    T.eq(err.hint ~= nil, true)

    err = T.raises(function() c:get_run("slow") end, "too many requests")
    T.eq(err.class, "throttled")
    T.eq(err.retry_after, 7)

    err = T.raises(function() c:get_run("login") end, "redirected to /dex/auth")
    T.eq(err.class, "auth")
    T.eq(err.status, 302)
    T.eq(tostring(err):find("state=abc", 1, true), nil)
    T.contains(tostring(err), "session cookie")

    err = T.raises(function() c:get_run("html") end, "not a JSON object")
    T.eq(err.class, "protocol")
    T.contains(tostring(err), "/pipeline")

    -- a path the server does not know: plain 404, hint about host and prefix
    err = T.raises(function() c:request{ op = "x.get", path = "/nope" } end, "mock: no route")
    T.eq(err.class, "not_found")
  end)
  with_mock({ ["GET /apis/v2beta1/runs/r1"] = function()
    return 404, "404 page not found\n", { ["Content-Type"] = "text/plain" }
  end }, function(m)
    local c = kfp.client{ host = m.url, metrics_prefix = "t.err2." }
    local err = T.raises(function() c:get_run("r1") end, "HTTP 404: 404 page not found (no such API path")
    T.eq(err.class, "not_found")
  end)
end)

T.case("errors: transport failures keep their class and gain the op", function()
  local srv = httpd.listen{ handler = function() return 200, "{}" end }
  local url = srv.url
  srv:close()
  local c = kfp.client{ host = url, metrics_prefix = "t.net.", timeout = 5, retry = false }
  local err = T.raises(function() c:get_run("r1") end)
  T.eq(err.class, "connect")
  T.eq(err.op, "run.get")
  T.ok(err.hint, "a hint") -- kb.http's, or ours when it has none
  T.eq(metrics.get("t.net.kfp.errors", { op = "run.get", class = "connect" }):value(), 1)
end)

T.case("errors: a cancelled call passes kb.cancelled on untouched", function()
  with_mock({ ["GET " .. P2 .. "/runs/slow"] = function() kb.sleep(5) return 200, v2.run() end },
    function(m)
      local c = kfp.client{ host = m.url, metrics_prefix = "t.cancel." }
      local err = T.raises(function() kb.timeout(0.05, c.get_run, c, "slow") end, "gave up after 0.05 s")
      T.eq(err.class, "timeout")
      T.eq(kb.cancelled.op, nil)
      T.eq(metrics.get("t.cancel.run.get"), nil)
    end)
end)

T.case("usage errors name the method and the missing argument", function()
  local c = kfp.client{ host = "http://127.0.0.1:1" }
  T.raises(function() c:create_run{ pipeline_id = "p1" } end, "kb.kfp: create_run needs name=")
  T.raises(function() c:create_run{ name = "x" } end, "create_run needs pipeline_id=")
  T.raises(function() c:create_run{ name = "x", pipeline_version_id = "v1" } end,
    "v2beta1 needs pipeline_id= together with pipeline_version_id=")
  T.raises(function() c:get_run() end, "get_run needs the run id")
  T.raises(function() c:get_run("") end, "get_run needs the run id (a non-empty string), got \"\"")
  T.raises(function() c:upload_pipeline{ name = "x" } end, "needs exactly one of file=")
  T.raises(function() c:create_recurring_run{ name = "x", pipeline_id = "p" } end,
    "needs exactly one of cron= and interval_seconds=")
  T.raises(function() c:create_recurring_run{ name = "x", pipeline_id = "p", interval_seconds = 0 } end,
    "interval_seconds= must be a positive integer")
  T.raises(function() c:list_all("get_run") end, "list_all needs a list method name")
  T.raises(function() c.get_run("r1") end, "call get_run as a method")
  T.raises(function() kfp.client{ host = "127.0.0.1:8888" } end, "host must start with http:// or https://")
  T.raises(function() kfp.client{} end, "host= is required")
  T.raises(function() kfp.client{ host = "http://127.0.0.1", tokn = "x" } end, "unknown option 'tokn'")
  T.raises(function() kfp.client{ host = "http://127.0.0.1", api = "v3" } end, "api must be")
  T.raises(function() kfp.client{ host = "http://u:p@127.0.0.1" } end, "must not carry credentials")
  T.raises(function() kfp.client{ host = "http://127.0.0.1", tls = { verify = false } } end,
    "unknown tls option 'verify'")
  T.eq(tostring(c), "kb.kfp.client v2beta1 http://127.0.0.1:1/apis/v2beta1")
end)

T.case("usage errors: argument types and client options", function()
  local c = kfp.client{ host = "http://127.0.0.1:1" }
  local c1 = kfp.client{ host = "http://127.0.0.1:1", api = "v1" }
  T.eq(c1.api, "v1beta1")
  T.raises(function() c:list_runs("e1") end, "kb.kfp: list_runs takes a table of arguments, got string")
  T.raises(function() c:list_runs{ filter = 42 } end, "filter must be a table ({predicates = {...}}) or JSON text")
  T.raises(function() c:create_run{ name = "x", pipeline_id = "p", params = "a=1" } end,
    "create_run: params= must be a table {name = value}")
  T.raises(function() c1:create_run{ name = "x", pipeline_id = "p", params = "a=1" } end,
    "create_run: params= must be a table {name = value}")
  T.raises(function() c1:create_run{ name = "x", pipeline_id = "p", params = { f = print } } end,
    "a run parameter must be a string, number, boolean or table, got function")
  T.raises(function() c1:create_run{ name = "x", params = { a = 1 } } end,
    "create_run needs pipeline_version_id= or pipeline_id= (or workflow_manifest=)")
  T.raises(function() c:create_run{ name = "x", pipeline_spec = "yaml" } end,
    "pipeline_spec= must be the pipeline IR as a table")
  T.raises(function() c:create_recurring_run{ name = "x", pipeline_id = "p", cron = "" } end,
    "cron= must be a cron expression")
  T.raises(function() c:create_recurring_run{ name = "x", pipeline_id = "p", cron = "@daily",
    max_concurrency = 1.5 } end, "max_concurrency must be an integer, got 1.5")
  T.raises(function() c:create_recurring_run{ name = "x", pipeline_id = "p", cron = "@daily",
    start_time = {} } end, "a time must be epoch seconds or RFC 3339 text")
  T.raises(function() c:upload_pipeline{ file = 42 } end, "upload_pipeline: file= must be a path")
  T.raises(function() c:upload_pipeline{ content = 42 } end, "upload_pipeline: content= must be a string")
  T.raises(function() c:create_pipeline_and_version{ name = "x" } end,
    "create_pipeline_and_version needs url=")
  T.raises(function() c1:create_pipeline{ name = "x" } end, "create_pipeline needs url=")
  T.raises(function() c:get_pipeline_by_name(nil) end, "get_pipeline_by_name needs the pipeline name (a non-empty string), got nothing")
  T.raises(function() c:get_pipeline_version("p1") end, "get_pipeline_version needs the pipeline version id")
  T.raises(function() c:wait_run("r1", { interval = 0 }) end, "wait_run: interval must be a number > 0")
  local function client_error(opts, msg)
    opts.host = opts.host or "http://127.0.0.1:1"
    T.raises(function() kfp.client(opts) end, msg)
  end
  client_error({ token = "a", token_file = "/x" }, "give token= or token_file=, not both")
  client_error({ token = "a\nb" }, "token must be one line")
  client_error({ token = "" }, "token must be a non-empty string")
  client_error({ cookies = 42 }, "cookies= must be a string or a table")
  client_error({ headers = "x" }, "headers= must be a table")
  client_error({ timeout = 0 }, "timeout must be a number > 0")
  client_error({ namespace = "" }, "namespace must be a non-empty string")
  client_error({ metrics_prefix = 1 }, "metrics_prefix must be a string")
  client_error({ tls = true }, "tls= must be a table")
  client_error({ host = "http://127.0.0.1:1/x?y=1" }, "host must not have a query or fragment")
  client_error({ host = "http://:8888" }, "host has no host name")
  T.raises(function() kfp.client("http://127.0.0.1") end, "takes a table of options")
  T.raises(function() c:request{ path = "/x" } end, "request needs op=")
end)

T.case("v2beta1 create_pipeline from a URL removes the pipeline when the version fails", function()
  with_mock({
    ["POST " .. P2 .. "/pipelines"] = v2.pipeline(),
    ["POST " .. P2 .. "/pipelines/p1/versions"] = function()
      return 400, { code = 3, message = "Failed to fetch https://x/p.yaml" }
    end,
    ["DELETE " .. P2 .. "/pipelines/p1"] = {},
  }, function(m)
    local c = kfp.client{ host = m.url, metrics_prefix = "t.cpf." }
    local err = T.raises(function() c:create_pipeline{ name = "hello", url = "https://x/p.yaml" } end,
      "Failed to fetch https://x/p.yaml")
    T.eq(err.op, "pipeline_version.create")
    T.eq(#m.reqs, 3)
    expect(m.reqs[3], "DELETE", P2 .. "/pipelines/p1")
  end)
end)

-- ---- credentials ---------------------------------------------------------------

T.case("auth: bearer token, extra headers and cookies sent; secrets never in errors", function()
  local token = "s3cr3t-t0ken-value"
  with_mock({ ["GET " .. P2 .. "/runs/r1"] = function(req)
    -- a server that echoes what it got: the client must still hide it
    return 403, { code = 7, message = "denied for " .. req.headers.authorization .. " cookie "
      .. req.headers.cookie }
  end, ["GET " .. P2 .. "/healthz"] = { multi_user = true } }, function(m)
    local c = kfp.client{ host = m.url, token = token, metrics_prefix = "t.auth.",
      headers = { ["kubeflow-userid"] = "user@example.com" },
      cookies = { authservice_session = "cookie-value-123" } }
    c:healthz()
    local h = m.reqs[1].headers
    T.eq(h.authorization, "Bearer " .. token)
    T.eq(h["kubeflow-userid"], "user@example.com")
    T.eq(h.cookie, "authservice_session=cookie-value-123")
    local err = T.raises(function() c:get_run("r1") end)
    T.eq(err.class, "auth")
    T.eq(err.status, 403)
    local text = tostring(err) .. (err.body or "") .. (err.server_message or "")
    T.eq(text:find(token, 1, true), nil, "token in error text")
    T.eq(text:find("cookie-value-123", 1, true), nil, "cookie in error text")
    T.contains(text, "<redacted>")
    -- nor in the client's fields
    for k, v in pairs(c) do
      T.eq(tostring(v):find(token, 1, true), nil, "token in field " .. k)
    end
    T.eq(json.encode({ api = c.api, url = c.url, host = c.host }):find(token, 1, true), nil)
  end)
end)

T.case("auth: token_file is re-read when it changes", function()
  local dir = fs.tmpdir("kfpc")
  local path = fs.join(dir, "token")
  fs.write(path, "first-token\n")
  with_mock({ ["GET " .. P2 .. "/healthz"] = { multi_user = false } }, function(m)
    local c = kfp.client{ host = m.url, token_file = path, metrics_prefix = "t.tf." }
    c:healthz()
    c:healthz()
    fs.write(path, "  second-token-longer  \n")
    c:healthz()
    T.eq(m.reqs[1].headers.authorization, "Bearer first-token")
    T.eq(m.reqs[2].headers.authorization, "Bearer first-token")
    T.eq(m.reqs[3].headers.authorization, "Bearer second-token-longer")
    fs.write(path, "two\nlines\n")
    local err = T.raises(function() c:healthz() end, "token_file '" .. path .. "' holds more than one line")
    T.eq(err.class, "auth")
    fs.write(path, "\n")
    err = T.raises(function() c:healthz() end, "is empty")
    T.eq(err.class, "auth")
    T.eq(#m.reqs, 3)
    fs.remove(path)
    err = T.raises(function() c:healthz() end, "cannot stat token_file '" .. path .. "'")
    T.eq(err.class, "auth")
  end)
  local err = T.raises(function() kfp.client{ host = "http://127.0.0.1:1", token_file = path } end,
    "cannot read token_file")
  T.eq(err.class, "auth")
  fs.remove(dir, { recursive = true })
end)

T.case("security: no credentials in clear text to a non-loopback host", function()
  -- refused while the client is made: nothing leaves the machine
  local err = T.raises(function() kfp.client{ host = "http://10.1.2.3:8888", token = "abcd1234" } end,
    "refusing to send credentials (token) in clear text over http:// to 10.1.2.3")
  T.eq(err.class, "security")
  T.contains(tostring(err), "allow_insecure_credentials = true")
  T.eq(tostring(err):find("abcd1234", 1, true), nil)
  err = T.raises(function()
    kfp.client{ host = "http://kubeflow.example.com/pipeline", cookies = "authservice_session=x",
      headers = { Authorization = "Basic eDp5" } }
  end, "credentials (header Authorization, cookies)")
  T.eq(err.class, "security")
  -- what is allowed
  T.ok(kfp.client{ host = "http://10.1.2.3:8888", token = "abcd1234", allow_insecure_credentials = true })
  T.ok(kfp.client{ host = "https://10.1.2.3:8888", token = "abcd1234" })
  T.ok(kfp.client{ host = "http://10.1.2.3:8888", headers = { ["kubeflow-userid"] = "u@x" } })
  T.ok(kfp.client{ host = "http://localhost:8888", token = "abcd1234" })
  T.ok(kfp.client{ host = "http://127.0.0.2:8888", token = "abcd1234" })
  T.ok(kfp.client{ host = "http://[::1]:8888", token = "abcd1234" })
end)

T.case("host with a path prefix and tls options", function()
  with_mock({ ["GET /pipeline/apis/v2beta1/healthz"] = { multi_user = false },
    ["GET /pipeline/metrics"] = function() return 200, "# TYPE x counter\nx 1\n" end }, function(m)
    local c = kfp.client{ host = m.url .. "/pipeline/", metrics_prefix = "t.pfx.",
      tls = { insecure = false } }
    T.eq(c.url, m.url .. "/pipeline/apis/v2beta1")
    c:healthz()
    T.eq(m.reqs[1].path, "/pipeline/apis/v2beta1/healthz")
    local err = T.raises(function() c:request{ op = "metrics.get", path = "/metrics", root = true } end,
      "not a JSON object")
    T.eq(err.class, "protocol")
    local text = c:request{ op = "metrics.get", path = "/metrics", root = true, raw = true }
    T.eq(text, "# TYPE x counter\nx 1\n")
    T.eq(m.reqs[3].path, "/pipeline/metrics")
    T.eq(m.reqs[2].path, "/pipeline/metrics")
  end)
end)

-- ---- delete_pipeline with versions -------------------------------------------------

T.case("delete_pipeline cascade on v1beta1: versions (all pages) first", function()
  local deleted = {}
  with_mock({
    ["GET " .. P1 .. "/pipeline_versions"] = function(req)
      local q = Q(req.query)
      if q.page_token == "page2" then return 200, { versions = { v1.version("v3") } } end
      return 200, { versions = { v1.version("v1"), v1.version("v2") }, next_page_token = "page2" }
    end,
    ["DELETE " .. P1 .. "/pipeline_versions/v1"] = function() deleted[#deleted + 1] = "v1" return 200, {} end,
    ["DELETE " .. P1 .. "/pipeline_versions/v2"] = function() deleted[#deleted + 1] = "v2" return 200, {} end,
    ["DELETE " .. P1 .. "/pipeline_versions/v3"] = function() deleted[#deleted + 1] = "v3" return 200, {} end,
    ["DELETE " .. P1 .. "/pipelines/p1"] = {},
  }, function(m)
    local c = kfp.client{ host = m.url, api = "v1beta1", metrics_prefix = "t.del1." }
    T.eq(c:delete_pipeline("p1", { cascade = true }), true)
    expect(m.reqs[1], "GET", P1 .. "/pipeline_versions", { ["resource_key.type"] = "PIPELINE",
      ["resource_key.id"] = "p1" })
    expect(m.reqs[2], "GET", P1 .. "/pipeline_versions", { ["resource_key.type"] = "PIPELINE",
      ["resource_key.id"] = "p1", page_token = "page2" })
    expect(m.reqs[3], "DELETE", P1 .. "/pipeline_versions/v1")
    expect(m.reqs[4], "DELETE", P1 .. "/pipeline_versions/v2")
    expect(m.reqs[5], "DELETE", P1 .. "/pipeline_versions/v3")
    expect(m.reqs[6], "DELETE", P1 .. "/pipelines/p1")
    T.eq(#m.reqs, 6)
    T.same(deleted, { "v1", "v2", "v3" })
    validate_all(m, "v1beta1")
  end)
end)

T.case("delete_pipeline cascade on v2beta1: ?cascade=true, or versions first when unsupported", function()
  with_mock({ ["DELETE " .. P2 .. "/pipelines/p1"] = {} }, function(m)
    local c = kfp.client{ host = m.url, metrics_prefix = "t.del2." }
    c:delete_pipeline("p1", { cascade = true })
    expect(m.reqs[1], "DELETE", P2 .. "/pipelines/p1", { cascade = "true" })
    T.eq(#m.reqs, 1)
    validate_all(m, "v2beta1")
  end)
  local versions = { "v1", "v2" }
  with_mock({
    -- a server that ignores cascade refuses while versions exist
    ["DELETE " .. P2 .. "/pipelines/p1"] = function()
      if #versions > 0 then
        return 400, { code = 9, message = "Failed to delete pipeline p1: it has existing pipeline "
          .. "versions, delete them first or set cascade=true" }
      end
      return 200, {}
    end,
    ["GET " .. P2 .. "/pipelines/p1/versions"] = function()
      local list = {}
      for i, id in ipairs(versions) do list[i] = v2.version(id) end
      return 200, { pipeline_versions = list }
    end,
    ["DELETE " .. P2 .. "/pipelines/p1/versions/v1"] = function() table.remove(versions, 1) return 200, {} end,
    ["DELETE " .. P2 .. "/pipelines/p1/versions/v2"] = function() table.remove(versions, 1) return 200, {} end,
  }, function(m)
    local c = kfp.client{ host = m.url, metrics_prefix = "t.del3." }
    c:delete_pipeline("p1", { cascade = true })
    expect(m.reqs[1], "DELETE", P2 .. "/pipelines/p1", { cascade = "true" })
    expect(m.reqs[2], "GET", P2 .. "/pipelines/p1/versions")
    expect(m.reqs[3], "DELETE", P2 .. "/pipelines/p1/versions/v1")
    expect(m.reqs[4], "DELETE", P2 .. "/pipelines/p1/versions/v2")
    expect(m.reqs[5], "DELETE", P2 .. "/pipelines/p1")
    T.eq(#m.reqs, 5)
    -- without cascade the server's refusal reaches the caller
    versions = { "v9" }
    local err = T.raises(function() c:delete_pipeline("p1") end, "has existing pipeline versions")
    T.eq(err.class, "http")
    T.eq(err.op, "pipeline.delete")
  end)
end)

-- ---- paging ---------------------------------------------------------------------

T.case("list_all_runs follows page tokens; a repeated token stops it", function()
  local pages = {
    [""] = { runs = { v2.run("RUNNING"), v2.run("PENDING") }, next_page_token = "t2", total_size = 5 },
    t2 = { runs = { v2.run("SUCCEEDED"), v2.run("FAILED") }, next_page_token = "t3", total_size = 5 },
    t3 = { runs = { v2.run("CANCELED") }, total_size = 5 },
    loop = { runs = { v2.run() }, next_page_token = "loop" },
  }
  with_mock({ ["GET " .. P2 .. "/runs"] = function(req)
    return 200, pages[Q(req.query).page_token or ""]
  end }, function(m)
    local c = kfp.client{ host = m.url, metrics_prefix = "t.page." }
    local runs = c:list_all_runs{ experiment_id = "e1", page_size = 2 }
    T.eq(#runs, 5)
    T.eq(runs[1].state, "Running")
    T.eq(runs[5].state_raw, "CANCELED")
    T.eq(#m.reqs, 3)
    T.same(m.reqs[1].q, { experiment_id = "e1", page_size = "2" })
    T.same(m.reqs[2].q, { experiment_id = "e1", page_size = "2", page_token = "t2" })
    T.same(m.reqs[3].q, { experiment_id = "e1", page_size = "2", page_token = "t3" })
    T.eq(json.encode(c:list_all_runs{ filter = '{"predicates":[]}', max_pages = 1, page_token = "t3" })
      :sub(1, 1), "[")
    local err = T.raises(function() c:list_all_runs{ page_token = "loop" } end, "page token \"loop\" twice")
    T.eq(err.class, "protocol")
    err = T.raises(function() c:list_all_runs{ max_pages = 1 } end, "more than 1 pages")
    T.eq(err.class, "limit")
    validate_all(m, "v2beta1")
  end)
end)

-- ---- metrics --------------------------------------------------------------------

T.case("metrics: one histogram sample per successful call, counters by status and class", function()
  local n = 0
  with_mock({ ["POST " .. P2 .. "/runs"] = function()
    n = n + 1
    if n == 4 then return 500, { code = 13, message = "db is down" } end
    return 200, v2.run()
  end, ["GET " .. P2 .. "/runs/r1"] = v2.run() }, function(m)
    local c = kfp.client{ host = m.url, metrics_prefix = "t.met." }
    for i = 1, 3 do c:create_run{ name = "run-" .. i, pipeline_id = "p1" } end
    local err = T.raises(function() c:create_run{ name = "run-4", pipeline_id = "p1" } end, "db is down")
    T.eq(err.class, "server")
    c:get_run("r1")
    local h = metrics.get("t.met.run.create")
    T.eq(h:count(), 3)
    T.ok(h:min() >= 0)
    T.eq(metrics.get("t.met.run.get"):count(), 1)
    T.eq(metrics.get("t.met.kfp.requests", { op = "run.create", status = "200" }):value(), 3)
    T.eq(metrics.get("t.met.kfp.requests", { op = "run.create", status = "500" }):value(), 1)
    T.eq(metrics.get("t.met.kfp.errors", { op = "run.create", class = "server" }):value(), 1)
    T.eq(metrics.get("t.met.kfp.requests", { op = "run.get", status = "200" }):value(), 1)
  end)
end)

T.case("status_only: create_run and get_run leave the spec and manifests undecoded", function()
  local function spec_of(run) -- what a real server answers beside the status
    run.pipeline_spec = { pipelineInfo = { name = "p" }, root = { dag = { tasks = { a = {} } } } }
    run.run_details = { task_details = { { task_id = "t1" } } }
    return run
  end
  with_mock({ ["POST " .. P2 .. "/runs"] = function() return 200, spec_of(v2.run()) end,
    ["GET " .. P2 .. "/runs/r1"] = function()
      return 200, spec_of(v2.run("SUCCEEDED", "2024-05-01T10:05:00Z"))
    end }, function(m)
    local c = kfp.client{ host = m.url, metrics_prefix = "t.so2." }
    local full = c:create_run{ name = "run-1", pipeline_id = "p1" }
    T.eq(full.raw.pipeline_spec.pipelineInfo.name, "p")
    local lean = c:create_run{ name = "run-1", pipeline_id = "p1", status_only = true }
    T.eq(lean.raw.pipeline_spec, nil)
    T.eq(lean.raw.run_details, nil)
    T.eq(m.reqs[2].body.status_only, nil) -- not sent
    for _, k in ipairs{ "id", "state", "state_raw", "created_at", "scheduled_at", "finished" } do
      T.eq(lean[k], full[k], k)
    end
    local got = c:get_run("r1", { status_only = true })
    T.eq(got.raw.run_details, nil)
    T.eq(got.state, "Succeeded")
    T.eq(got.finished_at - got.created_at, 300)
    T.eq(c:get_run("r1").raw.run_details.task_details[1].task_id, "t1")
  end)
  with_mock({ ["POST /apis/v1beta1/runs"] = function() return 200, v1.detail("Running") end,
    ["GET /apis/v1beta1/runs/r1"] = function() return 200, v1.detail("Succeeded", "2024-05-01T10:05:00Z") end,
  }, function(m)
    local c = kfp.client{ host = m.url, api = "v1beta1", metrics_prefix = "t.so1." }
    local lean = c:create_run{ name = "run-1", pipeline_id = "p1", status_only = true }
    T.eq(lean.raw.pipeline_runtime, nil)
    T.eq(lean.state, "Running")
    T.eq(c:create_run{ name = "run-1", pipeline_id = "p1" }.raw.pipeline_runtime.workflow_manifest, "{}")
    local got = c:get_run("r1", { status_only = true })
    T.eq(got.raw.pipeline_runtime, nil)
    T.eq(got.finished_at - got.created_at, 300)
  end)
end)

-- ---- waiting ------------------------------------------------------------------------

T.case("wait_run polls until finished, or raises timeout with the last run", function()
  local polls = 0
  with_mock({
    ["GET " .. P2 .. "/runs/r1"] = function()
      polls = polls + 1
      return 200, v2.run(polls < 3 and "RUNNING" or "SUCCEEDED", polls < 3 and ZERO or "2024-05-01T10:01:00Z")
    end,
    ["GET " .. P2 .. "/runs/stuck"] = function() return 200, v2.run("RUNTIME_STATE_UNSPECIFIED") end,
  }, function(m)
    local c = kfp.client{ host = m.url, metrics_prefix = "t.wait." }
    local r = c:wait_run("r1", { interval = 0.01 })
    T.eq(r.state, "Succeeded")
    T.eq(polls, 3)
    T.eq(r.finished_at - r.created_at, 60)
    local err = T.raises(function() c:wait_run("stuck", { interval = 0.01, timeout = 0.05 }) end,
      "run stuck not finished after 0.05 s (state Unknown)")
    T.eq(err.class, "timeout")
    T.eq(err.run.state, "Unknown")
  end)
end)

T.run()
