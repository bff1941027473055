-- kb.openapi (lua/kb/openapi/): path matching, request and response
-- validation against the KFP, Argo and Kubernetes specs kbrun carries (specs/), schema
-- keywords, every error message, the recorder and its coverage.
local T = require "kb.testing"
local fs = require "kb.fs"
local json = require "kb.json"
local openapi = require "kb.openapi"

local null = json.null

-- Asserts ok == false and that the error list is exactly `want`.
local function errors(want, ok, errs)
  T.eq(type(errs), "table", "errors list")
  T.same(errs, want, "errors")
  T.eq(ok, #want == 0, "ok flag")
end

local function clean(ok, errs)
  T.eq(table.concat(errs or { "(no list)" }, "; "), "", "errors")
  T.eq(ok, true, "ok flag")
end

local v2 = openapi.kfp("v2beta1")
local v1 = openapi.kfp("v1beta1")

-- A small hand-written Swagger document for the schema keywords.
local function doc2(definitions, paths)
  return { swagger = "2.0", info = { title = "t", version = "1" }, paths = paths or {},
           definitions = definitions or {} }
end

------------------------------------------------------------------------
-- Loading
------------------------------------------------------------------------

T.case("load: the carried specs are found, cached and versioned", function()
  T.eq(v2.version, 2)
  T.contains(v2.source, "kfp/v2beta1/kfp_api_single_file.swagger.json")
  local again = openapi.kfp("v2beta1")
  T.ok(again ~= v2, "a new spec object per call")
  T.eq(again.compiled, v2.compiled, "the decoded document is cached")
  local k1, k2 = openapi.k8s(), openapi.k8s()
  T.eq(k1.compiled, k2.compiled)
  T.ok(openapi.k8s{ full = true }.compiled ~= k1.compiled, "full swagger is another document")
  T.eq(openapi.k8s_v3("apis/batch/v1").version, 3)
  T.eq(openapi.argo().version, 2)
end)

T.case("load: errors name the problem", function()
  local err = T.raises(openapi.load, "cannot read", "/nonexistent/spec.json")
  T.eq(err.class, "openapi")
  T.contains(tostring(err), "openapi: cannot read /nonexistent/spec.json")
  T.raises(openapi.load, 'document is neither Swagger 2.0 nor OpenAPI 3 (no "swagger": "2.0" or "openapi": "3.x")',
    { info = {} })
  T.raises(openapi.load, "kb.openapi.load: expected a path or a document table, got number", 5)
  T.raises(openapi.load, "kb.openapi.load: unknown option stritc", doc2(), { stritc = true })
  T.raises(openapi.load, 'kb.openapi.load: option int64 must be "lenient" or "strict"', doc2(), { int64 = "yes" })
  T.raises(openapi.kfp, 'kb.openapi.kfp: version must be "v2beta1" or "v1beta1", got v3', "v3")
end)

T.case("load: invalid JSON and YAML documents", function()
  local dir = fs.tmpdir("kbrun-test-openapi")
  local bad = fs.join(dir, "bad.json")
  fs.write(bad, "{oops")
  local err = T.raises(openapi.load, bad .. ": json: kb.json.decode: unexpected character", bad)
  T.eq(err.class, "openapi")
  local y = fs.join(dir, "api.yaml")
  fs.write(y, table.concat({
    "swagger: '2.0'",
    "info: {title: t, version: '1'}",
    "paths:",
    "  /things/{id}:",
    "    get:",
    "      parameters:",
    "        - {name: id, in: path, required: true, type: string}",
    "      responses:",
    "        '200': {description: ok, schema: {$ref: '#/definitions/Thing'}}",
    "definitions:",
    "  Thing:",
    "    type: object",
    "    required: [id]",
    "    properties: {id: {type: string}, size: {type: integer, format: int32}}",
  }, "\n"))
  local spec = openapi.load(y)
  errors({ "body.size: expected integer, got string" },
    spec:validate_response{ method = "GET", path = "/things/a", status = 200, body = { id = "a", size = "1" } })
  clean(spec:validate_response{ method = "GET", path = "/things/a", status = 200, body = '{"id":"a","size":3}' })
  fs.remove(dir, { recursive = true })
end)

T.case("specs_dir: KBRUN_SOURCE_DIR locates the checkout's specs/", function()
  T.ok(os.getenv("KBRUN_SOURCE_DIR"), "ctest sets KBRUN_SOURCE_DIR")
  local dir = openapi.specs_dir()
  T.ok(fs.exists(fs.join(dir, "kfp", "v2beta1", "kfp_api_single_file.swagger.json")), dir)
  T.eq(dir, fs.join(os.getenv("KBRUN_SOURCE_DIR"), "specs"))
end)

-- Runs a snippet in a child kbrun with extra environment; returns its output.
local function child_kbrun(env, code)
  local bin = os.getenv("KBRUN_BIN")
  if not bin then return nil end
  local dir = fs.tmpdir("kbrun-test-openapi-child")
  local script = fs.join(dir, "s.lua")
  fs.write(script, code)
  local p = io.popen(string.format("env %s %q -q -o %q %q 2>&1", env, bin, fs.join(dir, "out"), script))
  local out = p:read("a")
  p:close()
  fs.remove(dir, { recursive = true })
  return out
end

T.case("specs_dir: environment and fallbacks", function()
  local probe = [[
    local openapi = require "kb.openapi"
    local ok, err = pcall(openapi.kfp, "v2beta1")
    print(ok and ("OK " .. openapi.specs_dir()) or ("ERR " .. tostring(err)))
  ]]
  local out = child_kbrun("KBRUN_SPECS_DIR=/nonexistent/specs", probe)
  if out == nil then return end   -- outside ctest (no KBRUN_BIN)
  T.contains(out, "ERR openapi: KBRUN_SPECS_DIR=/nonexistent/specs does not exist")
  local empty = fs.tmpdir("kbrun-test-openapi-empty")
  out = child_kbrun("KBRUN_SPECS_DIR=" .. empty, probe)
  T.contains(out, "ERR openapi: spec file " .. empty .. "/kfp/v2beta1/kfp_api_single_file.swagger.json is missing")
  fs.remove(empty, { recursive = true })
  -- without KBRUN_SOURCE_DIR the module's own location leads to <tree>/specs
  out = child_kbrun("-u KBRUN_SOURCE_DIR -u KBRUN_SPECS_DIR", probe)
  T.contains(out, "OK ")
  T.ok(out:find("/specs\n", 1, true) and not out:find("shared", 1, true), out)
end)

------------------------------------------------------------------------
-- Path matching
------------------------------------------------------------------------

T.case("operation: templates, custom verbs and literal preference", function()
  local op, params = v2:operation("POST", "/apis/v2beta1/runs/r-1:archive")
  T.eq(op.key, "POST /apis/v2beta1/runs/{run_id}:archive")
  T.eq(op.id, "RunService_ArchiveRun")
  T.eq(params.run_id, "r-1")
  T.eq(v2:operation("post", "/apis/v2beta1/runs/r-1:terminate").path, "/apis/v2beta1/runs/{run_id}:terminate")
  op, params = v2:operation("GET", "/apis/v2beta1/runs/r%2F1")
  T.eq(op.key, "GET /apis/v2beta1/runs/{run_id}")
  T.eq(params.run_id, "r/1", "path parameters are percent-decoded")
  -- literal segments win over templates
  T.eq(v2:operation("POST", "/apis/v2beta1/pipelines/create").key, "POST /apis/v2beta1/pipelines/create")
  T.eq(v2:operation("POST", "/apis/v2beta1/pipelines/upload").key, "POST /apis/v2beta1/pipelines/upload")
  T.eq(v2:operation("GET", "/apis/v2beta1/pipelines/names/p1").key, "GET /apis/v2beta1/pipelines/names/{name}")
  -- dotted parameter names (grpc-gateway field paths)
  op, params = v2:operation("PATCH", "/apis/v2beta1/pipelines/p1/versions/v9")
  T.eq(op.path, "/apis/v2beta1/pipelines/{pipeline_version.pipeline_id}/versions/{pipeline_version.pipeline_version_id}")
  T.eq(params["pipeline_version.pipeline_version_id"], "v9")
  -- query strings, full URLs and trailing slashes are ignored
  T.eq(v2:operation("GET", "http://127.0.0.1:8888/apis/v2beta1/runs/?page_size=5").key, "GET /apis/v2beta1/runs")
  -- v1beta1: same shape, different parameter names per method; slash verbs
  op, params = v1:operation("GET", "/apis/v1beta1/runs/abc")
  T.eq(op.path, "/apis/v1beta1/runs/{run_id}")
  T.eq(params.run_id, "abc")
  op, params = v1:operation("DELETE", "/apis/v1beta1/runs/abc")
  T.eq(op.path, "/apis/v1beta1/runs/{id}")
  T.eq(params.id, "abc")
  T.eq(v1:operation("POST", "/apis/v1beta1/runs/abc/terminate").path, "/apis/v1beta1/runs/{run_id}/terminate")
  T.eq(v1:operation("POST", "/apis/v1beta1/runs/abc:reportMetrics").path, "/apis/v1beta1/runs/{run_id}:reportMetrics")
  -- k8s: the spec writes "/version/" and "/api/"
  local k8s = openapi.k8s()
  T.eq(k8s:operation("GET", "/version").path, "/version/")
  T.eq(k8s:operation("GET", "/api/v1/namespaces/ns/pods/p/log").path, "/api/v1/namespaces/{namespace}/pods/{name}/log")
  T.eq(k8s:operation("GET", "/api/v1/namespaces/ns").path, "/api/v1/namespaces/{name}")
end)

T.case("operation: misses name the nearest templates", function()
  local op, msg = v2:operation("GET", "/apis/v2beta1/runz/abc")
  T.eq(op, nil)
  T.eq(msg, "no operation matches GET /apis/v2beta1/runz/abc (nearest: /apis/v2beta1/runs/{run_id} (GET, DELETE); "
    .. "/apis/v2beta1/recurringruns/{recurring_run_id} (GET, DELETE); /apis/v2beta1/experiments/{experiment_id} (GET, DELETE))")
  op, msg = v2:operation("PUT", "/apis/v2beta1/runs/abc")
  T.eq(op, nil)
  T.eq(msg, "no PUT operation for /apis/v2beta1/runs/abc (/apis/v2beta1/runs/{run_id} allows GET, DELETE)")
  op, msg = v1:operation("PATCH", "/apis/v1beta1/runs/abc")
  T.eq(msg, "no PATCH operation for /apis/v1beta1/runs/abc (/apis/v1beta1/runs/{id} allows DELETE; "
    .. "/apis/v1beta1/runs/{run_id} allows GET)")
  op, msg = v2:operation("GET", "/nothing/like/it")
  T.eq(msg, "no operation matches GET /nothing/like/it")
  T.raises(function() v2:operation("GET") end, "spec:operation(method, path): expected two strings")
  errors({ "operation: no operation matches GET /x" }, v2:validate_request{ method = "GET", path = "/x" })
  errors({ "operation: no operation matches GET /x" }, v2:validate_response{ method = "GET", path = "/x", status = 200 })
end)

T.case("operations lists every method and template", function()
  local ops = v2:operations()
  local keys = {}
  for _, op in ipairs(ops) do keys[op.key] = true end
  T.ok(keys["POST /apis/v2beta1/runs"])
  T.ok(keys["POST /apis/v2beta1/runs/{run_id}:archive"])
  T.ok(keys["DELETE /apis/v2beta1/pipelines/{pipeline_id}"])
  T.eq(#ops, 40)
end)

------------------------------------------------------------------------
-- KFP requests
------------------------------------------------------------------------

local function v2_run()
  return {
    display_name = "taxi-1",
    description = "benchmark run",
    pipeline_version_reference = { pipeline_id = "p-1", pipeline_version_id = "pv-1" },
    runtime_config = { parameters = { epochs = 3, lr = 0.01, name = "x", deep = { a = { 1, 2 } } },
                       pipeline_root = "minio://bucket/root" },
    service_account = "pipeline-runner",
  }
end

T.case("KFP v2beta1 create run: a valid body", function()
  clean(v2:validate_request{ method = "POST", path = "/apis/v2beta1/runs", body = v2_run() })
  clean(v2:validate_request{ method = "POST", path = "/apis/v2beta1/runs", query = { experiment_id = "e1" },
    body = json.encode(v2_run()), headers = { ["Content-Type"] = "application/json" } })
  -- an inline pipeline_spec is a free-form Struct
  local run = v2_run()
  run.pipeline_version_reference = nil
  run.pipeline_spec = { pipelineInfo = { name = "x" }, root = { dag = { tasks = {} } } }
  clean(v2:validate_request{ method = "POST", path = "/apis/v2beta1/runs", body = run })
end)

T.case("KFP v2beta1 create run: wrong types, unknown fields, bad JSON", function()
  local run = v2_run()
  run.pipeline_version_reference.pipeline_id = 42
  run.runtime_config.pipeline_root = { "x" }
  run.displayName = "camel"
  run.state = "DONE"
  errors({
    "body.displayName: unknown property of v2beta1Run",
    "body.pipeline_version_reference.pipeline_id: expected string, got number",
    "body.runtime_config.pipeline_root: expected string, got array",
    "body.state: expected one of RUNTIME_STATE_UNSPECIFIED, PENDING, RUNNING, SUCCEEDED, SKIPPED, FAILED, "
      .. "CANCELING, CANCELED, PAUSED, got \"DONE\"",
  }, v2:validate_request{ method = "POST", path = "/apis/v2beta1/runs", body = run })
  -- KFP requests are strict by default (the server rejects unknown fields);
  -- strict = false turns that off for one call
  run = v2_run()
  run.extra = true
  clean(v2:validate_request{ method = "POST", path = "/apis/v2beta1/runs", body = run, strict = false })
  local ok, errs = v2:validate_request{ method = "POST", path = "/apis/v2beta1/runs", body = '{"a": [1,' }
  T.eq(ok, false)
  T.eq(#errs, 1)
  T.contains(errs[1], "body: invalid JSON: unexpected end of input")
  errors({ "body: missing required request body" },
    v2:validate_request{ method = "POST", path = "/apis/v2beta1/runs" })
  errors({ "body: expected object, got array" },
    v2:validate_request{ method = "POST", path = "/apis/v2beta1/runs", body = { 1, 2 } })
  errors({ 'header.content-type: "text/plain" is not accepted (consumes application/json)' },
    v2:validate_request{ method = "POST", path = "/apis/v2beta1/runs", body = v2_run(),
      headers = { ["content-type"] = "text/plain" } })
end)

T.case("KFP: bodies on operations without one", function()
  clean(v2:validate_request{ method = "POST", path = "/apis/v2beta1/runs/r1:archive" })
  clean(v2:validate_request{ method = "POST", path = "/apis/v2beta1/runs/r1:archive", body = "{}" })
  errors({ "body: operation takes no request body" },
    v2:validate_request{ method = "POST", path = "/apis/v2beta1/runs/r1:archive", body = { run_id = "r1" } })
end)

T.case("KFP v1beta1 create run with resource_references", function()
  local run = {
    name = "taxi-1",
    pipeline_spec = { pipeline_id = "p1", parameters = { { name = "epochs", value = "3" } } },
    resource_references = {
      { key = { type = "EXPERIMENT", id = "e1" }, relationship = "OWNER" },
      { key = { type = "PIPELINE_VERSION", id = "v1" }, relationship = "CREATOR" },
    },
  }
  clean(v1:validate_request{ method = "POST", path = "/apis/v1beta1/runs", body = run })
  run.resource_references[2].key.type = "PIPELINE_VERSIONS"
  run.resource_references[1].relationship = 1
  run.resource_references[3] = { key = { id = 7 } }
  errors({
    "body.resource_references[0].relationship: expected string, got number",
    "body.resource_references[1].key.type: expected one of UNKNOWN_RESOURCE_TYPE, EXPERIMENT, JOB, PIPELINE, "
      .. "PIPELINE_VERSION, NAMESPACE, got \"PIPELINE_VERSIONS\"",
    "body.resource_references[2].key.id: expected string, got number",
  }, v1:validate_request{ method = "POST", path = "/apis/v1beta1/runs", body = run })
  -- a map where the list belongs
  errors({ "body.resource_references: expected array, got object" },
    v1:validate_request{ method = "POST", path = "/apis/v1beta1/runs",
      body = { name = "r", resource_references = { key = { id = "e1" } } } })
  -- an empty Lua table is accepted as an empty list
  clean(v1:validate_request{ method = "POST", path = "/apis/v1beta1/runs", body = { name = "r", resource_references = {} } })
end)

T.case("KFP query parameters", function()
  local list = "/apis/v2beta1/runs"
  clean(v2:validate_request{ method = "GET", path = list, query = { page_size = 10, sort_by = "created_at desc",
    filter = '{"predicates":[]}', namespace = "kubeflow" } })
  clean(v2:validate_request{ method = "GET",
    path = list .. "?page_size=200&sort_by=created_at%20desc&filter=%7B%22predicates%22%3A%5B%5D%7D&page_token=" })
  errors({
    'query.page_size: expected int32, got "ten"',
    "query.pageSize: unknown parameter (known: experiment_id, filter, namespace, page_size, page_token, sort_by)",
  }, v2:validate_request{ method = "GET", path = list .. "?page_size=ten&pageSize=10" })
  errors({ "query.page_size: 3000000000 is out of range for int32" },
    v2:validate_request{ method = "GET", path = list, query = "page_size=3000000000" })
  errors({ "query.page_size: given 2 times, expected one value" },
    v2:validate_request{ method = "GET", path = list, query = { page_size = { 1, 2 } } })
  -- unknown parameters can be ignored per call or per spec
  clean(v2:validate_request{ method = "GET", path = list .. "?x=1", unknown_query = "ignore" })
  clean(openapi.kfp("v2beta1", { unknown_query = "ignore" }):validate_request{ method = "GET", path = list .. "?x=1" })
  -- booleans and enums
  clean(v2:validate_request{ method = "DELETE", path = "/apis/v2beta1/pipelines/p1?cascade=true" })
  errors({ 'query.cascade: expected boolean, got "yes"' },
    v2:validate_request{ method = "DELETE", path = "/apis/v2beta1/pipelines/p1?cascade=yes" })
  errors({ 'query.propagation_policy: expected one of DELETE_PROPAGATION_POLICY_UNSPECIFIED, FOREGROUND, '
      .. 'BACKGROUND, ORPHAN, got "SOON"' },
    v2:validate_request{ method = "DELETE", path = "/apis/v2beta1/recurringruns/r1?propagation_policy=SOON" })
  errors({ "query.experiment_id: unknown parameter (known: none)" },
    v2:validate_request{ method = "GET", path = "/apis/v2beta1/healthz?experiment_id=1" })
  -- the v1 nested query field names
  clean(v1:validate_request{ method = "GET",
    path = "/apis/v1beta1/runs?resource_reference_key.type=EXPERIMENT&resource_reference_key.id=e1&page_size=5" })
end)

T.case("upload endpoints check form fields", function()
  clean(v2:validate_request{ method = "POST", path = "/apis/v2beta1/pipelines/upload?name=p&display_name=P",
    body = { uploadfile = "apiVersion: argoproj.io/v1alpha1" } })
  errors({ "form.uploadfile: missing required field", "form.file: unknown field" },
    v2:validate_request{ method = "POST", path = "/apis/v2beta1/pipelines/upload", body = { file = "x" } })
end)

------------------------------------------------------------------------
-- KFP responses
------------------------------------------------------------------------

local function got_run(state)
  return {
    run_id = "3f6b1c5e-0000-4000-8000-000000000001",
    experiment_id = "e1",
    display_name = "taxi-1",
    storage_state = "AVAILABLE",
    pipeline_version_reference = { pipeline_id = "p1", pipeline_version_id = "v1" },
    runtime_config = { parameters = { epochs = 3 } },
    created_at = "2024-05-01T10:00:00Z",
    scheduled_at = "2024-05-01T10:00:00.123456Z",
    finished_at = "2024-05-01T10:20:00+02:00",
    state = state,
    state_history = { { update_time = "2024-05-01T10:00:00Z", state = "PENDING" },
                      { update_time = "2024-05-01T10:00:05Z", state = state } },
    run_details = { task_details = { { task_id = "t1", display_name = "train", state = "RUNNING",
      create_time = "2024-05-01T10:00:01Z", child_tasks = { { pod_name = "taxi-1-train-123" } } } } },
  }
end

T.case("KFP GetRun responses: every state, errors", function()
  for _, state in ipairs({ "RUNTIME_STATE_UNSPECIFIED", "PENDING", "RUNNING", "SUCCEEDED", "SKIPPED",
                           "FAILED", "CANCELING", "CANCELED", "PAUSED" }) do
    clean(v2:validate_response{ method = "GET", path = "/apis/v2beta1/runs/r1", status = 200, body = got_run(state) })
  end
  local run = got_run("RUNNING")
  run.state = "Running"
  run.created_at = "2024-05-01 10:00:00"
  run.state_history[2].update_time = 1714557605
  errors({
    'body.created_at: "2024-05-01 10:00:00" is not an RFC 3339 date-time',
    'body.state: expected one of RUNTIME_STATE_UNSPECIFIED, PENDING, RUNNING, SUCCEEDED, SKIPPED, FAILED, '
      .. 'CANCELING, CANCELED, PAUSED, got "Running"',
    "body.state_history[1].update_time: expected string, got number",
  }, v2:validate_response{ method = "GET", path = "/apis/v2beta1/runs/r1", status = 200, body = run })
  -- errors use the default response: google.rpc.Status with Any details
  clean(v2:validate_response{ method = "GET", path = "/apis/v2beta1/runs/nope", status = 404,
    body = '{"code":5,"message":"run nope not found","details":[{"@type":"type.googleapis.com/google.rpc.Status",'
      .. '"code":5,"message":"not found"}]}' })
  errors({ "body.code: expected integer, got number 5.5", "body.details[0][\"@type\"]: expected string, got number" },
    v2:validate_response{ method = "GET", path = "/apis/v2beta1/runs/nope", status = 404,
      body = { code = 5.5, message = "x", details = { { ["@type"] = 1 } } } })
end)

T.case("KFP int64 fields are JSON strings", function()
  local rr = {
    recurring_run_id = "rr1", display_name = "every minute", max_concurrency = "10", mode = "ENABLE",
    status = "ENABLED", no_catchup = true,
    trigger = { periodic_schedule = { interval_second = "60", start_time = "2024-05-01T10:00:00Z" } },
    pipeline_version_reference = { pipeline_id = "p1" },
  }
  local path = "/apis/v2beta1/recurringruns/rr1"
  clean(v2:validate_response{ method = "GET", path = path, status = 200, body = rr })
  rr.max_concurrency = 10
  rr.trigger.periodic_schedule.interval_second = "60s"
  errors({
    "body.max_concurrency: expected int64 as a JSON string, got number",
    'body.trigger.periodic_schedule.interval_second: expected a decimal int64 string, got "60s"',
  }, v2:validate_response{ method = "GET", path = path, status = 200, body = rr })
  -- requests accept numbers (proto3 JSON parsers do), unless int64 = "strict"
  rr.trigger.periodic_schedule.interval_second = "60"
  clean(v2:validate_request{ method = "POST", path = "/apis/v2beta1/recurringruns", body = rr })
  errors({ "body.max_concurrency: expected int64 as a JSON string, got number" },
    v2:validate_request{ method = "POST", path = "/apis/v2beta1/recurringruns", body = rr, int64 = "strict" })
  rr.max_concurrency = "9223372036854775808"
  errors({ 'body.max_concurrency: "9223372036854775808" is out of range for int64' },
    v2:validate_request{ method = "POST", path = "/apis/v2beta1/recurringruns", body = rr })
  rr.max_concurrency = 1.5
  errors({ "body.max_concurrency: 1.5 is out of range for int64" },
    v2:validate_request{ method = "POST", path = "/apis/v2beta1/recurringruns", body = rr })
  -- the list key of recurring runs is camelCase in the real API
  clean(v2:validate_response{ method = "GET", path = "/apis/v2beta1/recurringruns", status = 200, strict = true,
    body = { recurringRuns = { { recurring_run_id = "rr1" } }, total_size = 1 } })
end)

T.case("strict responses flag fields the real API does not have", function()
  local run = got_run("SUCCEEDED")
  run.sim_node = "node-1"
  run.run_details.task_details[1].sim_duration = 12
  local res = { method = "GET", path = "/apis/v2beta1/runs/r1", status = 200, body = run }
  clean(v2:validate_response(res))
  res.strict = true
  errors({
    "body.run_details.task_details[0].sim_duration: unknown property of v2beta1PipelineTaskDetail",
    "body.sim_node: unknown property of v2beta1Run",
  }, v2:validate_response(res))
  -- the same by spec option
  local strict = openapi.kfp("v2beta1", { strict = true })
  res.strict = nil
  T.eq(#select(2, strict:validate_response(res)), 2)
  -- free-form Struct and map values stay free in strict mode
  run = got_run("SUCCEEDED")
  run.pipeline_spec = { anything = { goes = true } }
  run.runtime_config.parameters.whatever = { 1, "two" }
  clean(strict:validate_response{ method = "GET", path = "/apis/v2beta1/runs/r1", status = 200, body = run })
end)

T.case("KFP server facts: healthz and upload errors", function()
  clean(v2:validate_response{ method = "GET", path = "/apis/v2beta1/healthz", status = 200, strict = true,
    body = { commit_sha = "abc", tag_name = "2.5.0", multi_user = false, pipeline_store = "database" } })
  errors({ "body.pipeline_store: unknown property" },
    v1:validate_response{ method = "GET", path = "/apis/v1beta1/healthz", status = 200, strict = true,
      body = { commit_sha = "abc", tag_name = "2.5.0", multi_user = false, pipeline_store = "database" } })
  clean(v2:validate_response{ method = "POST", path = "/apis/v2beta1/pipelines/upload", status = 400, strict = true,
    body = { error_message = "unknown template format", error_details = "..." } })
  errors({ "body.code: unknown property", "body.message: unknown property" },
    v2:validate_response{ method = "POST", path = "/apis/v2beta1/pipelines/upload_version", status = 409,
      strict = true, body = { code = 6, message = "exists" } })
  -- the pristine document still says googleRpcStatus
  local pristine = openapi.load(fs.join(openapi.specs_dir(), "kfp", "v2beta1", "kfp_api_single_file.swagger.json"))
  clean(pristine:validate_response{ method = "POST", path = "/apis/v2beta1/pipelines/upload", status = 409,
    strict = true, body = { code = 6, message = "exists" } })
end)

T.case("response status selection", function()
  local k8s = openapi.k8s()
  clean(k8s:validate_response{ method = "POST", path = "/api/v1/namespaces/ns/pods", status = 201,
    body = { kind = "Pod", apiVersion = "v1", metadata = { name = "p" } } })
  -- 401 documents no body
  clean(k8s:validate_response{ method = "GET", path = "/api/v1/namespaces/ns/pods/p", status = 401, body = "nope" })
  -- undocumented errors are meta/v1 Status for Kubernetes
  clean(k8s:validate_response{ method = "GET", path = "/api/v1/namespaces/ns/pods/p", status = 404,
    body = { kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure", reason = "NotFound",
             message = 'pods "p" not found', code = 404, details = { name = "p", kind = "pods" } } })
  errors({ "body.code: expected integer, got string" },
    k8s:validate_response{ method = "GET", path = "/api/v1/namespaces/ns/pods/p", status = 404,
      body = { kind = "Status", code = "404" } })
  local bare = openapi.load(fs.join(openapi.specs_dir(), "k8s", "k8s-subset-v1.32-swagger.json"))
  errors({ "status: 404 is not a documented response (documented: 200, 401)" },
    bare:validate_response{ method = "GET", path = "/api/v1/namespaces/ns/pods/p", status = 404, body = {} })
  errors({ "body: missing response body" },
    v2:validate_response{ method = "GET", path = "/apis/v2beta1/runs/r1", status = 200 })
  local ok, errs = v2:validate_response{ method = "GET", path = "/apis/v2beta1/runs/r1", status = 200, body = "no" }
  T.eq(ok, false)
  T.contains(errs[1], "body: invalid JSON: ")
  -- set_response: a schema for one status, false to skip the body
  local spec = openapi.kfp("v2beta1")
  spec:set_response("GET", "/apis/v2beta1/runs/{run_id}", 503, false)
  clean(spec:validate_response{ method = "GET", path = "/apis/v2beta1/runs/r1", status = 503, body = "overloaded" })
  T.raises(function() v2:validate_response{ method = "GET", path = "/x" } end, "spec:validate_response: status is required")
  T.raises(function() v2:validate_request{ path = "/x" } end, "method and path are required strings")
end)

------------------------------------------------------------------------
-- Argo and Kubernetes
------------------------------------------------------------------------

local function workflow()
  return {
    apiVersion = "argoproj.io/v1alpha1", kind = "Workflow",
    metadata = { generateName = "bench-", namespace = "argo", labels = { ["kbrun/experiment"] = "e1" } },
    spec = {
      entrypoint = "main",
      serviceAccountName = "argo",
      arguments = { parameters = { { name = "n", value = "3" } } },
      podGC = { strategy = "OnPodCompletion" },
      ttlStrategy = { secondsAfterCompletion = 300 },
      nodeSelector = { pool = "cpu" },
      templates = {
        { name = "main", dag = { tasks = {
          { name = "a", template = "step" },
          { name = "b", template = "step", dependencies = { "a" } } } } },
        { name = "step", container = { image = "alpine:3", command = { "sh", "-c" }, args = { "sleep 1" },
          resources = { requests = { cpu = "100m", memory = 64 } } }, retryStrategy = { limit = 2 } },
        { name = "seq", steps = { { { name = "s1", template = "step" } }, { { name = "s2", template = "step" } } } },
      },
    },
  }
end

T.case("Argo WorkflowCreateRequest against the argo swagger", function()
  local argo = openapi.argo()
  local op = argo:operation("POST", "/api/v1/workflows/argo")
  T.eq(op.id, "WorkflowService_CreateWorkflow")
  clean(argo:validate_request{ method = "POST", path = "/api/v1/workflows/argo",
    body = { namespace = "argo", serverDryRun = false, workflow = workflow() } })
  local wf = workflow()
  wf.spec.templates[2].container.image = { "alpine" }
  wf.spec.templates[1].dag.tasks[2].dependencies = "a"
  wf.spec.ttlStrategy.secondsAfterCompletion = "300"
  wf.spec.entrypiont = "main"
  wf.metadata = nil
  errors({
    "body.workflow.metadata: missing required property",
    "body.workflow.spec.entrypiont: unknown property of io.argoproj.workflow.v1alpha1.WorkflowSpec",
    "body.workflow.spec.templates[0].dag.tasks[1].dependencies: expected array, got string",
    "body.workflow.spec.templates[1].container.image: expected string, got array",
    "body.workflow.spec.ttlStrategy.secondsAfterCompletion: expected integer, got string",
  }, argo:validate_request{ method = "POST", path = "/api/v1/workflows/argo", body = { workflow = wf } })
  -- responses: Workflow, and grpc-gateway errors
  local created = workflow()
  created.metadata.name = "bench-x7k2p"
  created.status = { phase = "Running", startedAt = "2024-05-01T10:00:00Z", progress = "0/2",
    nodes = { ["bench-x7k2p"] = { id = "bench-x7k2p", name = "bench-x7k2p", type = "DAG", phase = "Running" } } }
  clean(argo:validate_response{ method = "POST", path = "/api/v1/workflows/argo", status = 200, body = created })
  clean(argo:validate_response{ method = "GET", path = "/api/v1/workflows/argo/missing", status = 404,
    body = { code = 5, message = 'workflows.argoproj.io "missing" not found', details = {} } })
  -- list query parameters with dotted names
  clean(argo:validate_request{ method = "GET",
    path = "/api/v1/workflows/argo?listOptions.labelSelector=a%3Db&listOptions.limit=10&fields=items.metadata.name" })
  errors({ 'query.listOptions.limit: expected int64, got "ten"' },
    argo:validate_request{ method = "GET", path = "/api/v1/workflows/argo?listOptions.limit=ten" })
end)

local function pod()
  return {
    apiVersion = "v1", kind = "Pod",
    metadata = { name = "p1", namespace = "default", labels = { ["app.kubernetes.io/name"] = "bench" },
                 creationTimestamp = null },
    spec = {
      restartPolicy = "Never",
      nodeSelector = { pool = "gpu" },
      containers = { {
        name = "main", image = "busybox", command = { "sleep", "1" },
        resources = { requests = { cpu = "250m", memory = "64Mi" }, limits = { cpu = 1, ["nvidia.com/gpu"] = "1" } },
        ports = { { containerPort = 8080, protocol = "TCP" } },
        env = { { name = "A", value = "1" } },
        livenessProbe = { httpGet = { path = "/healthz", port = "http" }, periodSeconds = 5 },
        readinessProbe = { tcpSocket = { port = 8080 } },
      } },
    },
  }
end

T.case("Kubernetes Pod against the v1.32 subset", function()
  local k8s = openapi.k8s()
  clean(k8s:validate_request{ method = "POST", path = "/api/v1/namespaces/default/pods", body = pod(),
    query = { fieldManager = "kbrun", fieldValidation = "Strict" } })
  local p = pod()
  local c = p.spec.containers[1]
  c.name = nil
  c.ports[1].containerPort = "8080"
  c.livenessProbe.httpGet.port = true
  c.resources.limits.cpu = { 1 }
  p.metadata.labels = { "a" }
  p.spec.nodeName = 5
  p.spec.containerz = {}
  errors({
    "body.metadata.labels: expected object, got array",
    "body.spec.containers[0].name: missing required property",
    "body.spec.containers[0].livenessProbe.httpGet.port: expected integer or string, got boolean",
    "body.spec.containers[0].ports[0].containerPort: expected integer, got string",
    'body.spec.containers[0].resources.limits.cpu: expected string or number, got array',
    "body.spec.containerz: unknown property of io.k8s.api.core.v1.PodSpec",
    "body.spec.nodeName: expected string, got number",
  }, k8s:validate_request{ method = "POST", path = "/api/v1/namespaces/default/pods", body = p })
  errors({
    "query.watch: expected boolean, got \"maybe\"",
    "query.limit: expected integer, got \"-\"",
    "query.since: unknown parameter (known: allowWatchBookmarks, continue, fieldSelector, labelSelector, limit, "
      .. "pretty, resourceVersion, resourceVersionMatch, sendInitialEvents, timeoutSeconds, watch)",
  }, k8s:validate_request{ method = "GET", path = "/api/v1/namespaces/default/pods?watch=maybe&limit=-&since=1" })
  clean(k8s:validate_request{ method = "GET",
    path = "/api/v1/namespaces/default/pods?watch=1&limit=500&labelSelector=a%3Db&resourceVersion=12" })
  -- int32 range on integers
  p = pod()
  p.spec.containers[1].ports[1].containerPort = 2 ^ 31
  errors({ "body.spec.containers[0].ports[0].containerPort: 2147483648 is out of range for int32" },
    k8s:validate_request{ method = "POST", path = "/api/v1/namespaces/default/pods", body = p })
end)

T.case("Kubernetes Job: v2 subset and the OpenAPI v3 fixture", function()
  local job = {
    apiVersion = "batch/v1", kind = "Job",
    metadata = { name = "pi", labels = { app = "pi" } },
    spec = { backoffLimit = 6, completions = 1, parallelism = 1, completionMode = "NonIndexed",
      template = { metadata = { creationTimestamp = null },
        spec = { restartPolicy = "Never", containers = { { name = "pi", image = "perl" } } } } },
    status = { active = 1, startTime = "2024-05-01T10:00:00Z", uncountedTerminatedPods = {},
      conditions = { { type = "Complete", status = "True", lastTransitionTime = "2024-05-01T10:01:00Z" } } },
  }
  for _, spec in ipairs({ openapi.k8s(), openapi.k8s_v3("apis/batch/v1") }) do
    local path = "/apis/batch/v1/namespaces/default/jobs"
    clean(spec:validate_request{ method = "POST", path = path, body = job })
    clean(spec:validate_response{ method = "GET", path = path .. "/pi", status = 200, body = job, strict = true })
    local bad = json.decode(json.encode(job))
    bad.spec.template.spec.containers[1].name = nil
    bad.spec.backoffLimit = "6"
    bad.metadata.uid = 7
    bad.status.startTime = "yesterday"
    errors({
      "body.metadata.uid: expected string, got number",
      "body.spec.backoffLimit: expected integer, got string",
      "body.spec.template.spec.containers[0].name: missing required property",
      'body.status.startTime: "yesterday" is not an RFC 3339 date-time',
    }, spec:validate_request{ method = "POST", path = path, body = bad })
  end
  -- the v3 fixture wraps $refs in allOf; unknown properties are still found
  local v3 = openapi.k8s_v3("apis/batch/v1")
  local bad = json.decode(json.encode(job))
  bad.metadata.lables = {}
  errors({ "body.metadata.lables: unknown property of io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" },
    v3:validate_request{ method = "POST", path = "/apis/batch/v1/namespaces/default/jobs", body = bad })
  -- JSON and merge patches
  clean(v3:validate_request{ method = "PATCH", path = "/apis/batch/v1/namespaces/default/jobs/pi",
    headers = { ["Content-Type"] = "application/merge-patch+json" }, body = { spec = { suspend = true } } })
  clean(openapi.k8s():validate_request{ method = "PATCH", path = "/apis/batch/v1/namespaces/default/jobs/pi",
    headers = { ["Content-Type"] = "application/json-patch+json" },
    body = { { op = "replace", path = "/spec/suspend", value = true } } })
end)

------------------------------------------------------------------------
-- Schema keywords on small documents
------------------------------------------------------------------------

T.case("validate: refs by name, formats and ranges", function()
  local spec = openapi.load(doc2({
    Thing = { type = "object", properties = {
      i32 = { type = "integer", format = "int32" },
      u32 = { type = "integer", format = "uint32" },
      u64s = { type = "string", format = "uint64" },
      i64 = { type = "integer", format = "int64" },
      d = { type = "number", format = "double" },
      raw = { type = "string", format = "byte" },
      day = { type = "string", format = "date" },
      at = { type = "string", format = "date-time" },
      flag = { type = "boolean" },
      small = { type = "integer", minimum = 1, maximum = 10 },
      name = { type = "string", minLength = 2, maxLength = 3 },
      tags = { type = "array", items = { type = "string" }, minItems = 1, maxItems = 2 },
      n = { type = "string", nullable = true },
      xn = { type = "string", ["x-nullable"] = true },
    } },
  }))
  clean(spec:validate("Thing", { i32 = -2147483648, u32 = 4294967295, u64s = "18446744073709551615",
    i64 = math.maxinteger, d = 1, raw = "aGk=", day = "2024-02-29", at = "2024-02-29t23:59:60.5z",
    flag = false, small = 10, name = "ab", tags = { "x" }, n = null, xn = null }))
  clean(spec:validate("#/definitions/Thing", { raw = "aGk", u64s = "0" }))
  errors({
    'value.at: "2024-02-29T24:00:00Z" is not an RFC 3339 date-time',
    "value.d: expected number, got string",
    'value.day: "2023-02-29" is not an RFC 3339 full-date',
    "value.flag: expected boolean, got number",
    "value.i32: 2147483648 is out of range for int32",
    "value.n: expected string, got boolean",
    "value.name: length 4 is above maxLength 3",
    'value.raw: "a$b=" is not valid base64',
    "value.small: 0 is below the minimum 1",
    "value.tags: 3 items, above maxItems 2",
    "value.u32: -1 is out of range for uint32",
    'value.u64s: "18446744073709551616" is out of range for uint64',
  }, spec:validate("Thing", { i32 = 2147483648, u32 = -1, u64s = "18446744073709551616", d = "1",
    raw = "a$b=", day = "2023-02-29", at = "2024-02-29T24:00:00Z", flag = 1, small = 0, name = "abcd",
    tags = { "a", "b", "c" }, n = true }))
  errors({
    "thing.name: length 1 is below minLength 2",
    "thing.small: 11 is above the maximum 10",
    "thing.tags: 0 items, below minItems 1",
    "thing.xn: expected string, got object",
  }, spec:validate("Thing", { name = "a", small = 11, tags = json.array(), xn = {} }, "thing"))
  errors({ "value: expected object, got null" }, spec:validate("Thing", null))
  clean(spec:validate("Thing", null, nil, { allow_null = true }))
  errors({ "value.i32: expected integer, got number 1.5" }, spec:validate("Thing", { i32 = 1.5 }))
  clean(spec:validate("Thing", { i32 = 3.0 }))   -- kb.json writes 3.0 as 3
  T.raises(function() spec:validate("Nope", {}) end, 'spec:validate: unresolvable $ref "#/definitions/Nope"')
  T.raises(function() spec:validate(5, {}) end, "spec:validate: schema must be a table, a $ref or a definition name")
  -- an inline schema table
  errors({ 'value: expected one of a, b, got "c"' }, spec:validate({ type = "string", enum = { "a", "b" } }, "c"))
  errors({ "value: expected one of 1, 2, got 3" }, spec:validate({ enum = { 1, 2 } }, 3))
end)

T.case("validate: additionalProperties, allOf, oneOf, anyOf, Any, preserve-unknown", function()
  local spec = openapi.load(doc2({
    Closed = { type = "object", properties = { a = { type = "string" } }, additionalProperties = false },
    Map = { type = "object", additionalProperties = { type = "integer" } },
    Free = { type = "object" },
    Base = { type = "object", required = { "id" }, properties = { id = { type = "string" } } },
    Both = { allOf = { { ["$ref"] = "#/definitions/Base" },
                       { type = "object", properties = { size = { type = "integer" } } } } },
    Either = { oneOf = { { type = "integer" }, { type = "string" } } },
    Shapes = { oneOf = { { type = "object", properties = { r = { type = "number" } }, required = { "r" } },
                         { type = "object", properties = { w = { type = "number" } }, required = { "w" } } } },
    Any2 = { anyOf = { { type = "string" }, { type = "number" } } },
    Wrapper = { type = "object", properties = { any = { ["$ref"] = "#/definitions/protobufAny" },
      raw = { type = "object", ["x-kubernetes-preserve-unknown-fields"] = true, properties = { k = { type = "string" } } },
      ios = { ["x-kubernetes-int-or-string"] = true } } },
    protobufAny = { type = "object", properties = { ["@type"] = { type = "string" } } },
  }))
  errors({ "value.b: unknown property of Closed" }, spec:validate("Closed", { a = "x", b = 1 }))
  errors({ 'value["x y"]: expected integer, got string' }, spec:validate("Map", { ok = 1, ["x y"] = "2" }))
  clean(spec:validate("Free", { anything = { 1, 2 } }, nil, { strict = true }))
  clean(spec:validate("Both", { id = "1", size = 2 }, nil, { strict = true }))
  errors({ "value.extra: unknown property of Both", "value.id: missing required property" },
    spec:validate("Both", { size = 2, extra = true }, nil, { strict = true }))
  errors({ "value.size: expected integer, got string" }, spec:validate("Both", { id = "1", size = "2" }))
  clean(spec:validate("Either", 5))
  clean(spec:validate("Either", "5"))
  errors({ "value: expected integer or string, got boolean" }, spec:validate("Either", true))
  clean(spec:validate("Shapes", { r = 1 }))
  errors({ "value: matches 2 alternatives of oneOf, expected exactly one" }, spec:validate("Shapes", { r = 1, w = 2 }))
  errors({ "value: matches no alternative of oneOf: (1) value.r: missing required property; "
    .. "(2) value.w: missing required property" }, spec:validate("Shapes", { h = 1 }))
  errors({ "value: expected string or number, got boolean" }, spec:validate("Any2", false))
  clean(spec:validate("Wrapper", { any = { ["@type"] = "type.googleapis.com/x.Y", whatever = { 1 } },
    raw = { k = "v", extra = 1 }, ios = "50%" }, nil, { strict = true }))
  errors({ "value.ios: expected integer or string, got number", "value.raw.k: expected string, got number" },
    spec:validate("Wrapper", { raw = { k = 1 }, ios = 1.5 }, nil, { strict = true }))
  errors({ "value.any.x: unknown property of protobufAny" }, spec:validate("Wrapper", { any = { x = 1 } }, nil, { strict = true }))
end)

T.case("validate: $ref cycles do not hang", function()
  local spec = openapi.load(doc2({
    Node = { type = "object", properties = { name = { type = "string" },
      children = { type = "array", items = { ["$ref"] = "#/definitions/Node" } } } },
    A = { ["$ref"] = "#/definitions/B" },
    B = { ["$ref"] = "#/definitions/A" },
    Self = { allOf = { { ["$ref"] = "#/definitions/Self" } } },
    Loop = { type = "object", properties = { next = { ["$ref"] = "#/definitions/Loop" } } },
    Remote = { ["$ref"] = "other.json#/definitions/X" },
  }))
  clean(spec:validate("Node", { name = "root", children = { { name = "a", children = { { name = "b" } } } } }))
  errors({ "value.children[0].children[0].name: expected string, got number" },
    spec:validate("Node", { children = { { children = { { name = 1 } } } } }))
  errors({ 'value: $ref cycle at "#/definitions/A"' }, spec:validate({ ["$ref"] = "#/definitions/A" }, {}))
  errors({ "value: schema cycle at Self" }, spec:validate("Self", {}))
  errors({ 'value: unsupported $ref "other.json#/definitions/X" (only local refs)' }, spec:validate("Remote", {}))
  -- a self-referencing Lua value stops at the depth limit
  local loop = {}
  loop.next = loop
  local ok, errs = spec:validate("Loop", loop)
  T.eq(ok, false)
  T.eq(#errs, 1)
  T.contains(errs[1], ": nested deeper than 256 levels")
  -- the recursive JSONSchemaProps of the full k8s swagger
  local k8s = openapi.k8s()
  clean(k8s:validate("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
    { type = "object", properties = { spec = { type = "object", ["x-kubernetes-preserve-unknown-fields"] = true,
      properties = { deep = { type = "array", items = { type = "string" } } } } } }))
end)

T.case("OpenAPI 3: requestBody, parameters with schemas, content by media type", function()
  local spec = openapi.load({
    openapi = "3.0.3", info = { title = "t", version = "1" },
    paths = { ["/items/{id}"] = {
      parameters = { { name = "id", ["in"] = "path", required = true, schema = { type = "integer" } } },
      put = {
        parameters = { { name = "tag", ["in"] = "query", required = true, schema = { type = "array", items = { type = "string" } } },
                       { name = "X-Token", ["in"] = "header", required = true, schema = { type = "string" } } },
        requestBody = { required = true, content = { ["application/json"] = { schema = { ["$ref"] = "#/components/schemas/Item" } } } },
        responses = { ["2XX"] = { description = "ok", content = { ["application/json"] = { schema = { ["$ref"] = "#/components/schemas/Item" } } } },
                      ["500"] = { description = "err", content = { ["text/plain"] = { schema = { type = "string" } } } } },
      },
    } },
    components = { schemas = { Item = { type = "object", required = { "name" },
      properties = { name = { type = "string" }, size = { type = { "integer", "null" } } } } } },
  })
  clean(spec:validate_request{ method = "PUT", path = "/items/7?tag=a&tag=b", headers = { ["x-token"] = "t" },
    body = { name = "x", size = null } })
  errors({
    'path.id: expected integer, got "seven"',
    "query.tag: missing required parameter",
    "header.x-token: missing required parameter",
    "body.name: missing required property",
    "body.size: expected integer or null, got string",
  }, spec:validate_request{ method = "PUT", path = "/items/seven", body = { size = "1" } })
  errors({ 'header.content-type: "text/xml" is not accepted (consumes application/json)' },
    spec:validate_request{ method = "PUT", path = "/items/7?tag=a", headers = { ["X-Token"] = "t",
      ["Content-Type"] = "text/xml" }, body = { name = "x" } })
  clean(spec:validate_response{ method = "PUT", path = "/items/7", status = 204, body = { name = "x" } })
  clean(spec:validate_response{ method = "PUT", path = "/items/7", status = 500, body = "boom" })
  errors({ "status: 404 is not a documented response (documented: 2XX, 500)" },
    spec:validate_response{ method = "PUT", path = "/items/7", status = 404 })
  -- a spec-wide error schema for undocumented errors
  local lenient = openapi.load(spec.compiled.doc, { error_schema = { type = "object", required = { "message" } } })
  errors({ "body.message: missing required property" },
    lenient:validate_response{ method = "PUT", path = "/items/7", status = 404, body = {} })
end)

T.case("misuse and broken documents raise clear errors", function()
  local spec = openapi.load(doc2({ Thing = { type = "object" } }, {
    ["/broken"] = { get = { parameters = { { ["$ref"] = "#/parameters/missing" } }, responses = {} } },
    ["/ok"] = { get = { responses = { ["200"] = { description = "x", schema = false } } } },
  }))
  local err = T.raises(function() spec:operation("GET", "/broken") end,
    'GET /broken: parameter unresolvable $ref "#/parameters/missing"')
  T.eq(err.class, "openapi")
  errors({ "value: no value is allowed here" }, spec:validate(false, 1))
  clean(spec:validate(true, 1))
  T.raises(function() spec:set_definition("Thing") end, "spec:set_definition(name, schema): expected a string and a table")
  T.raises(function() spec:set_response("GET", "/ok", 200, "x") end,
    "spec:set_response(method, template, status, schema): expected two strings, a status and a table or false")
  T.raises(function() v2:validate_request{ method = "GET", path = "/apis/v2beta1/runs", query = 5 } end,
    "spec:validate_request: query must be a table or a string")
  T.raises(function() v2:validate_request{ method = "GET", path = "/apis/v2beta1/runs", query = { 1 } } end,
    "spec:validate_request: query keys must be strings")
  T.raises(openapi.load, 'kb.openapi.load: option unknown_query must be "error" or "ignore"', doc2(), { unknown_query = "warn" })
  T.raises(openapi.load, "kb.openapi.load: options must be a table", doc2(), true)
  errors({ "value: key 1 is not a string" }, spec:validate({ type = "object", properties = {} }, { [1] = "a", b = 2 }))
  -- set_definition replaces a schema for one spec object only
  local a, b = openapi.load(spec.compiled.doc), openapi.load(spec.compiled.doc)
  a:set_definition("Thing", { type = "string" })
  errors({ "value: expected string, got object" }, a:validate("Thing", { x = 1 }))
  clean(b:validate("Thing", { x = 1 }))
  -- raw query strings merge with the path's own query
  errors({ 'query.page_size: expected int32, got "x"' },
    v2:validate_request{ method = "GET", path = "/apis/v2beta1/runs?page_size=x", query = "?sort_by=name" })
end)

------------------------------------------------------------------------
-- Recorder
------------------------------------------------------------------------

T.case("recorder: violations, assert_clean and coverage", function()
  local rec = openapi.recorder(openapi.kfp("v2beta1"), { strict = true })
  local ok, errs = rec:check({ method = "POST", path = "/apis/v2beta1/runs", body = v2_run() },
    { status = 200, body = got_run("PENDING") })
  clean(ok, errs)
  T.eq(rec:assert_clean(), true)
  rec:check({ method = "GET", path = "/apis/v2beta1/runs/r1" }, { status = 200, body = got_run("PENDING") })
  rec:check({ method = "GET", path = "/apis/v2beta1/runs?page_size=x" }, { status = 200, body = { runs = {} } })
  local bad = got_run("PENDING")
  bad.state = "DONE"
  bad.sim = 1
  ok, errs = rec:check({ method = "GET", path = "/apis/v2beta1/runs/r2" }, { status = 200, body = bad })
  T.eq(ok, false)
  T.same(errs, {
    "GET /apis/v2beta1/runs/r2 response 200: body.sim: unknown property of v2beta1Run",
    'GET /apis/v2beta1/runs/r2 response 200: body.state: expected one of RUNTIME_STATE_UNSPECIFIED, PENDING, '
      .. 'RUNNING, SUCCEEDED, SKIPPED, FAILED, CANCELING, CANCELED, PAUSED, got "DONE"',
  })
  -- an unknown operation is reported once
  ok, errs = rec:check({ method = "GET", path = "/apis/v2beta1/nope" }, { status = 404, body = {} })
  T.same(errs, { "GET /apis/v2beta1/nope request: operation: no operation matches GET /apis/v2beta1/nope "
    .. "(nearest: /apis/v2beta1/pipelines (GET, POST); /apis/v2beta1/experiments (GET, POST); /apis/v2beta1/filters (GET))" })
  -- a response alone
  rec:check(nil, { method = "POST", path = "/apis/v2beta1/runs/r1:archive", status = 200, body = {} })
  T.eq(#rec:violations(), 4)
  local err = T.raises(function() rec:assert_clean() end, "4 API violations in 6 checked exchanges:\n  ")
  T.eq(err.class, "openapi")
  T.contains(err.message, '\n  GET /apis/v2beta1/runs?page_size=x request: query.page_size: expected int32, got "x"')
  -- coverage
  local cov = rec:coverage("/apis/v2beta1/runs")
  T.same(cov.seen, { "GET /apis/v2beta1/runs", "POST /apis/v2beta1/runs", "GET /apis/v2beta1/runs/{run_id}",
    "POST /apis/v2beta1/runs/{run_id}:archive" })
  T.same(cov.not_seen, { "DELETE /apis/v2beta1/runs/{run_id}", "POST /apis/v2beta1/runs/{run_id}:retry",
    "POST /apis/v2beta1/runs/{run_id}:terminate", "POST /apis/v2beta1/runs/{run_id}:unarchive" })
  T.eq(cov.calls["GET /apis/v2beta1/runs/{run_id}"], 2)
  local implemented = { "POST /apis/v2beta1/runs", "GET /apis/v2beta1/runs/{run_id}" }
  T.eq(#rec:assert_covered(implemented).seen, 2)
  err = T.raises(function() rec:assert_covered({ "POST /apis/v2beta1/runs", "DELETE /apis/v2beta1/runs/{run_id}" }) end,
    "1 operation never checked:\n  DELETE /apis/v2beta1/runs/{run_id}")
  T.eq(err.class, "openapi")
  T.raises(function() rec:coverage({ "GET /apis/v2beta1/nope" }) end,
    "coverage: GET /apis/v2beta1/nope is not an operation of")
  T.eq(#rec:coverage(function(key) return key:find("^DELETE") ~= nil end).seen, 0)
  T.raises(function() rec:coverage(5) end, "coverage filter must be nil, a path prefix")
  T.raises(function() rec:check(nil, { status = 200 }) end,
    "recorder:check: the response needs method and path when there is no request")
  T.raises(openapi.recorder, "kb.openapi.recorder: expected a spec", {})
end)

T.run()
