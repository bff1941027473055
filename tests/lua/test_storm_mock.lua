-- kb.kfp.storm against an in-memory KFP server (storm_mock.lua): the
-- notebook's steps and order, the improvements (concurrency, polling of all
-- runs, LIST, timeouts, cleanup on KFP 2.x, lag, /metrics), the files it
-- writes and the messages a user sees. The simulator runs are in
-- test_storm_sim.lua.
local kb = require "kb"
local T = require "kb.testing"
local fs = require "kb.fs"
local csv = require "kb.csv"
local json = require "kb.json"
local journal = require "kb.journal"
local metrics = require "kb.metrics"
local httpd = require "kb.httpd"
local kfp = require "kb.kfp"
local experiment = require "kb.experiment"
local storm = require "kb.kfp.storm"
local prom = require "kb.kfp.prom"
local mocks = require "storm_mock"

local tmp = fs.tmpdir("storm-test-")
local PIPELINE = fs.join(tmp, "hello.yaml")
fs.write(PIPELINE, "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {generateName: x-}\n"
  .. "spec: {entrypoint: main, templates: [{name: main, container: {image: alpine}}]}\n")

local function new_exp(name)
  return experiment.create{ out = fs.join(tmp, "out"), name = name }
end

local function params(m, extra)
  local p = { host = m.url, pipeline_file_url = PIPELINE, num_runs = 5,
    run_status_polling_interval_sec = 0.01, concurrency = 2, api = "v2beta1", progress = false }
  for k, v in pairs(extra or {}) do p[k] = v end
  return p
end

-- The whole notebook flow; returns the session and its result.
local function full_storm(s)
  s:scrape_metrics("before")
  s:create_pipeline()
  s:create_experiment()
  s:create_runs()
  s:wait_runs()
  s:get_runs()
  s:delete_runs()
  s:cleanup()
  s:scrape_metrics("after")
  return s, s:finish()
end

local function read_csv(path)
  return (csv.parse(fs.read(path), { header = true }))
end

local function hcount(name)
  local h = metrics.get(name)
  return h and h:summary().count or 0
end

