-- kb.kubebench experiments against the embedded simulator: the layout,
-- conditions (passed / failed / timeout), logs, post jobs, cleanup, and
-- report.csv under concurrency (tasks and processes).
local T = require "kb.testing"
local kb = require "kb"
local fs = kb.fs
local json = kb.json
local kubebench = require "kb.kubebench"
local report = require "kb.kubebench.report"
local client = require "kb.kubebench.client"

local SRC = os.getenv("KBRUN_SOURCE_DIR") or ".."
local EXAMPLES = fs.join(SRC, "scenarios", "kubebench")

local function tmp() return fs.tmpdir("kubebench-run") end

local function job_yaml(extra)
  return "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  backoffLimit: 0\n  template:\n"
    .. "    spec:\n      restartPolicy: Never\n      containers: [{name: main, image: '${image}'}]\n" .. (extra or "")
end

T.case("tf-cnn-dummy: Kubebench layout, per-replica logs, result.json, one report row, jobs deleted", function()
  local root = tmp()
  local rec = kubebench.run(fs.join(EXAMPLES, "tf-cnn.yaml"), { host = "sim", root = root })
  T.eq(rec.status, "passed", rec.message)
  T.eq(rec.passed, 1)
  T.ok(rec.experiment_id:match("^tf%-cnn%-dummy%-%d+%-%w%w%w%w$"), rec.experiment_id)
  local dir = fs.join(root, rec.experiment_id)
  local manifest = kb.yaml.decode(fs.read(fs.join(dir, "config", "kf-job-manifest.yaml")))
  T.eq(manifest.kind, "TFJob")
  T.eq(manifest.metadata.name, rec.experiment_id)
  local params = kb.yaml.decode(fs.read(fs.join(dir, "config", "tf-cnn-dummy.yaml")))
  T.eq(params.model, "resnet50")
  T.eq(params.batch_size, 2)
  T.same(fs.list(fs.join(dir, "output")), { "worker0.log" })
  T.contains(fs.read(fs.join(dir, "output", "worker0.log")), "total images/sec: ")
  local result = json.decode(fs.read(fs.join(dir, "result", "result.json")))
  T.eq(result.status, "passed")
  T.eq(result.experiment_id, rec.experiment_id)
  T.eq(result.result.replicas, 1, "the Lua post job parsed one log")
  T.ok(result.result.train_seconds > 0)
  local rows, header = report.read(fs.join(root, "report.csv"))
  T.eq(#rows, 1)
  T.same({ header[1], header[2], header[3] }, { "experiment_id", "started_at", "status" })
  T.eq(rows[1].experiment_id, rec.experiment_id)
  T.eq(rows[1].status, "passed")
  T.eq(rows[1]["params.model"], "resnet50")
  T.eq(rows[1].replicas, "1")
  local c = client.new { host = "sim" }
  T.eq(c:get("TFJob", rec.experiment_id), nil, "the TFJob was deleted")
  fs.remove(root, { recursive = true })
end)

T.case("a failing main job is reported as failed, and its row says so", function()
  local root = tmp()
  local post_ran = false
  local rec = kubebench.run({
    template = fs.join(EXAMPLES, "tf_cnn_template.lua"),
    params = fs.join(EXAMPLES, "tf-cnn-dummy.yaml"),
    annotations = { ["sim.kbrun.io/fail"] = "true" },
    post_job = function() post_ran = true return {} end,
  }, { host = "sim", root = root })
  T.eq(rec.status, "failed")
  T.eq(rec.passed, 0)
  T.contains(rec.message, "has failed because 1 Worker replica(s) failed")
  T.eq(post_ran, false, "no post job on a failed main job")
  local dir = fs.join(root, rec.experiment_id)
  T.contains(fs.read(fs.join(dir, "output", "worker0.log")), "failed")
  T.eq(json.decode(fs.read(fs.join(dir, "result", "result.json"))).status, "failed")
  local rows = report.read(fs.join(root, "report.csv"))
  T.eq(#rows, 1)
  T.eq(rows[1].status, "failed")
  T.contains(rows[1].message, "has failed")
  T.eq(client.new { host = "sim" }:get("TFJob", rec.experiment_id), nil, "deleted after failure too")
  fs.remove(root, { recursive = true })
end)

T.case("a job that outlives the timeout is reported as timeout and deleted", function()
  local root = tmp()
  local rec = kubebench.run({ name = "slow", template = job_yaml(), params = { image = "busybox" },
    timeout = 0.5, poll = 0.1 }, { host = "sim", root = root })
  T.eq(rec.status, "timeout")
  T.eq(rec.message, "Job slow-" .. rec.experiment_id:match("^slow%-(.*)$") .. " did not finish within 0.5 s")
  T.eq(report.read(fs.join(root, "report.csv"))[1].status, "timeout")
  T.eq(client.new { host = "sim" }:get("Job", rec.experiment_id), nil)
  fs.remove(root, { recursive = true })
end)

T.case("keep = true leaves the job; a refused create is an error row", function()
  local root = tmp()
  local rec = kubebench.run({ name = "kept", template = job_yaml(), params = { image = "busybox" }, keep = true },
    { host = "sim", root = root })
  T.eq(rec.status, "passed", rec.message)
  local c = client.new { host = "sim" }
  local job = c:get("Job", rec.experiment_id)
  T.ok(job, "kept")
  T.eq(job.metadata.labels["kubebench.kubeflow.org/experiment-id"], rec.experiment_id)
  T.eq(c:delete("Job", rec.experiment_id), true)
  -- the same ID again: the API server refuses the create
  local again = kubebench.run({ name = "kept", template = job_yaml(), params = { image = "busybox" }, keep = true },
    { host = "sim", root = root, id = rec.experiment_id .. "x" })
  T.eq(again.status, "passed")
  local dup = kubebench.run({ name = "kept", template = job_yaml(), params = { image = "busybox" } },
    { host = "sim", root = root, id = again.experiment_id })
  T.eq(dup.status, "error")
  T.contains(dup.message, "409")
  T.contains(dup.message, "already exists")
  c:delete("Job", again.experiment_id)
  local rows = report.read(fs.join(root, "report.csv"))
  T.eq(#rows, 3)
  T.eq(rows[3].status, "error")
  fs.remove(root, { recursive = true })
end)

T.case("an image post job runs as a Job; its log is kept and a JSON line is the result", function()
  local root = tmp()
  local rec = kubebench.run({ name = "post", template = job_yaml(), params = { image = "busybox" },
    post_job = { image = "busybox", args = "sh,-c,echo done" } }, { host = "sim", root = root })
  T.eq(rec.status, "passed", rec.message)
  local out = fs.join(root, rec.experiment_id, "output")
  T.ok(fs.exists(fs.join(out, "post-job.log")), "post-job.log")
  T.eq(client.new { host = "sim" }:get("Job", rec.experiment_id .. "-post"), nil, "post job deleted")
  -- the result a post job left in the (local) experiment folder wins
  local exp = kubebench.load { name = "post2", template = job_yaml(), params = { image = "busybox" },
    post_job = { image = "busybox" }, reporter = { csvReporterInput = "out.json" } }
  local id = exp:new_id()
  fs.mkdir(fs.join(root, id, "result"))
  fs.write(fs.join(root, id, "result", "out.json"), '{"images_per_sec": 12.5, "gpu": {"util": 0.9}}')
  local rec2 = kubebench.run(exp, { host = "sim", root = root, id = id })
  T.eq(rec2.status, "passed", rec2.message)
  T.eq(rec2.result.images_per_sec, 12.5)
  local rows = report.read(fs.join(root, "report.csv"))
  T.eq(rows[2]["gpu.util"], "0.9")
  T.eq(rows[1]["gpu.util"], "", "the older row got an empty cell")
  fs.remove(root, { recursive = true })
end)

T.case("a failing Lua post job fails the experiment with its message", function()
  local root = tmp()
  local rec = kubebench.run({ name = "badpost", template = job_yaml(), params = { image = "busybox" },
    post_job = function() error("no images/sec in the logs", 0) end }, { host = "sim", root = root })
  T.eq(rec.status, "failed")
  T.eq(rec.message, "post job: no images/sec in the logs")
  fs.remove(root, { recursive = true })
end)

T.case("ten experiments in parallel append to one report.csv; params add new keys", function()
  local root = tmp()
  local tasks = {}
  for i = 1, 10 do
    tasks[i] = kb.spawn(function()
      local params = { image = "busybox", ["key" .. i] = i }
      return kubebench.run({ name = "par" .. i, template = job_yaml(), params = params,
        post_job = function() return { value = i } end }, { host = "sim", root = root })
    end)
  end
  local ids = {}
  for i, t in ipairs(tasks) do
    local rec = t:wait()
    T.eq(rec.status, "passed", rec.message)
    ids[rec.experiment_id] = i
  end
  local text = fs.read(fs.join(root, "report.csv"))
  local rows, header = report.read(fs.join(root, "report.csv"))
  T.eq(#rows, 10)
  for i = 1, 10 do
    local found = false
    for _, h in ipairs(header) do if h == "params.key" .. i then found = true end end
    T.ok(found, "column params.key" .. i)
  end
  for _, row in ipairs(rows) do
    local i = ids[row.experiment_id]
    T.ok(i, "a known experiment: " .. tostring(row.experiment_id))
    ids[row.experiment_id] = nil
    T.eq(row.value, tostring(i))
    T.eq(row["params.key" .. i], tostring(i))
    for j = 1, 10 do
      if j ~= i then T.eq(row["params.key" .. j], "", "no key" .. j .. " in row " .. i) end
    end
  end
  T.eq(next(ids), nil, "every experiment has its row")
  local sorted = {}
  for k = 4, #header do sorted[#sorted + 1] = header[k] end
  local copy = { table.unpack(sorted) }
  table.sort(copy)
  T.same(sorted, copy, "the columns after the first three are sorted")
  T.eq(select(2, text:gsub("\n", "")), 11)
  fs.remove(root, { recursive = true })
end)

T.case("ten kbrun processes appending to one report.csv lose and corrupt no row", function()
  local root = tmp()
  local path = fs.join(root, "report.csv")
  local script = fs.join(root, "append.lua")
  fs.write(script, [[
local kb = require "kb"
local report = require "kb.kubebench.report"
local who, path = kb.params.who, kb.params.path
for i = 1, 20 do
  -- a new column every few rows forces rewrites while others append
  report.append(path, { experiment_id = who .. "-" .. i, started_at = "t", status = "passed",
    ["k" .. (i % 7)] = i, text = "a, \"quoted\"\nline" })
end
]])
  local bin = os.getenv("KBRUN_BIN") or "/proc/self/exe"
  -- 120 real seconds: the embedded simulator started by earlier cases
  -- makes scenario time run faster than real time
  local limit = 120 * require("kb.core").clock_speed()
  local tasks = {}
  for p = 1, 10 do
    tasks[p] = kb.spawn(kb.process.run, { cmd = { bin, "-q", "-o", fs.join(root, "out"), script,
      "who=p" .. p, "path=" .. path }, timeout = limit })
  end
  for p, t in ipairs(tasks) do
    local r = t:wait()
    T.eq(r.code, 0, "process " .. p .. ": " .. r.stderr)
  end
  local rows, header = report.read(path)
  T.eq(#rows, 200)
  T.same(header, { "experiment_id", "started_at", "status", "k0", "k1", "k2", "k3", "k4", "k5", "k6", "text" })
  local seen = {}
  for _, row in ipairs(rows) do
    T.eq(seen[row.experiment_id], nil, "duplicate " .. tostring(row.experiment_id))
    seen[row.experiment_id] = true
    T.eq(row.text, "a, \"quoted\"\nline")
    local i = tonumber(row.experiment_id:match("%-(%d+)$"))
    T.eq(row["k" .. (i % 7)], tostring(i))
  end
  fs.remove(root, { recursive = true })
end)

T.case("both clients (kb.k8s and the plain fallback) answer the same shapes", function()
  for _, c in ipairs({ client.new { host = "sim" }, client.plain { host = "sim" } }) do
    T.eq(c:get("TFJob", "absent"), nil)
    T.eq(c:delete("Job", "absent"), false)
    local job = c:create { apiVersion = "batch/v1", kind = "Job", metadata = { name = "shape-test",
      labels = { shape = "1" } }, spec = { template = { spec = { restartPolicy = "Never",
      containers = { { name = "main", image = "busybox" } } } } } }
    T.eq(job.metadata.name, "shape-test")
    T.eq(c:get("Job", "shape-test").metadata.name, "shape-test")
    T.eq(type(c:list("Pod", { label_selector = "job-name=shape-test" })), "table")
    T.eq(c:delete("Job", "shape-test"), true)
  end
  local err = T.raises(function()
    client.plain { host = "sim" }:create { apiVersion = "batch/v1", kind = "Job", metadata = { name = "Bad_Name" }, spec = {} }
  end)
  T.eq(err.class, "k8s")
  T.eq(err.status, 422)
  T.contains(err.message, "/apis/batch/v1/namespaces/default/jobs: 422 Invalid: Job \"Bad_Name\" is invalid")
end)

T.case("the scenario helper: params plus host/namespace/timeout/keep, null params as \"\"", function()
  local s = kubebench.scenario { experiment = fs.join(EXAMPLES, "tf-cnn.yaml") }
  T.eq(s.name, "tf-cnn-dummy")
  T.eq(s.params.args, "")
  T.eq(s.params.num_worker, 1)
  T.eq(s.params.host, "sim")
  T.eq(s.params.keep, false)
  T.same(s.thresholds, { passed = 1 })
  T.raises(function()
    kubebench.scenario { experiment = { template = job_yaml(), params = { host = "x", image = "i" } } }
  end, "param 'host' clashes with the scenario's own 'host' parameter")
end)

T.run()
