-- API fidelity of the embedded simulator: every KFP (v2beta1, v1beta1) and
-- Argo Server endpoint it implements is driven over raw HTTP, successes and
-- errors (400 unknown field, 404, 409, ...), and every response is checked
-- against the swagger in specs/ by kb.openapi in strict mode (a
-- field the real API lacks is a violation). A few Kubernetes objects the
-- mirror writes (a KFP run's pods, nodes, a Job, events) are checked
-- against the Kubernetes 1.32 swagger. The coverage assertions name every
-- operation of the specs: one the simulator routes must have been checked
-- here, one it does not route must still answer the gateway's routing
-- error, so a new route without a test fails this file.
local kb = require "kb"
local T = require "kb.testing"
local openapi = require "kb.openapi"
local X = require "fidelity_exchange"

local json = kb.json
local SRC = os.getenv("KBRUN_SOURCE_DIR") or ".."
local SAMPLES = SRC .. "/tests/data/sim"
local HELLO = SAMPLES .. "/v2ir_hello_world.yaml"             -- v2 IR, one step
local CHAIN = SAMPLES .. "/v1_argo_benchmark_pipeline_10_nodes.yaml" -- v1 Argo, 11 steps

-- An Argo pipeline whose step always fails (the simulator's annotation).
local FAILING = [[
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: failing-}
spec:
  entrypoint: main
  arguments: {parameters: [{name: message, value: hi}]}
  templates:
  - name: main
    dag: {tasks: [{name: boom, template: boom}]}
  - name: boom
    metadata: {annotations: {sim.kbrun.io/fail-probability: "1"}}
    container: {image: busybox, command: ["false"]}
]]

-- One step of a simulated hour: a run still active whatever the load on
-- this machine when the test terminates it.
local SLOW = [[
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: slow-}
spec:
  entrypoint: main
  templates:
  - name: main
    dag: {tasks: [{name: wait, template: wait}]}
  - name: wait
    metadata: {annotations: {sim.kbrun.io/duration: "fixed:3600"}}
    container: {image: busybox, command: [sleep, "3600"]}
]]

local sim = kb.sim.start { profile = "fast", speed = 600, seed = 1, pipeline_dir = SAMPLES }
local BASE = sim.url

-- Responses are strict: the real servers never send a field their swagger
-- lacks. The module already knows the swagger's known mistakes (KFP
-- healthz and upload errors, Kubernetes IntOrString/Quantity).
local rec = {
  v2beta1 = openapi.recorder(openapi.kfp("v2beta1", { strict_response = true })),
  v1beta1 = openapi.recorder(openapi.kfp("v1beta1", { strict_response = true })),
  argo = openapi.recorder(openapi.argo({ strict_response = true })),
  k8s = openapi.recorder(openapi.k8s({ strict_response = true })),
}
local api = {}
for k, r in pairs(rec) do api[k] = X.new(BASE, r) end

-- The swagger's fault: meta/v1 Time is a plain date-time string there, but
-- Go writes a zero metav1.Time as null, and WorkflowStatus's startedAt and
-- finishedAt are structs (omitempty has no effect on them), so a Workflow
-- not started yet reads "status":{"startedAt":null,"finishedAt":null}: see
-- the status of specs/kfp/pipelines/v2_backend_compiled_argo_hello_world.yaml,
-- written by KFP's Go compiler.
rec.argo.spec:set_definition("io.k8s.apimachinery.pkg.apis.meta.v1.Time",
  { type = "string", format = "date-time", ["x-nullable"] = true })

-- kb.openapi.kfp() gives the upload endpoints a "default" response (their
-- real error shape), and an override's "default" currently wins over the
-- document's own 200, so a successful upload would be checked against the
-- error shape. Put the swagger's 200 schemas back in front.
for version, ok200 in pairs({
  v2beta1 = { upload = "v2beta1Pipeline", upload_version = "v2beta1PipelineVersion" },
  v1beta1 = { upload = "apiPipeline", upload_version = "apiPipelineVersion" },
}) do
  for endpoint, def in pairs(ok200) do
    rec[version].spec:set_response("POST", "/apis/" .. version .. "/pipelines/" .. endpoint, 200,
      { ["$ref"] = "#/definitions/" .. def })
  end
end

local function upload_part(file, filename)
  return { { name = "uploadfile", file = file, filename = filename or "pipeline.yaml" } }
end

-- grpc-gateway's error body, with the gRPC code the status maps from.
local function rpc_error(body, code, text)
  T.ok(type(body) == "table", "a JSON error body")
  T.eq(body.code, code, "gRPC code")
  if text then T.contains(body.message, text) end
end

-- Polls GET until the run's state is one of `states` (a bounded loop on
-- the virtual clock: 5 s steps, at most 2 simulated hours).
local function wait_state(a, path, field, states)
  local want = {}
  for _, s in ipairs(states) do want[s] = true end
  local body
  for _ = 1, 1440 do
    body = a:call("GET", path, { expect = 200 })
    local v = body
    for part in field:gmatch("[^.]+") do v = v and v[part] end
    if want[v] then return body end
    kb.sleep(5)
  end
  error(path .. ": never reached " .. table.concat(states, "/"), 2)
end

-- v1 ApiRunDetail.pipeline_runtime.workflow_manifest is a string holding
-- the Argo Workflow the persistence agent stored: check it as one.
local function check_manifest(detail, what)
  local text = detail.pipeline_runtime and detail.pipeline_runtime.workflow_manifest
  T.ok(type(text) == "string", what .. ": a workflow_manifest")
  local wf = json.decode(text)
  local ok, errs = rec.argo.spec:validate("io.argoproj.workflow.v1alpha1.Workflow", wf,
    "workflow_manifest", { strict = true, int64 = "strict" })
  T.ok(ok, what .. ": workflow_manifest is an Argo Workflow: " .. table.concat(errs, "; "))
  return wf
end

-- The KFP client of these tests never goes through kb.kfp: each request is
-- written out here.