T.case("a v2beta1 storm: counts, files, cleanup and server metrics", function()
  metrics.clear()
  local m = mocks.start{ script = function(i)
    return { polls = i, final = i == 3 and "FAILED" or "SUCCEEDED" }
  end }
  local exp = new_exp("v2")
  local _, r = full_storm(storm.new(params(m), { exp = exp, name = "mock_v2" }))
  m:close()
  T.same(r.runs, { requested = 5, created = 5, succeeded = 4, failed = 1, timed_out = 0,
    not_created = 0, terminated = 0, interrupted = 0, deleted = 5 })
  T.same(r.outcomes, { Succeeded = 4, Failed = 1 })
  T.same(r.states, { Succeeded = 4, Failed = 1 })
  T.near(r.success_rate, 0.8, 1e-9)
  T.eq(r.error_count, 0)
  T.same(m:leftovers(), { pipelines = 0, experiments = 0, runs = 0 }, "nothing left behind")
  T.eq(m.state.uploads, 1, "a local file goes to a real server as an upload")
  -- the notebook's timed calls, and polls kept apart
  T.eq(hcount("run.create"), 5)
  T.eq(hcount("run.get"), 5, "run.get holds the final GETs only")
  T.eq(hcount("run.delete"), 5)
  T.ok(hcount("poll.run.get") >= 5, "polls are timed as poll.run.get")
  T.ok(hcount("run.list") >= 1, "ListRuns measured")
  T.eq(hcount("run.duration"), 4, "durations of succeeded runs")
  -- server side
  T.ok(r.server_metrics.available, "server metrics scraped")
  T.eq(r.server_metrics.grpc["run.create"].count, 5)
  T.eq(r.server_metrics.grpc["run.create"].errors, 0)
  T.eq(r.server_metrics.handlers.run_server_create_requests, 5)
  local row
  for _, x in ipairs(r.server_vs_client) do if x.op == "run.create" then row = x end end
  T.eq(row.client.count, 5)
  T.eq(row.server.count, 5)
  T.near(row.server.mean, 0.02, 1e-9)
  -- runs.csv: one row per run, in creation order, with the server's ids
  local runs = read_csv(exp:path("result", "runs.csv"))
  T.eq(#runs, 5)
  for i, x in ipairs(runs) do
    T.eq(x.id, m.state.run_order[i], "run " .. i .. " id")
    T.eq(x.outcome, i == 3 and "Failed" or "Succeeded")
    T.ok(x.created_at:match("^%d%d%d%d%-%d%d%-%d%dT"), "created_at is RFC 3339")
    T.ok(tonumber(x.duration) and tonumber(x.duration) >= 0, "duration")
    T.ok(tonumber(x.observed_lag), "observed lag")
  end
  -- latencies.csv: every call as it happened
  local lat = read_csv(exp:path("result", "latencies.csv"))
  local by = {}
  for _, x in ipairs(lat) do by[x.op] = (by[x.op] or 0) + 1 end
  T.eq(by["run.create"], 5)
  T.eq(by["run.delete"], 5)
  T.eq(by["aux.metrics.get"], 2)
  local api_calls = 0
  for _, req in ipairs(m.log) do
    if not req.path:match("^/sim/") then api_calls = api_calls + 1 end
  end
  T.eq(#lat, api_calls, "one row per request the server saw (but the simulator probe)")
  -- journal and report.csv
  local records = journal.read(exp:path("output", "journal.jsonl"))
  local events = {}
  for _, rec in ipairs(records) do events[rec.event] = (events[rec.event] or 0) + 1 end
  T.eq(events["run.created"], 5)
  T.eq(events["run.finished"], 5)
  T.eq(events.finish, 1)
  local report = read_csv(fs.join(exp.out, "kfp-storm-report.csv"))
  T.eq(report[#report].experiment_id, exp.id)
  T.eq(report[#report].succeeded, "4")
  T.eq(report[#report].status, "failed", "run 3 failed: the storm's status")
  T.eq(report[#report].api, "v2beta1")
end)

T.case("notebook = true on v1beta1: the notebook's calls in its order", function()
  metrics.clear()
  local script = { { polls = 3, final = "SUCCEEDED" }, { polls = 1, final = "SUCCEEDED" },
    { polls = 1, final = "SUCCEEDED" } }
  local m = mocks.start{ script = function(i) return script[i] end }
  local s = storm.new(params(m, { api = "v1beta1", num_runs = 3, notebook = true,
    pipeline_params = '{"data-root": "gs://x/data", "steps": 10}' }), { exp = new_exp("nb") })
  T.eq(s.p.concurrency, 1)
  T.eq(s.p.poll_all, false)
  local _, r = full_storm(s)
  m:close()
  T.eq(r.runs.succeeded, 3)
  -- polls walk the runs in order and stop at the first unfinished one;
  -- then the timed GET of every run
  T.same(m.state.gets, { 1, 1, 1, 2, 3, 1, 2, 3 })
  T.eq(hcount("run.list"), 0, "no LIST timed in notebook mode")
  T.eq(r.server_metrics.available, false)
  -- the run body is the notebook's: experiment OWNER, version CREATOR, parameters
  local body = m.state.run_bodies[1]
  T.eq(body.resource_references[1].key.type, "EXPERIMENT")
  T.eq(body.resource_references[2].key.type, "PIPELINE_VERSION")
  T.same(body.pipeline_spec.parameters, { { name = "data-root", value = "gs://x/data" },
    { name = "steps", value = "10" } })
  T.ok(body.name:match("^run%-[a-z0-9]+$") and #body.name == 14, "run-<rand10>")
  -- KFP 2.x refuses a v1 pipeline delete with versions: cleanup deletes them first
  T.same(m:leftovers(), { pipelines = 0, experiments = 0, runs = 0 })
end)

T.case("a run that never ends is terminated at run_timeout and counted", function()
  metrics.clear()
  local m = mocks.start{ script = function(i)
    return i == 2 and { final = nil } or { polls = 1, final = "SUCCEEDED" }
  end }
  local exp = new_exp("timeout")
  local s = storm.new(params(m, { num_runs = 3, run_timeout = 0.3, run_status_polling_interval_sec = 0.05 }),
    { exp = exp })
  local _, r = full_storm(s)
  m:close()
  T.eq(r.runs.timed_out, 1)
  T.eq(r.runs.succeeded, 2)
  T.eq(r.outcomes["Timed out"], 1)
  T.same(m.state.terminated, { m.state.run_order[2] })
  local runs = read_csv(exp:path("result", "runs.csv"))
  T.eq(runs[2].outcome, "Timed out")
  T.contains(runs[2].error, "not finished within run_timeout (0.3 s)")
  T.same(m:leftovers(), { pipelines = 0, experiments = 0, runs = 0 })
end)

T.case("the global timeout ends every pending run", function()
  metrics.clear()
  local m = mocks.start{ script = function() return { final = nil } end }
  local s = storm.new(params(m, { num_runs = 3, timeout = 0.3, run_timeout = 0,
    run_status_polling_interval_sec = 10 }), { exp = new_exp("global") })
  local _, r = full_storm(s)
  m:close()
  T.eq(r.runs.timed_out, 3)
  T.eq(#m.state.terminated, 3)
  T.eq(r.success_rate, 0)
end)

T.case("failed creates are counted by class with sample messages", function()
  metrics.clear()
  local m = mocks.start{ no_metrics = true, fail = function(op, n) return op == "CreateRun" and n == 2 end }
  local exp = new_exp("errors")
  local _, r = full_storm(storm.new(params(m, { concurrency = 1, retry = false }), { exp = exp }))
  m:close()
  T.eq(r.runs.not_created, 1)
  T.eq(r.runs.succeeded, 4)
  T.eq(r.errors.server.count, 1)
  T.eq(r.errors.server.ops["run.create"], 1)
  T.contains(r.errors.server.samples[1], "HTTP 503")
  T.contains(r.errors.server.samples[1], "mock: CreateRun unavailable")
  T.eq(r.server_metrics.available, false)
  T.contains(r.server_metrics.reason, "HTTP 404")
  local runs = read_csv(exp:path("result", "runs.csv"))
  T.eq(runs[2].outcome, "Not created")
  T.eq(runs[2].id, "")
  local lat = read_csv(exp:path("result", "latencies.csv"))
  local bad = 0
  for _, x in ipairs(lat) do
    if x.op == "run.create" and x.status == "503" then
      bad = bad + 1
      T.eq(x.error_class, "server")
    end
  end
  T.eq(bad, 1)
end)

T.case("cleanup after an interrupted storm deletes what it made, and leftovers", function()
  metrics.clear()
  local m = mocks.start{ script = function() return { final = nil } end }
  local s = storm.new(params(m, { num_runs = 2 }), { exp = new_exp("interrupted") })
  s:create_pipeline()
  s:create_experiment()
  s:create_runs()
  -- a run the storm does not know about (e.g. its create answer was lost)
  local other = kfp.client{ host = m.url }
  other:create_run{ name = "stray", experiment_id = s.experiment.id, pipeline_id = s.pipeline.id }
  local waiter = kb.spawn(s.wait_runs, s)
  kb.sleep(0.05)
  waiter:cancel()
  local cleaned = s:cleanup()
  T.eq(cleaned.runs, 2)
  T.eq(cleaned.leftover_runs, 1)
  T.eq(#m.state.terminated, 2, "running runs are terminated first")
  T.same(m:leftovers(), { pipelines = 0, experiments = 0, runs = 0 })
  local requests = #m.log
  s:cleanup()
  T.eq(#m.log, requests, "a second cleanup sends nothing")
  T.eq(cleaned.runs, 2)
  local r = s:finish()
  T.eq(r.runs.interrupted, 2)
  m:close()
end)

T.case("pipeline_file_url: redirects are followed with the final URL, HTML refused", function()
  metrics.clear()
  local files = httpd.listen{ handler = function(req)
    if req.path == "/moved.yaml" then return 302, "", { Location = "/taxi.yaml" } end
    if req.path == "/login.yaml" then return 200, "<html><title>Sign in</title></html>" end
    if req.path == "/gone.yaml" then return 404, "not found" end
    return 200, fs.read(PIPELINE), { ["Content-Type"] = "application/x-yaml" }
  end }
  local m = mocks.start()
  local s = storm.new(params(m, { api = "v1beta1", pipeline_file_url = files.url .. "/moved.yaml" }),
    { exp = new_exp("redirect") })
  s:create_pipeline()
  T.eq(m.state.urls[1], files.url .. "/taxi.yaml", "the server is given the final URL")
  s:cleanup()
  local s2 = storm.new(params(m, { pipeline_file_url = files.url .. "/login.yaml" }), { exp = new_exp("html") })
  T.raises(function() s2:create_pipeline() end, "returned an HTML page, not a pipeline")
  local s4 = storm.new(params(m, { pipeline_file_url = files.url .. "/gone.yaml" }), { exp = new_exp("gone") })
  T.raises(function() s4:create_pipeline() end, "kb.kfp.storm: pipeline_file_url " .. files.url .. "/gone.yaml: HTTP 404")
  local s3 = storm.new(params(m, { pipeline_file_url = "no/such/file.yaml" }), { exp = new_exp("missing") })
  T.raises(function() s3:create_pipeline() end,
    "kb.kfp.storm: pipeline_file_url: no such file 'no/such/file.yaml' (give a local path or an http(s) URL)")
  m:close()
  files:close()
end)

T.case("the pipeline-service steps on v1beta1: versions, gets, cascading deletes", function()
  metrics.clear()
  local m = mocks.start()
  local s = storm.new({ host = m.url, api = "v1beta1", pipeline_file_url = PIPELINE, num_pipelines = 3,
    num_pipeline_versions_per_pipeline = 4, version_pause_sec = 0.01, concurrency = 2, progress = false },
    { kind = "pipelines", exp = new_exp("pipelines") })
  s:scrape_metrics("before")
  s:create_pipelines()
  s:create_versions()
  s:list_versions()
  s:get_pipelines()
  s:delete_pipelines()
  s:cleanup()
  s:scrape_metrics("after")
  local r = s:finish()
  m:close()
  T.same(r.pipelines, { requested = 3, created = 3, deleted = 3 })
  T.same(r.versions, { requested = 12, created = 12 })
  T.eq(r.calls.failed, 0)
  T.eq(r.success_rate, 1)
  T.eq(m.state.uploads, 3, "a local file is uploaded to a real server")
  T.eq(m.counts.UploadPipelineVersionV1, 12)
  T.eq(hcount("pipeline.upload"), 3)
  T.eq(hcount("pipeline_version.upload"), 12)
  T.eq(hcount("pipeline.get"), 3)
  T.eq(hcount("pipeline.delete"), 3)
  T.eq(hcount("pipeline_version.delete"), 15, "v1 deletes every version (the default one too) first")
  T.same(m:leftovers(), { pipelines = 0, experiments = 0, runs = 0 })
  T.eq(s.cleaned.pipelines, 0, "nothing left for cleanup")
  T.raises(function()
    storm.new({ host = m.url, num_pipelines = -1 }, { kind = "pipelines", exp = new_exp("bad") })
  end, "kb.kfp.storm: num_pipelines must be an integer >= 0, got -1")
end)

T.case("the probe's ramp and verdicts", function()
  local probe = require "kb.kfp.storm_probe"
  local p = { start_concurrency = 8, factor = 2, max_concurrency = 64, max_error_rate = 0.05, max_p99 = 1 }
  T.same(probe.ramp(p), { 8, 16, 32, 64 })
  T.same(probe.ramp{ start_concurrency = 1, factor = 1.2, max_concurrency = 4 }, { 1, 2, 3, 4 })
  T.raises(function() probe.ramp{ start_concurrency = 0, factor = 2, max_concurrency = 8 } end,
    "kb.kfp.storm: start_concurrency must be an integer >= 1, got 0")
  T.raises(function() probe.ramp{ start_concurrency = 1, factor = 1, max_concurrency = 8 } end,
    "kb.kfp.storm: factor must be a number > 1, got 1")
  local calls = { { op = "run.create", latency = 0.2 }, { op = "run.create", latency = 0.3 },
    { op = "poll.run.get", latency = 2.5 }, { op = "run.create", latency = 9, class = "server", error = "HTTP 503" } }
  local st = probe.step(8, calls, 0, p)
  T.eq(st.calls, 4)
  T.eq(st.errors, 1)
  T.eq(st.broke, true)
  T.eq(st.reason, "error rate 25.0% > 5.0%")
  T.same(st.error_classes, { server = { count = 1, sample = "HTTP 503" } })
  local st2 = probe.step(16, calls, 0, { max_error_rate = 0.5, max_p99 = 1 })
  T.eq(st2.reason, "poll.run.get p99 2.500 s > 1.000 s")
  local ok = probe.step(4, calls, 3, { max_error_rate = 1, max_p99 = 100 })
  T.eq(ok.broke, nil)
  local summary = probe.summary({ ok, st }, p)
  T.eq(summary.broke_at, 8)
  T.eq(summary.last_good, 4)
  T.eq(probe.summary({ ok }, p).reason, "held up to 4 concurrent runs (the ramp's end)")
  local opts = probe.report({ result = { probe = summary, runs = { requested = 0 }, outcomes = {}, states = {},
    durations = { count = 0 }, observed_lag = { count = 0 }, error_count = 0, errors = {},
    server_metrics = { available = false, reason = "x" }, server_vs_client = {} } })
  T.eq(opts.sections[1].title, "Ramp")
  T.contains(opts.sections[1].html, "The server broke at 8 concurrent runs")
  T.contains(opts.sections[1].html, '<tr class="fail">')
end)

T.case("parameters are checked with clear messages", function()
  local m = mocks.start()
  local function new(extra) return storm.new(params(m, extra), { exp = new_exp("p") }) end
  T.raises(function() new{ num_runs = 0 } end, "kb.kfp.storm: num_runs must be an integer from 1 to 100000, got 0")
  -- bounds: a typo never allocates a row per run before any request
  T.raises(function() new{ num_runs = 1e12 } end,
    "kb.kfp.storm: num_runs must be an integer from 1 to 100000, got 1000000000000")
  T.raises(function() new{ num_runs = 100001 } end, "num_runs must be an integer from 1 to 100000")
  T.raises(function() new{ concurrency = 1.5 } end,
    "kb.kfp.storm: concurrency must be an integer from 1 to 10000, got 1.5")
  T.raises(function() new{ concurrency = 20000 } end, "concurrency must be an integer from 1 to 10000")
  T.raises(function() new{ run_status_polling_interval_sec = 0 } end,
    "kb.kfp.storm: run_status_polling_interval_sec must be a number > 0, got 0")
  T.raises(function() new{ api = "v3" } end, "kb.kfp.storm: api must be v1beta1 or v2beta1, got v3")
  T.raises(function() new{ poll_all = "maybe" } end, "kb.kfp.storm: poll_all must be true or false, got maybe")
  T.raises(function() new{ pipeline_params = "[1, 2]" } end,
    "kb.kfp.storm: pipeline_params must be a JSON or YAML mapping of name: value")
  T.raises(function() new{ pipeline_params = "table: 0x55d0c0ffee" } end,
    "pipeline_params: give the mapping as JSON or YAML text")
  T.same(storm.decode_params('{"a": 1, "b": "x"}'), { a = 1, b = "x" })
  T.same(storm.decode_params("a: 1\nb: x\n"), { a = 1, b = "x" })
  T.same(storm.decode_params(""), {})
  local s = new{ pipeline_file_url = "" }
  T.raises(function() s:create_pipeline() end, "kb.kfp.storm: pipeline_file_url is required")
  m:close()
end)

T.case("prom: parse, delta, quantiles and op names", function()
  local a = prom.parse([[
# TYPE run_server_create_requests counter
run_server_create_requests 10
# TYPE run_server_run_count gauge
run_server_run_count 3
# TYPE grpc_server_handling_seconds histogram
grpc_server_handling_seconds_bucket{grpc_method="CreateRunV1",grpc_service="api.RunService",le="0.1"} 1
grpc_server_handling_seconds_bucket{grpc_method="CreateRunV1",grpc_service="api.RunService",le="0.3"} 2
grpc_server_handling_seconds_bucket{grpc_method="CreateRunV1",grpc_service="api.RunService",le="+Inf"} 2
grpc_server_handling_seconds_count{grpc_method="CreateRunV1",grpc_service="api.RunService"} 2
grpc_server_handling_seconds_sum{grpc_method="CreateRunV1",grpc_service="api.RunService"} 0.3
weird_label{path="a\"b\\c",x="1"} 7 1700000000
this is not a sample
]])
  T.eq(a.skipped, 1)
  T.eq(a.samples['weird_label{path="a\\"b\\\\c",x="1"}'].labels.path, 'a"b\\c')
  local b = prom.parse([[
# TYPE run_server_create_requests counter
run_server_create_requests 60
# TYPE run_server_run_count gauge
run_server_run_count 53
# TYPE grpc_server_handling_seconds histogram
grpc_server_handling_seconds_bucket{grpc_method="CreateRunV1",grpc_service="api.RunService",le="0.1"} 1
grpc_server_handling_seconds_bucket{grpc_method="CreateRunV1",grpc_service="api.RunService",le="0.3"} 12
grpc_server_handling_seconds_bucket{grpc_method="CreateRunV1",grpc_service="api.RunService",le="+Inf"} 52
grpc_server_handling_seconds_count{grpc_method="CreateRunV1",grpc_service="api.RunService"} 52
grpc_server_handling_seconds_sum{grpc_method="CreateRunV1",grpc_service="api.RunService"} 20.3
grpc_server_handled_total{grpc_code="Unavailable",grpc_method="CreateRunV1",grpc_service="api.RunService"} 4
]])
  T.same(prom.handler_counters(a, b), { run_server_create_requests = 50 })
  local g = prom.grpc(a, b)["run.create"]
  T.eq(g.method, "CreateRunV1")
  T.eq(g.count, 50)
  T.near(g.mean, 0.4, 1e-9)
  T.eq(g.p50, 0.3, "past every finite bucket: the highest finite bound")
  T.eq(g.errors, 4)
  T.same(g.codes, { Unavailable = 4 })
  T.near(prom.quantile(0.5, { { le = 0.1, count = 2 }, { le = 0.3, count = 6 }, { le = math.huge, count = 6 } }),
    0.15, 1e-12)
  T.eq(prom.quantile(0.5, {}), nil)
  T.eq(prom.op_name("ListRunsV1"), "run.list")
  T.eq(prom.op_name("GetPipelineVersion"), "pipeline_version.get")
  T.eq(prom.op_name("ListExperiments"), "experiment.list")
  T.eq(prom.op_name("CreatePipelineAndVersion"), "pipeline_and_version.create")
  T.same(prom.gauges(a, b)["run_server_run_count"], { name = "run_server_run_count", labels = {},
    before = 3, after = 53 })
end)

T.case("report options: plot order and the storm's sections", function()
  local doc = { result = { runs = { requested = 1 }, outcomes = { Succeeded = 1 }, states = { Succeeded = 1 },
    durations = { count = 1, p50 = 640 }, observed_lag = { count = 0 }, error_count = 1,
    errors = { server = { count = 1, ops = { ["run.create"] = 1 }, samples = { "x <b>" } } },
    server_metrics = { available = false, reason = "no /metrics" }, server_vs_client = {},
    comparison = { { label = "Run duration, median", published = 640, measured = 700, diff = 0.094,
      within = true, tolerance = 0.15, unit = "s" } } } }
  local opts = storm.report(doc)
  T.eq(opts.order[1], "run.create")
  local titles = {}
  for _, sec in ipairs(opts.sections) do titles[#titles + 1] = sec.title end
  -- how the runs ended first, then the calibration, server vs client
  T.same(titles, { "Runs", "Calibration", "Server-side vs client-side", "Errors" })
  T.contains(opts.sections[2].html, "+9.4%")
  T.contains(opts.sections[4].html, "x &lt;b&gt;", "messages are escaped")
  T.same(storm.report({ status = "interrupted" }).sections, nil)
  local html = require("kb.report").html({ status = "passed", scenario = { name = "t" }, clock = { kind = "real", speed = 1 },
    metrics = { metrics = {} }, result = doc.result }, opts)
  T.contains(html, "Calibration")
end)

T.run()
fs.remove(tmp, { recursive = true })