T.case("KFP v2beta1: every routed operation, successes and errors, per the swagger", function()
  local a = api.v2beta1
  local P = "/apis/v2beta1"
  local h = a:call("GET", P .. "/healthz", { expect = 200 })
  T.eq(h.pipeline_store, "database")

  -- upload: the hand-written multipart handler, and its own error shape
  local p = a:call("POST", P .. "/pipelines/upload", { expect = 200,
    query = { name = "fid-hello", description = "hello world" }, multipart = upload_part(HELLO, "hello.yaml") })
  T.ok(p.pipeline_id and p.created_at, "a Pipeline")
  local dup = a:call("POST", P .. "/pipelines/upload", { expect = 409,
    query = { name = "fid-hello" }, multipart = upload_part(HELLO, "hello.yaml") })
  T.contains(dup.error_message, "Failed to create a pipeline")
  local bad = a:call("POST", P .. "/pipelines/upload", { expect = 400,
    query = { name = "fid-notes" }, multipart = upload_part(HELLO, "notes.txt") })
  T.contains(bad.error_message, "Failed to read a pipeline spec file")
  bad = a:call("POST", P .. "/pipelines/upload", { expect = 400, invalid_request = true,
    query = { name = "fid-nofile" }, multipart = { { name = "file", data = "x", filename = "a.yaml" } } })
  T.contains(bad.error_message, "Failed to read pipeline from file")

  local v2 = a:call("POST", P .. "/pipelines/upload_version", { expect = 200,
    query = { pipelineid = p.pipeline_id, name = "fid-hello-v2" }, multipart = upload_part(HELLO) })
  T.eq(v2.pipeline_id, p.pipeline_id)
  bad = a:call("POST", P .. "/pipelines/upload_version", { expect = 400,
    query = { name = "orphan" }, multipart = upload_part(HELLO) })
  T.contains(bad.error_message, "pipeline id")
  a:call("POST", P .. "/pipelines/upload_version", { expect = 409,
    query = { pipelineid = p.pipeline_id, name = "fid-hello-v2" }, multipart = upload_part(HELLO) })

  -- CreatePipelineAndVersion reads the package URL (a local file here)
  local pc = a:call("POST", P .. "/pipelines/create", { expect = 200, json = {
    pipeline = { name = "fid-created", display_name = "Created" },
    pipeline_version = { display_name = "first", package_url = { pipeline_url = "file://" .. HELLO } } } })
  T.eq(pc.name, "fid-created")
  local err = a:call("POST", P .. "/pipelines/create", { expect = 400, json = {
    pipeline = { name = "fid-remote" },
    pipeline_version = { display_name = "v", package_url = { pipeline_url = "http://127.0.0.1:1/p.yaml" } } } })
  -- fetched as KFP does: here from a closed loopback port
  rpc_error(err, 3, "error fetching pipeline spec from http://127.0.0.1:1/p.yaml - GET http://127.0.0.1:1/p.yaml: ")

  -- CreatePipeline (no version), its 409 and the strict body parser's 400
  local pe = a:call("POST", P .. "/pipelines", { expect = 200,
    json = { name = "fid-empty", display_name = "Empty", description = "no versions", tags = { team = "a" } } })
  T.eq(pe.tags.team, "a")
  rpc_error(a:call("POST", P .. "/pipelines", { expect = 409, json = { name = "fid-empty" } }), 6, "already exists")
  rpc_error(a:call("POST", P .. "/pipelines", { expect = 400, invalid_request = true,
    json = '{"name":"x","colour":"red"}' }), 3, 'unknown field "colour"')
  rpc_error(a:call("POST", P .. "/pipelines", { expect = 400, json = { description = "nameless" } }), 3, "name is required")

  T.eq(a:call("GET", P .. "/pipelines/names/fid-hello", { expect = 200 }).pipeline_id, p.pipeline_id)
  rpc_error(a:call("GET", P .. "/pipelines/names/no-such", { expect = 404 }), 5, "not found")

  -- ListPipelines: paging, sort, filter, and their errors
  local l1 = a:call("GET", P .. "/pipelines", { expect = 200, query = { page_size = 2, sort_by = "created_at desc" } })
  T.eq(#l1.pipelines, 2)
  T.eq(l1.total_size, 3)
  T.ok(l1.next_page_token, "a next page")
  local l2 = a:call("GET", P .. "/pipelines", { expect = 200, query = { page_token = l1.next_page_token, page_size = 2 } })
  T.eq(#l2.pipelines, 1)
  T.eq(l2.next_page_token, nil)
  local filter = json.encode { predicates = { { key = "name", operation = "EQUALS", string_value = "fid-hello" } } }
  local lf = a:call("GET", P .. "/pipelines", { expect = 200, query = { filter = filter } })
  T.eq(#lf.pipelines, 1)
  local none = a:call("GET", P .. "/pipelines", { expect = 200,
    query = { filter = json.encode { predicates = { { key = "name", operation = "EQUALS", string_value = "nope" } } } } })
  T.eq(none.pipelines, nil, "an empty page has no list field (EmitUnpopulated=false)")
  rpc_error(a:call("GET", P .. "/pipelines", { expect = 400, query = { sort_by = "colour" } }), 3, "Invalid sorting field")
  rpc_error(a:call("GET", P .. "/pipelines", { expect = 400, query = { page_token = "garbage" } }), 3, "Invalid page token")
  rpc_error(a:call("GET", P .. "/pipelines", { expect = 400,
    query = { filter = json.encode { predicates = { { key = "colour", operation = "EQUALS", string_value = "x" } } } } }),
    3, 'unrecognized field "colour"')
  rpc_error(a:call("GET", P .. "/pipelines", { expect = 400,
    query = { filter = json.encode { predicates = { { key = "name", string_value = "x" } } } } }),
    3, "invalid predicate operation: OPERATION_UNSPECIFIED")
  rpc_error(a:call("GET", P .. "/pipelines", { expect = 400, invalid_request = true,
    query = { filter = '{"predicates":[{"key":"name","operation":"EQUALS","colour":"x"}]}' } }),
    3, 'unknown field "colour"')

  local g = a:call("GET", P .. "/pipelines/" .. p.pipeline_id, { expect = 200 })
  T.eq(g.name, "fid-hello")
  rpc_error(a:call("GET", P .. "/pipelines/no-such-id", { expect = 404 }), 5, "Pipeline no-such-id not found")

  -- versions
  local vl = a:call("GET", P .. "/pipelines/" .. p.pipeline_id .. "/versions",
    { expect = 200, query = { page_size = 1, sort_by = "created_at" } })
  T.eq(#vl.pipeline_versions, 1)
  T.eq(vl.total_size, 2)
  local v1 = vl.pipeline_versions[1]
  T.ok(v1.pipeline_spec and v1.pipeline_spec.pipelineInfo, "the IR as pipeline_spec")
  local vc = a:call("POST", P .. "/pipelines/" .. p.pipeline_id .. "/versions", { expect = 200,
    json = { name = "fid-hello-v3", display_name = "v3", package_url = { pipeline_url = HELLO } } })
  a:call("POST", P .. "/pipelines/" .. p.pipeline_id .. "/versions", { expect = 409,
    json = { name = "fid-hello-v3", package_url = { pipeline_url = HELLO } } })
  rpc_error(a:call("POST", P .. "/pipelines/" .. p.pipeline_id .. "/versions", { expect = 400,
    invalid_request = true, json = '{"name":"x","package_url":{"pipeline_url":"a","sha":"b"}}' }), 3, 'unknown field "sha"')
  rpc_error(a:call("POST", P .. "/pipelines/no-such-id/versions", { expect = 404,
    json = { name = "x", package_url = { pipeline_url = HELLO } } }), 5)
  local vi = a:call("POST", P .. "/pipelines/" .. p.pipeline_id .. "/versions", { expect = 200,
    json = { name = "fid-hello-inline", description = "IR in the body", pipeline_spec = kb.yaml.decode(kb.fs.read(HELLO)) } })
  T.eq(vi.pipeline_spec.pipelineInfo.name, "echo")
  local vpath = P .. "/pipelines/" .. p.pipeline_id .. "/versions/"
  a:call("DELETE", vpath .. vi.pipeline_version_id, { expect = 200 })
  T.eq(a:call("GET", vpath .. vc.pipeline_version_id, { expect = 200 }).display_name, "v3")
  rpc_error(a:call("GET", vpath .. "no-such-version", { expect = 404 }), 5)
  a:call("DELETE", vpath .. vc.pipeline_version_id, { expect = 200 })
  rpc_error(a:call("DELETE", vpath .. vc.pipeline_version_id, { expect = 404 }), 5)

  -- experiments
  local e = a:call("POST", P .. "/experiments", { expect = 200, json = { display_name = "fid-exp", description = "d" } })
  T.eq(e.storage_state, "AVAILABLE")
  rpc_error(a:call("POST", P .. "/experiments", { expect = 409, json = { display_name = "fid-exp" } }), 6)
  rpc_error(a:call("POST", P .. "/experiments", { expect = 400, invalid_request = true,
    json = '{"display_name":"x","owner":"me"}' }), 3, 'unknown field "owner"')
  local el = a:call("GET", P .. "/experiments", { expect = 200, query = { page_size = 1, sort_by = "display_name" } })
  T.eq(#el.experiments, 1)
  T.ok(el.next_page_token, "two experiments: Default and fid-exp")
  local epath = P .. "/experiments/" .. e.experiment_id
  T.eq(a:call("GET", epath, { expect = 200 }).display_name, "fid-exp")
  rpc_error(a:call("GET", P .. "/experiments/no-such-exp", { expect = 404 }), 5)

  -- runs
  local ref = { pipeline_id = p.pipeline_id, pipeline_version_id = v1.pipeline_version_id }
  local r1 = a:call("POST", P .. "/runs", { expect = 200, json = { display_name = "fid-run-1",
    experiment_id = e.experiment_id, pipeline_version_reference = ref,
    runtime_config = { parameters = {} }, service_account = "pipeline-runner" } })
  T.eq(r1.state, "PENDING")
  local slow = a:call("POST", P .. "/pipelines/upload", { expect = 200, query = { name = "fid-slow" },
    multipart = { { name = "uploadfile", data = SLOW, filename = "slow.yaml" } } })
  local r2 = a:call("POST", P .. "/runs", { expect = 200, query = { experiment_id = e.experiment_id },
    json = { display_name = "fid-run-2", pipeline_version_reference = { pipeline_id = slow.pipeline_id } } })
  rpc_error(a:call("POST", P .. "/runs", { expect = 400, json = { display_name = "", pipeline_version_reference = ref } }),
    3, "run name is empty")
  rpc_error(a:call("POST", P .. "/runs", { expect = 400, invalid_request = true,
    json = '{"display_name":"x","priority":1}' }), 3, 'unknown field "priority"')
  rpc_error(a:call("POST", P .. "/runs", { expect = 404,
    json = { display_name = "x", pipeline_version_reference = { pipeline_id = "no-such-id" } } }), 5)

  -- terminate run 2 while it is active, let run 1 finish
  a:call("POST", P .. "/runs/" .. r2.run_id .. ":terminate", { expect = 200 })
  local done1 = wait_state(a, P .. "/runs/" .. r1.run_id, "state", { "SUCCEEDED", "FAILED" })
  T.eq(done1.state, "SUCCEEDED")
  T.ok(#done1.state_history >= 3, "PENDING, RUNNING, SUCCEEDED")
  local done2 = wait_state(a, P .. "/runs/" .. r2.run_id, "state", { "CANCELED" })
  T.eq(done2.state, "CANCELED")
  a:call("POST", P .. "/runs/" .. r2.run_id .. ":retry", { expect = 200 })
  -- a failed run carries the error in its last state_history entry
  local pf = a:call("POST", P .. "/pipelines/upload", { expect = 200, query = { name = "fid-failing" },
    multipart = { { name = "uploadfile", data = FAILING, filename = "failing.yaml" } } })
  local rfail = a:call("POST", P .. "/runs", { expect = 200, json = { display_name = "fid-run-fail",
    experiment_id = e.experiment_id, pipeline_version_reference = { pipeline_id = pf.pipeline_id },
    runtime_config = { parameters = { message = "bye" } } } })
  local failed = wait_state(a, P .. "/runs/" .. rfail.run_id, "state", { "FAILED", "SUCCEEDED" })
  T.eq(failed.state, "FAILED")
  T.ok(failed.state_history[#failed.state_history].error, "the failure's error")
  a:call("POST", P .. "/runs/" .. rfail.run_id .. ":retry", { expect = 200 })
  -- a run of an inline pipeline_spec (the IR itself, no version)
  local inline = a:call("POST", P .. "/runs", { expect = 200, json = { display_name = "fid-run-inline",
    experiment_id = e.experiment_id, pipeline_spec = kb.yaml.decode(kb.fs.read(HELLO)) } })
  T.ok(inline.pipeline_spec and not inline.pipeline_version_reference, "the spec travels with the run")
  T.eq(wait_state(a, P .. "/runs/" .. inline.run_id, "state", { "SUCCEEDED", "FAILED" }).state, "SUCCEEDED")
  rpc_error(a:call("POST", P .. "/runs/" .. r1.run_id .. ":retry", { expect = 500 }), 13, "does not allow retries")
  rpc_error(a:call("POST", P .. "/runs/no-such-run:terminate", { expect = 404 }), 5)
  rpc_error(a:call("POST", P .. "/runs/no-such-run:retry", { expect = 404 }), 5)

  local rl = a:call("GET", P .. "/runs", { expect = 200,
    query = { experiment_id = e.experiment_id, page_size = 1, sort_by = "created_at desc" } })
  T.eq(#rl.runs, 1)
  T.eq(rl.total_size, 4)
  local rl2 = a:call("GET", P .. "/runs", { expect = 200, query = { page_token = rl.next_page_token, page_size = 2 } })
  T.eq(#rl2.runs, 2)
  T.ok(rl2.runs[1].run_id ~= rl.runs[1].run_id, "the next page")
  local rf = a:call("GET", P .. "/runs", { expect = 200, query = { filter = json.encode { predicates = {
    { key = "display_name", operation = "IS_SUBSTRING", string_value = "run-1" } } } } })
  T.eq(rf.runs[1].run_id, r1.run_id)
  rpc_error(a:call("GET", P .. "/runs", { expect = 400, query = { page_size = -1 } }), 3, "greater than 0")
  rpc_error(a:call("GET", P .. "/runs", { expect = 400, query = { sort_by = "created_at sideways" } }), 3,
    "invalid sort by format")

  a:call("POST", P .. "/runs/" .. r1.run_id .. ":archive", { expect = 200 })
  T.eq(a:call("GET", P .. "/runs/" .. r1.run_id, { expect = 200 }).storage_state, "ARCHIVED")
  a:call("POST", P .. "/runs/" .. r1.run_id .. ":unarchive", { expect = 200 })
  rpc_error(a:call("POST", P .. "/runs/no-such-run:archive", { expect = 404 }), 5)
  rpc_error(a:call("POST", P .. "/runs/no-such-run:unarchive", { expect = 404 }), 5)

  -- recurring runs
  local rr = a:call("POST", P .. "/recurringruns", { expect = 200, json = {
    display_name = "fid-hourly", experiment_id = e.experiment_id, pipeline_version_reference = ref,
    trigger = { periodic_schedule = { interval_second = "3600" } }, max_concurrency = "1", mode = "ENABLE" } })
  T.eq(rr.status, "ENABLED")
  local rc = a:call("POST", P .. "/recurringruns", { expect = 200, json = {
    display_name = "fid-cron", pipeline_version_reference = ref, no_catchup = true,
    trigger = { cron_schedule = { cron = "0 0 * * * *", start_time = "2030-01-01T00:00:00Z" } }, mode = "DISABLE" } })
  T.eq(rc.status, "DISABLED")
  rpc_error(a:call("POST", P .. "/recurringruns", { expect = 400, json = {
    display_name = "fid-many", pipeline_version_reference = ref, max_concurrency = "11",
    trigger = { periodic_schedule = { interval_second = "60" } } } }), 3, "out of range")
  rpc_error(a:call("POST", P .. "/recurringruns", { expect = 400, invalid_request = true,
    json = '{"display_name":"x","trigger":{"hourly":{}}}' }), 3, 'unknown field "hourly"')
  -- a schedule that fires: its runs name the recurring run
  local rm = a:call("POST", P .. "/recurringruns", { expect = 200, json = {
    display_name = "fid-minutely", experiment_id = e.experiment_id, pipeline_version_reference = ref,
    trigger = { periodic_schedule = { interval_second = "60" } }, max_concurrency = "2" } })
  kb.sleep(150)
  local fired = a:call("GET", P .. "/runs", { expect = 200, query = { filter = json.encode { predicates = {
    { key = "display_name", operation = "IS_SUBSTRING", string_value = "fid-minutely" } } } } })
  T.ok(#fired.runs >= 2, "two minutes, two runs")
  T.eq(fired.runs[1].recurring_run_id, rm.recurring_run_id)
  check_manifest(api.v1beta1:call("GET", "/apis/v1beta1/runs/" .. fired.runs[1].run_id, { expect = 200 }),
    "a v2 IR run seen through v1")
  api.v1beta1:call("GET", "/apis/v1beta1/jobs/" .. rm.recurring_run_id, { expect = 200 })
  a:call("DELETE", P .. "/recurringruns/" .. rm.recurring_run_id, { expect = 200 })
  local rrl = a:call("GET", P .. "/recurringruns", { expect = 200, query = { page_size = 10, sort_by = "created_at" } })
  T.eq(#rrl.recurringRuns, 2)
  local rrf = a:call("GET", P .. "/recurringruns", { expect = 200, query = { experiment_id = e.experiment_id } })
  T.eq(#rrf.recurringRuns, 1)
  local rrpath = P .. "/recurringruns/" .. rr.recurring_run_id
  a:call("POST", rrpath .. ":disable", { expect = 200 })
  T.eq(a:call("GET", rrpath, { expect = 200 }).status, "DISABLED")
  a:call("POST", rrpath .. ":enable", { expect = 200 })
  T.eq(a:call("GET", rrpath, { expect = 200 }).mode, "ENABLE")
  rpc_error(a:call("GET", P .. "/recurringruns/no-such", { expect = 404 }), 5)
  rpc_error(a:call("POST", P .. "/recurringruns/no-such:enable", { expect = 404 }), 5)
  rpc_error(a:call("POST", P .. "/recurringruns/no-such:disable", { expect = 404 }), 5)
  a:call("DELETE", rrpath, { expect = 200 })
  a:call("DELETE", P .. "/recurringruns/" .. rc.recurring_run_id, { expect = 200 })
  rpc_error(a:call("DELETE", rrpath, { expect = 404 }), 5)

  -- experiment archive cascades to its runs
  a:call("POST", epath .. ":archive", { expect = 200 })
  T.eq(a:call("GET", P .. "/runs/" .. r1.run_id, { expect = 200 }).storage_state, "ARCHIVED")
  a:call("POST", epath .. ":unarchive", { expect = 200 })
  rpc_error(a:call("POST", P .. "/experiments/no-such-exp:archive", { expect = 404 }), 5)
  rpc_error(a:call("POST", P .. "/experiments/no-such-exp:unarchive", { expect = 404 }), 5)

  -- deletes and their errors
  a:call("DELETE", P .. "/runs/" .. r1.run_id, { expect = 200 })
  rpc_error(a:call("DELETE", P .. "/runs/" .. r1.run_id, { expect = 404 }), 5)
  rpc_error(a:call("GET", P .. "/runs/" .. r1.run_id, { expect = 404 }), 5)
  a:call("DELETE", epath, { expect = 200 })
  local default = a:call("GET", P .. "/experiments", { expect = 200,
    query = { filter = json.encode { predicates = { { key = "display_name", operation = "EQUALS", string_value = "Default" } } } } })
  rpc_error(a:call("DELETE", P .. "/experiments/" .. default.experiments[1].experiment_id, { expect = 409 }),
    10, "default experiment cannot be deleted")
  rpc_error(a:call("DELETE", epath, { expect = 404 }), 5)
  rpc_error(a:call("DELETE", P .. "/pipelines/" .. p.pipeline_id, { expect = 400 }), 3, "cascade=true")
  a:call("DELETE", P .. "/pipelines/" .. p.pipeline_id, { expect = 200, query = { cascade = true } })
  a:call("DELETE", P .. "/pipelines/" .. pe.pipeline_id, { expect = 200 })
  rpc_error(a:call("DELETE", P .. "/pipelines/" .. pe.pipeline_id, { expect = 404 }), 5)
  rec.v2beta1:assert_clean()
end)

T.case("KFP v1beta1: every routed operation, successes and errors, per the swagger", function()
  local a = api.v1beta1
  local P = "/apis/v1beta1"
  local h = a:call("GET", P .. "/healthz", { expect = 200 })
  T.eq(h.pipeline_store, nil, "v1 healthz has no pipeline_store")

  local p = a:call("POST", P .. "/pipelines/upload", { expect = 200,
    query = { name = "fid1-chain", description = "10 steps" }, multipart = upload_part(CHAIN, "chain.yaml") })
  T.ok(p.default_version and p.default_version.id, "ApiPipeline with its default version")
  a:call("POST", P .. "/pipelines/upload", { expect = 409,
    query = { name = "fid1-chain" }, multipart = upload_part(CHAIN, "chain.yaml") })
  local bad = a:call("POST", P .. "/pipelines/upload", { expect = 400,
    query = { name = "fid1-broken" }, multipart = { { name = "uploadfile", data = "kind: Nothing\n", filename = "x.yaml" } } })
  T.contains(bad.error_message, "unknown template format")
  local uv = a:call("POST", P .. "/pipelines/upload_version", { expect = 200,
    query = { pipelineid = p.id, name = "fid1-chain-2" }, multipart = upload_part(CHAIN) })
  T.eq(uv.resource_references[1].key.id, p.id)
  a:call("POST", P .. "/pipelines/upload_version", { expect = 500,
    query = { pipelineid = "no-such-id", name = "x" }, multipart = upload_part(CHAIN) })

  local pu = a:call("POST", P .. "/pipelines", { expect = 200,
    json = { name = "fid1-url", description = "from a URL", url = { pipeline_url = HELLO } } })
  T.ok(pu.default_version, "CreatePipelineV1 makes the first version")
  rpc_error(a:call("POST", P .. "/pipelines", { expect = 409, json = { name = "fid1-url", url = { pipeline_url = HELLO } } }), 6)
  rpc_error(a:call("POST", P .. "/pipelines", { expect = 400, invalid_request = true,
    json = '{"name":"x","colour":"red"}' }), 3, 'unknown field "colour"')

  local pl = a:call("GET", P .. "/pipelines", { expect = 200, query = { page_size = 1, sort_by = "name" } })
  T.eq(#pl.pipelines, 1)
  T.ok(pl.total_size >= 2, "fid1-chain and fid1-url among the pipelines")
  a:call("GET", P .. "/pipelines", { expect = 200, query = { page_token = pl.next_page_token } })
  local pf = a:call("GET", P .. "/pipelines", { expect = 200, query = { filter = json.encode { predicates = {
    { key = "name", op = "EQUALS", string_value = "fid1-url" } } } } })
  T.eq(pf.pipelines[1].id, pu.id)
  rpc_error(a:call("GET", P .. "/pipelines", { expect = 400, invalid_request = true,
    query = { page_size = "ten" } }), 3, "page_size")

  T.eq(a:call("GET", P .. "/pipelines/" .. p.id, { expect = 200 }).name, "fid1-chain")
  rpc_error(a:call("GET", P .. "/pipelines/no-such-id", { expect = 404 }), 5)
  T.contains(a:call("GET", P .. "/pipelines/" .. p.id .. "/templates", { expect = 200 }).template, "argoproj.io")
  rpc_error(a:call("GET", P .. "/pipelines/no-such-id/templates", { expect = 404 }), 5)
  T.eq(a:call("GET", P .. "/namespaces/kubeflow/pipelines/fid1-url", { expect = 200 }).id, pu.id)
  rpc_error(a:call("GET", P .. "/namespaces/kubeflow/pipelines/no-such", { expect = 404 }), 5)

  -- versions
  local vq = { ["resource_key.type"] = "PIPELINE", ["resource_key.id"] = p.id }
  local vl = a:call("GET", P .. "/pipeline_versions", { expect = 200, query = vq })
  T.eq(#vl.versions, 2)
  rpc_error(a:call("GET", P .. "/pipeline_versions", { expect = 400 }), 3, "missing pipeline id")
  local pv = a:call("POST", P .. "/pipeline_versions", { expect = 200, json = { name = "fid1-chain-3",
    package_url = { pipeline_url = CHAIN },
    resource_references = { { key = { type = "PIPELINE", id = p.id }, relationship = "OWNER" } } } })
  rpc_error(a:call("POST", P .. "/pipeline_versions", { expect = 409, json = { name = "fid1-chain-3",
    package_url = { pipeline_url = CHAIN },
    resource_references = { { key = { type = "PIPELINE", id = p.id }, relationship = "OWNER" } } } }), 6)
  rpc_error(a:call("POST", P .. "/pipeline_versions", { expect = 400, json = { name = "orphan",
    package_url = { pipeline_url = CHAIN } } }), 3, "missing pipeline id")
  T.eq(a:call("GET", P .. "/pipeline_versions/" .. pv.id, { expect = 200 }).name, "fid1-chain-3")
  rpc_error(a:call("GET", P .. "/pipeline_versions/no-such-version", { expect = 404 }), 5)
  T.contains(a:call("GET", P .. "/pipeline_versions/" .. pv.id .. "/templates", { expect = 200 }).template, "entrypoint")
  rpc_error(a:call("GET", P .. "/pipeline_versions/no-such-version/templates", { expect = 404 }), 5)
  a:call("POST", P .. "/pipelines/" .. p.id .. "/default_version/" .. uv.id, { expect = 200 })
  T.eq(a:call("GET", P .. "/pipelines/" .. p.id, { expect = 200 }).default_version.id, uv.id)
  rpc_error(a:call("POST", P .. "/pipelines/" .. p.id .. "/default_version/no-such-version", { expect = 404 }), 5)

  -- experiments
  local e = a:call("POST", P .. "/experiments", { expect = 200, json = { name = "fid1-exp", description = "d" } })
  T.eq(e.storage_state, "STORAGESTATE_AVAILABLE")
  rpc_error(a:call("POST", P .. "/experiments", { expect = 409, json = { name = "fid1-exp" } }), 6)
  rpc_error(a:call("POST", P .. "/experiments", { expect = 400, json = { description = "nameless" } }), 3)
  local el = a:call("GET", P .. "/experiments", { expect = 200, query = { page_size = 5, sort_by = "name desc" } })
  T.ok(#el.experiments >= 2, "Default and fid1-exp")
  T.eq(a:call("GET", P .. "/experiments/" .. e.id, { expect = 200 }).name, "fid1-exp")
  rpc_error(a:call("GET", P .. "/experiments/no-such-exp", { expect = 404 }), 5)

  -- runs: ApiRunDetail carries the Argo workflow as workflow_manifest
  local refs = {
    { key = { type = "EXPERIMENT", id = e.id }, relationship = "OWNER" },
    { key = { type = "PIPELINE_VERSION", id = p.default_version.id }, relationship = "CREATOR" },
  }
  local d1 = a:call("POST", P .. "/runs", { expect = 200, json = { name = "fid1-run-1", resource_references = refs,
    pipeline_spec = { parameters = { { name = "unused", value = "1" } } } } })
  local id1 = d1.run.id
  T.eq(d1.run.status, "Pending")
  local slow = a:call("POST", P .. "/pipelines/upload", { expect = 200, query = { name = "fid1-slow" },
    multipart = { { name = "uploadfile", data = SLOW, filename = "slow.yaml" } } })
  local d2 = a:call("POST", P .. "/runs", { expect = 200, json = { name = "fid1-run-2", resource_references = {
    refs[1], { key = { type = "PIPELINE", id = slow.id }, relationship = "CREATOR" } } } })
  rpc_error(a:call("POST", P .. "/runs", { expect = 400, json = { name = "", resource_references = refs } }), 3)
  rpc_error(a:call("POST", P .. "/runs", { expect = 400, invalid_request = true,
    json = '{"name":"x","run_after":"never"}' }), 3, 'unknown field "run_after"')
  rpc_error(a:call("POST", P .. "/runs", { expect = 404, json = { name = "x", resource_references = {
    { key = { type = "EXPERIMENT", id = "no-such-exp" }, relationship = "OWNER" } } } }), 5)

  a:call("POST", P .. "/runs/" .. d2.run.id .. "/terminate", { expect = 200 })
  local done = wait_state(a, P .. "/runs/" .. id1, "run.status", { "Succeeded", "Failed" })
  T.eq(done.run.status, "Succeeded")
  -- the persisted workflow is an Argo Workflow with status nodes
  local wf = check_manifest(done, "a finished v1 run")
  T.ok(wf.status and wf.status.nodes, "the manifest carries status.nodes")
  T.ok(wf.spec.templates, "the template's spec")
  wait_state(a, P .. "/runs/" .. d2.run.id, "run.status", { "Failed" })
  local di = a:call("POST", P .. "/runs", { expect = 200, json = { name = "fid1-run-inline",
    resource_references = { refs[1] }, pipeline_spec = { workflow_manifest = FAILING,
      parameters = { { name = "message", value = "bye" } } } } })
  local dfail = wait_state(a, P .. "/runs/" .. di.run.id, "run.status", { "Failed", "Succeeded" })
  T.eq(dfail.run.status, "Failed")
  T.ok(dfail.run.error, "the failure's error")
  T.eq(check_manifest(dfail, "a failed inline run").status.phase, "Failed")
  check_manifest(d1, "a created run")
  a:call("POST", P .. "/runs/" .. d2.run.id .. "/retry", { expect = 200 })
  rpc_error(a:call("POST", P .. "/runs/" .. id1 .. "/retry", { expect = 500 }), 13)
  rpc_error(a:call("POST", P .. "/runs/no-such-run/terminate", { expect = 404 }), 5)
  rpc_error(a:call("POST", P .. "/runs/no-such-run/retry", { expect = 404 }), 5)

  local rq = { ["resource_reference_key.type"] = "EXPERIMENT", ["resource_reference_key.id"] = e.id,
    page_size = 1, sort_by = "created_at desc" }
  local rl = a:call("GET", P .. "/runs", { expect = 200, query = rq })
  T.eq(#rl.runs, 1)
  T.eq(rl.total_size, 3)
  a:call("GET", P .. "/runs", { expect = 200, query = { page_token = rl.next_page_token } })
  local rf = a:call("GET", P .. "/runs", { expect = 200, query = { filter = json.encode { predicates = {
    { key = "name", op = "EQUALS", string_value = "fid1-run-1" } } } } })
  T.eq(rf.runs[1].id, id1)
  rpc_error(a:call("GET", P .. "/runs", { expect = 400, query = { filter = "{not json" } }), 3)

  a:call("POST", P .. "/runs/" .. id1 .. ":archive", { expect = 200 })
  T.eq(a:call("GET", P .. "/runs/" .. id1, { expect = 200 }).run.storage_state, "STORAGESTATE_ARCHIVED")
  a:call("POST", P .. "/runs/" .. id1 .. ":unarchive", { expect = 200 })
  rpc_error(a:call("POST", P .. "/runs/no-such-run:archive", { expect = 404 }), 5)
  rpc_error(a:call("POST", P .. "/runs/no-such-run:unarchive", { expect = 404 }), 5)
  rpc_error(a:call("GET", P .. "/runs/no-such-run", { expect = 404 }), 5)

  -- jobs
  local job = a:call("POST", P .. "/jobs", { expect = 200, json = { name = "fid1-job", enabled = true,
    max_concurrency = "2", resource_references = refs,
    trigger = { periodic_schedule = { interval_second = "7200" } } } })
  T.eq(job.status, "Enabled")
  rpc_error(a:call("POST", P .. "/jobs", { expect = 400, json = { name = "fid1-bad-cron", resource_references = refs,
    trigger = { cron_schedule = { cron = "every day" } } } }), 3, "cron")
  rpc_error(a:call("POST", P .. "/jobs", { expect = 400, invalid_request = true,
    json = '{"name":"x","schedule":"daily"}' }), 3, 'unknown field "schedule"')
  local jl = a:call("GET", P .. "/jobs", { expect = 200, query = { page_size = 5,
    ["resource_reference_key.type"] = "EXPERIMENT", ["resource_reference_key.id"] = e.id } })
  T.eq(#jl.jobs, 1)
  local jpath = P .. "/jobs/" .. job.id
  a:call("POST", jpath .. "/disable", { expect = 200 })
  T.eq(a:call("GET", jpath, { expect = 200 }).mode, "DISABLED")
  a:call("POST", jpath .. "/enable", { expect = 200 })
  rpc_error(a:call("GET", P .. "/jobs/no-such-job", { expect = 404 }), 5)
  rpc_error(a:call("POST", P .. "/jobs/no-such-job/enable", { expect = 404 }), 5)
  rpc_error(a:call("POST", P .. "/jobs/no-such-job/disable", { expect = 404 }), 5)
  a:call("DELETE", jpath, { expect = 200 })
  rpc_error(a:call("DELETE", jpath, { expect = 404 }), 5)

  a:call("POST", P .. "/experiments/" .. e.id .. ":archive", { expect = 200 })
  a:call("POST", P .. "/experiments/" .. e.id .. ":unarchive", { expect = 200 })
  rpc_error(a:call("POST", P .. "/experiments/no-such-exp:archive", { expect = 404 }), 5)
  rpc_error(a:call("POST", P .. "/experiments/no-such-exp:unarchive", { expect = 404 }), 5)

  a:call("DELETE", P .. "/runs/" .. id1, { expect = 200 })
  rpc_error(a:call("DELETE", P .. "/runs/" .. id1, { expect = 404 }), 5)
  a:call("DELETE", P .. "/experiments/" .. e.id, { expect = 200 })
  rpc_error(a:call("DELETE", P .. "/experiments/" .. e.id, { expect = 404 }), 5)
  -- DeletePipelineV1 has no cascade: the versions go first (kfp.md §1c)
  rpc_error(a:call("DELETE", P .. "/pipelines/" .. pu.id, { expect = 400 }), 3, "existing pipeline versions")
  a:call("DELETE", P .. "/pipeline_versions/" .. pu.default_version.id, { expect = 200 })
  rpc_error(a:call("DELETE", P .. "/pipeline_versions/" .. pu.default_version.id, { expect = 404 }), 5)
  a:call("DELETE", P .. "/pipelines/" .. pu.id, { expect = 200 })
  rpc_error(a:call("DELETE", P .. "/pipelines/" .. pu.id, { expect = 404 }), 5)
  rec.v1beta1:assert_clean()
end)

-- A two-step Argo workflow for the Argo Server API.
local WORKFLOW = {
  metadata = { generateName = "fid-wf-", labels = { suite = "fidelity" } },
  spec = {
    entrypoint = "main",
    templates = {
      { name = "main", dag = { tasks = {
        { name = "a", template = "step" },
        { name = "b", template = "step", dependencies = { "a" } } } } },
      { name = "step", container = { image = "busybox", command = { "true" },
        resources = { requests = { cpu = "100m", memory = "64Mi" } } } },
    },
  },
}

-- A streaming GET (newline-delimited JSON, or SSE with Accept:
-- text/event-stream) read line by line through curl: kb.http returns
-- whole bodies only, and this stream never ends by itself.
local function open_stream(url, sse)
  local cmd = { "curl", "-sS", "-N", "--max-time", "10", url }
  if sse then table.insert(cmd, 2, "-H") table.insert(cmd, 3, "Accept: text/event-stream") end
  local ok, p = pcall(kb.process.spawn, { cmd = cmd })
  if not ok then error("reading the event stream needs the curl program: " .. tostring(p), 2) end
  return {
    -- the next message's JSON text, or nil at the end
    next = function()
      while true do
        local line = p:read_line()
        if line == nil then return nil end
        if sse then line = line:match("^data: (.*)$") end
        if line and line ~= "" then return line end
      end
    end,
    close = function() p:kill() p:wait() end,
  }
end

T.case("Argo Server: workflows, the event stream and server info per the swagger", function()
  local a = api.argo
  local NS = "default"
  local W = "/api/v1/workflows/" .. NS
  local v = a:call("GET", "/api/v1/version", { expect = 200 })
  T.ok(v.version:match("^v3%."), "an Argo 3 version")
  a:call("GET", "/api/v1/info", { expect = 200 })
  a:call("GET", "/api/v1/userinfo", { expect = 200 })

  local wf = a:call("POST", W, { expect = 200, json = { namespace = NS, workflow = WORKFLOW } })
  local name = wf.metadata.name
  T.ok(name:match("^fid%-wf%-"), "generateName applied")
  local dry = a:call("POST", W, { expect = 200, json = { namespace = NS, serverDryRun = true,
    workflow = { metadata = { name = "fid-dry" }, spec = WORKFLOW.spec } } })
  T.eq(dry.metadata.name, "fid-dry")
  local fixed = { metadata = { name = "fid-fixed", labels = { suite = "fidelity" } }, spec = WORKFLOW.spec }
  a:call("POST", W, { expect = 200, json = { workflow = fixed } })
  local err = a:call("POST", W, { expect = 409, json = { workflow = fixed } })
  rpc_error(err, 6, "already exists")
  err = a:call("POST", W, { expect = 400, json = { namespace = NS } })
  rpc_error(err, 3, "workflow is required")

  -- the stream: the current workflows as ADDED, then changes
  local url = BASE .. "/api/v1/workflow-events/" .. NS .. "?listOptions.labelSelector=suite%3Dfidelity"
  local EVENTS = "/api/v1/workflow-events/" .. NS
  for _, sse in ipairs({ true, false }) do
    local stream = open_stream(url, sse)
    for i = 1, 2 do
      local line = stream.next()
      T.ok(line, "ADDED event " .. i .. " (sse=" .. tostring(sse) .. ")")
      T.eq(json.decode(line).result.type, "ADDED")
      a:check_response("GET", EVENTS, 200, line)
    end
    if not sse then
      a:call("DELETE", W .. "/fid-fixed", { expect = 200 })
      local last
      for _ = 1, 10 do
        local line = stream.next()
        if not line then break end
        a:check_response("GET", EVENTS, 200, line)
        last = json.decode(line).result
        if last.type == "DELETED" then break end
      end
      T.eq(last and last.type, "DELETED", "the delete streamed")
      T.eq(last.object.metadata.name, "fid-fixed")
    end
    stream.close()
  end
  a:call("POST", W, { expect = 200, json = { workflow = fixed } }) -- the name is free again
  local bad = a:call("GET", "/api/v1/workflow-events/" .. NS, { expect = 400,
    query = { ["listOptions.labelSelector"] = "a in (" } })
  rpc_error(bad, 3)

  -- workflow templates, and a workflow submitted from one
  local WT = "/api/v1/workflow-templates/" .. NS
  local tmpl = a:call("POST", WT, { expect = 200, json = { namespace = NS, template = {
    metadata = { name = "fid-tmpl", labels = { suite = "fidelity" } }, spec = WORKFLOW.spec } } })
  T.eq(tmpl.kind, "WorkflowTemplate")
  rpc_error(a:call("POST", WT, { expect = 409, json = { template = { metadata = { name = "fid-tmpl" },
    spec = WORKFLOW.spec } } }), 6, "already exists")
  rpc_error(a:call("POST", WT, { expect = 400, json = { namespace = NS } }), 3, "template is required")
  T.eq(#a:call("GET", WT, { expect = 200, query = { ["listOptions.labelSelector"] = "suite=fidelity" } }).items, 1)
  T.eq(a:call("GET", WT .. "/fid-tmpl", { expect = 200 }).metadata.uid, tmpl.metadata.uid)
  local sub = a:call("POST", W .. "/submit", { expect = 200, json = { namespace = NS,
    resourceKind = "WorkflowTemplate", resourceName = "fid-tmpl", submitOptions = {
      generateName = "fid-sub-", parameters = { "p=1" }, labels = "suite=fidelity-sub" } } })
  T.ok(sub.metadata.name:match("^fid%-sub%-"), "submitOptions.generateName applied")
  T.eq(sub.metadata.labels["workflows.argoproj.io/workflow-template"], "fid-tmpl")
  T.eq(sub.spec.arguments.parameters[1].value, "1")
  rpc_error(a:call("POST", W .. "/submit", { expect = 404, json = { resourceKind = "WorkflowTemplate",
    resourceName = "nope" } }), 5, "not found")
  a:call("DELETE", WT .. "/fid-tmpl", { expect = 200 })
  rpc_error(a:call("GET", WT .. "/fid-tmpl", { expect = 404 }), 5, "not found")

  -- run to completion: status.nodes of a finished DAG
  local done
  for _ = 1, 720 do
    done = a:call("GET", W .. "/" .. name, { expect = 200 })
    if done.status and (done.status.phase == "Succeeded" or done.status.phase == "Failed") then break end
    kb.sleep(5)
  end
  T.eq(done.status.phase, "Succeeded")
  local pods = 0
  for _, node in pairs(done.status.nodes) do if node.type == "Pod" then pods = pods + 1 end end
  T.eq(pods, 2, "two pod nodes")
  rpc_error(a:call("GET", W .. "/no-such-wf", { expect = 404 }), 5, "not found")

  -- its logs: a stream of {"result":{podName, content}}
  local LOG = W .. "/" .. name .. "/log"
  local logs = kb.http.request { url = BASE .. LOG, query = { ["logOptions.container"] = "main" } }
  T.eq(logs.status, 200)
  local lines = 0
  for line in logs.body:gmatch("[^\n]+") do
    a:check_response("GET", LOG, 200, line)
    T.eq(json.decode(line).result.podName:sub(1, #name + 1), name .. "-", "the pod of a step")
    lines = lines + 1
  end
  T.ok(lines >= 4, "log lines of both steps")
  rpc_error(a:call("GET", W .. "/no-such-wf/log", { expect = 404 }), 5, "not found")

  local list = a:call("GET", W, { expect = 200, query = { ["listOptions.labelSelector"] = "suite=fidelity",
    ["listOptions.limit"] = 1 } })
  T.eq(#list.items, 1)
  T.ok(list.metadata.continue, "a continue token")
  list = a:call("GET", W, { expect = 200, query = { ["listOptions.labelSelector"] = "suite=fidelity",
    ["listOptions.continue"] = list.metadata.continue } })
  T.eq(#list.items, 1)
  local empty = a:call("GET", W, { expect = 200, query = { ["listOptions.labelSelector"] = "suite=none" } })
  T.eq(#empty.items, 0)
  rpc_error(a:call("GET", W, { expect = 400, query = { ["listOptions.fieldSelector"] = "spec.colour=red" } }), 3)

  a:call("DELETE", W .. "/" .. name, { expect = 200 })
  a:call("DELETE", W .. "/fid-fixed", { expect = 200 })
  rpc_error(a:call("DELETE", W .. "/" .. name, { expect = 404 }), 5)
  rec.argo:assert_clean()
end)

T.case("Argo Server: lint and the workflow actions per the swagger", function()
  local a = api.argo
  local W = "/api/v1/workflows/default"
  local function wf(name, secs, fail)
    return { metadata = { name = name, labels = { suite = "fid-actions" } }, spec = {
      entrypoint = "main", templates = {
        { name = "main", dag = { tasks = { { name = "one", template = "w" } } } },
        { name = "w", metadata = { annotations = { ["sim.kbrun.io/duration"] = "fixed:" .. secs,
          ["sim.kbrun.io/fail-probability"] = fail or "0" } }, container = { image = "busybox" } } } } }
  end
  local linted = a:call("POST", W .. "/lint", { expect = 200, json = { namespace = "default", workflow = wf("fid-lint", 5) } })
  T.eq(linted.metadata.name, "fid-lint")
  local cyc = wf("fid-cyc", 5)
  cyc.spec.templates[1].dag.tasks[1].dependencies = { "one" }
  rpc_error(a:call("POST", W .. "/lint", { expect = 400, json = { workflow = cyc } }), 3,
    "templates.main sorting failed: graph with cycle")
  rpc_error(a:call("POST", W, { expect = 400, json = { workflow = cyc } }), 3, "graph with cycle")

  a:call("POST", W, { expect = 200, json = { workflow = wf("fid-act", 3600) } })
  T.eq(a:call("PUT", W .. "/fid-act/suspend", { expect = 200, json = { name = "fid-act", namespace = "default" } })
    .spec.suspend, true)
  T.eq(a:call("PUT", W .. "/fid-act/resume", { expect = 200, json = { name = "fid-act" } }).spec.suspend, nil)
  local stopped = a:call("PUT", W .. "/fid-act/stop", { expect = 200, json = { name = "fid-act" } })
  T.eq(stopped.spec.shutdown, "Stop")
  rpc_error(a:call("PUT", W .. "/fid-act/suspend", { expect = 400, json = {} }), 3)
  a:call("POST", W, { expect = 200, json = { workflow = wf("fid-term", 3600) } })
  local term = a:call("PUT", W .. "/fid-term/terminate", { expect = 200, json = { name = "fid-term" } })
  T.eq(term.status.phase, "Failed")
  rpc_error(a:call("PUT", W .. "/fid-term/terminate", { expect = 500, json = {} }), 13,
    "cannot shutdown a completed workflow")
  local re = a:call("PUT", W .. "/fid-term/retry", { expect = 200, json = { name = "fid-term" } })
  T.eq(re.status.phase, "Running")
  local sub = a:call("PUT", W .. "/fid-term/resubmit", { expect = 200, json = { name = "fid-term", memoized = false } })
  T.eq(sub.metadata.labels["workflows.argoproj.io/resubmitted-from-workflow"], "fid-term")
  rpc_error(a:call("PUT", W .. "/fid-term/set", { expect = 400, json = { phase = "Bogus" } }), 3,
    "Bogus is an invalid phase to set to")
  rpc_error(a:call("PUT", W .. "/fid-none/suspend", { expect = 404, json = {} }), 5, "not found")
  for _, n in ipairs({ "fid-act", "fid-term", sub.metadata.name }) do a:call("DELETE", W .. "/" .. n, { expect = 200 }) end
  -- the archive kept the finished ones
  local arch = a:call("GET", "/api/v1/archived-workflows", { expect = 200, query = { namePrefix = "fid-term" } })
  T.eq(#arch.items, 1)
  T.eq(a:call("GET", "/api/v1/archived-workflows/" .. arch.items[1].metadata.uid, { expect = 200 }).metadata.name, "fid-term")
  a:call("DELETE", "/api/v1/archived-workflows/" .. arch.items[1].metadata.uid, { expect = 200 })
  rpc_error(a:call("GET", "/api/v1/archived-workflows/" .. arch.items[1].metadata.uid, { expect = 404 }), 5, "not found")

  local C = "/api/v1/cron-workflows/default"
  local spec = wf("x", 5).spec
  local cron = a:call("POST", C, { expect = 200, json = { namespace = "default", cronWorkflow = {
    metadata = { name = "fid-cron" }, spec = { schedules = { "*/5 * * * *" }, workflowSpec = spec } } } })
  T.eq(cron.kind, "CronWorkflow")
  rpc_error(a:call("POST", C .. "/lint", { expect = 400, json = { cronWorkflow = {
    metadata = { name = "fid-bad" }, spec = { schedules = { "@never" }, workflowSpec = spec } } } }), 3, "is malformed")
  T.eq(#a:call("GET", C, { expect = 200 }).items, 1)
  T.eq(a:call("PUT", C .. "/fid-cron/suspend", { expect = 200, json = { name = "fid-cron" } }).spec.suspend, true)
  T.eq(a:call("PUT", C .. "/fid-cron/resume", { expect = 200, json = { name = "fid-cron" } }).spec.suspend, false)
  T.eq(a:call("GET", C .. "/fid-cron", { expect = 200 }).metadata.uid, cron.metadata.uid)
  a:call("DELETE", C .. "/fid-cron", { expect = 200 })
  rpc_error(a:call("GET", C .. "/fid-cron", { expect = 404 }), 5, "not found")
  rec.argo:assert_clean()
end)

T.case("Kubernetes objects of the mirror (pods, nodes, jobs, events) per the 1.32 swagger", function()
  local a = api.k8s
  local kfp = api.v2beta1
  -- a KFP run: its workflow's pods land in kubeflow
  local p = kfp:call("POST", "/apis/v2beta1/pipelines/upload", { expect = 200,
    query = { name = "fid-k8s" }, multipart = upload_part(HELLO, "hello.yaml") })
  local run = kfp:call("POST", "/apis/v2beta1/runs", { expect = 200, json = { display_name = "fid-k8s-run",
    pipeline_version_reference = { pipeline_id = p.pipeline_id } } })
  wait_state(kfp, "/apis/v2beta1/runs/" .. run.run_id, "state", { "SUCCEEDED" })

  local pods = a:call("GET", "/api/v1/namespaces/kubeflow/pods", { expect = 200 })
  T.ok(#pods.items >= 3, "driver and executor pods")
  local pod = pods.items[1]
  a:call("GET", "/api/v1/namespaces/kubeflow/pods/" .. pod.metadata.name, { expect = 200 })
  a:call("GET", "/api/v1/pods", { expect = 200, query = { labelSelector = "workflows.argoproj.io/completed=true" } })
  local st = a:call("GET", "/api/v1/namespaces/kubeflow/pods/no-such-pod", { expect = 404 })
  T.eq(st.reason, "NotFound")

  local nodes = a:call("GET", "/api/v1/nodes", { expect = 200 })
  T.ok(#nodes.items >= 1, "nodes")
  a:call("GET", "/api/v1/nodes/" .. nodes.items[1].metadata.name, { expect = 200 })

  a:call("GET", "/api/v1/namespaces/kubeflow/events", { expect = 200, query = { limit = 20 } })
  local events = a:call("GET", "/api/v1/events", { expect = 200 })
  T.ok(#events.items >= 1, "events")
  a:call("GET", "/api/v1/namespaces/" .. events.items[1].metadata.namespace .. "/events/"
    .. events.items[1].metadata.name, { expect = 200 })

  -- a Job through the Job controller
  local job = a:call("POST", "/apis/batch/v1/namespaces/default/jobs", { expect = 201, json = {
    apiVersion = "batch/v1", kind = "Job", metadata = { name = "fid-job" },
    spec = { completions = 2, parallelism = 2, template = { spec = { restartPolicy = "Never",
      containers = { { name = "main", image = "busybox", command = { "true" },
        resources = { requests = { cpu = "100m", memory = "64Mi" } } } } } } } } })
  T.eq(job.metadata.name, "fid-job")
  local got
  for _ = 1, 720 do
    got = a:call("GET", "/apis/batch/v1/namespaces/default/jobs/fid-job", { expect = 200 })
    if (got.status.succeeded or 0) >= 2 then break end
    kb.sleep(5)
  end
  T.eq(got.status.succeeded, 2)
  a:call("GET", "/apis/batch/v1/namespaces/default/jobs", { expect = 200 })
  a:call("GET", "/apis/batch/v1/jobs", { expect = 200 })
  a:call("GET", "/api/v1/namespaces/default/pods", { expect = 200, query = { labelSelector = "job-name=fid-job" } })
  rec.k8s:assert_clean()
end)

-- Operations of the specs the simulator does not route, with why. Each is
-- probed: it must still answer the routing error, or this list is stale.
local NOT_ROUTED = {
  v2beta1 = {
    "GET /apis/v2beta1/auth",                     -- AuthService: multi-user authorization checks
    "GET /apis/v2beta1/filters",                  -- DummyFilterService: puts Filter into the swagger
    "PATCH /apis/v2beta1/pipelines/{pipeline.pipeline_id}",
    "PATCH /apis/v2beta1/pipelines/{pipeline_version.pipeline_id}/versions/{pipeline_version.pipeline_version_id}",
    "POST /apis/v2beta1/scheduledworkflows",      -- report service (persistence agent)
    "POST /apis/v2beta1/workflows",               -- report service (persistence agent)
    "POST /apis/v2beta1/visualizations/{namespace}",
  },
  v1beta1 = {
    "POST /apis/v1beta1/runs/{run_id}:reportMetrics",
  },
}

-- A concrete path for a template (ids are never found, which is fine: the
-- router answers before any lookup).
local function concrete(template)
  return (template:gsub("{[^}]+}", "x"))
end

T.case("coverage: every KFP operation the simulator routes was checked, the rest are unrouted", function()
  for _, version in ipairs({ "v2beta1", "v1beta1" }) do
    local skip = {}
    for _, key in ipairs(NOT_ROUTED[version]) do
      skip[key] = true
      local method, template = key:match("^(%u+) (.*)$")
      local res = kb.http.request { method = method, url = BASE .. concrete(template),
        body = method ~= "GET" and "{}" or nil }
      local body = json.decode(res.body)
      T.ok((res.status == 404 and body.code == 5 and body.message == "Not Found") or
        (res.status == 501 and body.code == 12 and body.message == "Method Not Allowed"),
        key .. " is routed now (" .. res.status .. " " .. res.body:sub(1, 120)
          .. "): test it above and drop it from NOT_ROUTED")
      -- grpc-gateway's routing errors are Status bodies too
      local ok, errs = rec[version].spec:validate("googleRpcStatus",
        body, "body", { strict = true })
      T.ok(ok, key .. ": " .. table.concat(errs, "; "))
    end
    local expected = {}
    for _, op in ipairs(rec[version].spec:operations()) do
      if not skip[op.key] then expected[#expected + 1] = op.key end
    end
    T.eq(#expected, version == "v2beta1" and 33 or 35, version .. " routed operations")
    rec[version]:assert_covered(expected)
  end
end)

T.case("coverage: the Argo Server operations the simulator routes were checked", function()
  local routed = {
    "GET /api/v1/workflows/{namespace}", "POST /api/v1/workflows/{namespace}",
    "GET /api/v1/workflows/{namespace}/{name}", "DELETE /api/v1/workflows/{namespace}/{name}",
    "GET /api/v1/workflow-events/{namespace}",
    "POST /api/v1/workflows/{namespace}/submit", "GET /api/v1/workflows/{namespace}/{name}/log",
    "GET /api/v1/workflow-templates/{namespace}", "POST /api/v1/workflow-templates/{namespace}",
    "GET /api/v1/workflow-templates/{namespace}/{name}",
    "DELETE /api/v1/workflow-templates/{namespace}/{name}",
    "GET /api/v1/version", "GET /api/v1/info", "GET /api/v1/userinfo",
    "POST /api/v1/workflows/{namespace}/lint",
    "PUT /api/v1/workflows/{namespace}/{name}/suspend", "PUT /api/v1/workflows/{namespace}/{name}/resume",
    "PUT /api/v1/workflows/{namespace}/{name}/stop", "PUT /api/v1/workflows/{namespace}/{name}/terminate",
    "PUT /api/v1/workflows/{namespace}/{name}/retry", "PUT /api/v1/workflows/{namespace}/{name}/resubmit",
    "PUT /api/v1/workflows/{namespace}/{name}/set",
  }
  rec.argo:assert_covered(routed)
  -- The other WorkflowService operations answer an error, never a body
  -- the client could mistake for success.
  local set = {}
  for _, k in ipairs(routed) do set[k] = true end
  for _, op in ipairs(rec.argo.spec:operations()) do
    if op.path:match("^/api/v1/workflows/") and not set[op.key] then
      local res = kb.http.request { method = op.method, url = BASE .. concrete(op.path),
        body = op.method ~= "GET" and "{}" or nil }
      T.ok(res.status == 404 or res.status == 501, op.key .. " answers " .. res.status)
      local ok, errs = api.argo:check_response(op.method, concrete(op.path), res.status, res.body)
      T.ok(ok, table.concat(errs, "; "))
    end
  end
  rec.k8s:assert_covered({
    "GET /api/v1/namespaces/{namespace}/pods", "GET /api/v1/namespaces/{namespace}/pods/{name}",
    "GET /api/v1/pods", "GET /api/v1/nodes", "GET /api/v1/nodes/{name}",
    "GET /api/v1/namespaces/{namespace}/events", "GET /api/v1/events",
    "GET /api/v1/namespaces/{namespace}/events/{name}",
    "POST /apis/batch/v1/namespaces/{namespace}/jobs", "GET /apis/batch/v1/namespaces/{namespace}/jobs",
    "GET /apis/batch/v1/namespaces/{namespace}/jobs/{name}", "GET /apis/batch/v1/jobs",
  })
end)

T.case("the checks can fail: strict responses, int64 strings, the spec's own enums", function()
  local v2 = rec.v2beta1.spec
  local run = { run_id = "r", display_name = "r", state = "SUCCEEDED" }
  T.ok(v2:validate_response { method = "GET", path = "/apis/v2beta1/runs/r", status = 200, body = run })
  run.colour = "red"
  local ok, errs = v2:validate_response { method = "GET", path = "/apis/v2beta1/runs/r", status = 200, body = run }
  T.eq(ok, false)
  T.eq(errs[1], "body.colour: unknown property of v2beta1Run")
  ok, errs = v2:validate_response { method = "GET", path = "/apis/v2beta1/recurringruns/x", status = 200,
    body = { recurring_run_id = "x", max_concurrency = 1 } }
  T.eq(errs[1], "body.max_concurrency: expected int64 as a JSON string, got number")
  ok, errs = rec.argo.spec:validate_response { method = "GET", path = "/api/v1/workflows/ns/w", status = 200,
    body = { metadata = { name = "w" }, spec = {}, status = { nodes = { n1 = { id = "n1", name = "w", type = "Pod", extra = 1 } } } } }
  T.eq(ok, false)
  T.eq(errs[1], "body.status.nodes.n1.extra: unknown property of io.argoproj.workflow.v1alpha1.NodeStatus")
  ok, errs = v2:validate_response { method = "GET", path = "/apis/v2beta1/runs/r", status = 200,
    body = { run_id = "r", state = "DONE" } }
  T.eq(ok, false)
  T.contains(errs[1], 'body.state: expected one of RUNTIME_STATE_UNSPECIFIED, PENDING')
end)

T.case("no response violated its spec", function()
  for _, k in ipairs({ "v2beta1", "v1beta1", "argo", "k8s" }) do rec[k]:assert_clean() end
end)

local ok, err = pcall(T.run)
sim:stop()
if not ok then error(err, 0) end
