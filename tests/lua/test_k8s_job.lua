-- kb.cli.k8s_job and `kbrun k8s-job`: the rendered objects are valid
-- Kubernetes 1.32 objects, and --apply creates them (here in the embedded
-- simulator, whose Job controller runs the pods in its model).
local T = require "kb.testing"
local kb = require "kb"
local k8s_job = require "kb.cli.k8s_job"
local openapi = require "kb.openapi"

local fs, json = kb.fs, kb.json

local work = fs.tmpdir("kb-k8s-job-")
local scen_dir = fs.join(work, "bench")
fs.mkdir(fs.join(scen_dir, "lib"))
local SCENARIO = fs.join(scen_dir, "my_storm.lua")
fs.write(SCENARIO, [[
local helper = require "helper"
local nested = require "lib.nested"
return { name = "my-storm", params = { runs = 10 }, run = function(p) return helper.go(p, nested) end }
]])
fs.write(fs.join(scen_dir, "helper.lua"), "return { go = function() return {} end }\n")
fs.write(fs.join(scen_dir, "lib", "nested.lua"), "return {}\n")
fs.write(fs.join(scen_dir, "cluster.yaml"), "pools: []\n")
fs.write(fs.join(scen_dir, "notes.txt"), "not shipped\n")
local PARAMS = fs.join(work, "params.yaml")
fs.write(PARAMS, "runs: 20\n")

local function find(objects, kind)
  for _, o in ipairs(objects) do if o.kind == kind then return o end end
end

local function env_value(container, name)
  for _, e in ipairs(container.env) do if e.name == name then return e.value end end
end

T.case("render: an Indexed Job of N shards, its ConfigMap and claim", function()
  local objs = k8s_job.render { scenario = SCENARIO, shards = 4, image = "reg.example/kbrun:1.2",
    assignments = { "runs=40" }, params_file = PARAMS, cpu = "500m", memory = "1Gi", seed = 7 }
  T.eq(#objs, 3)
  T.same({ objs[1].kind, objs[2].kind, objs[3].kind }, { "ConfigMap", "PersistentVolumeClaim", "Job" })
  local cm, pvc, job = objs[1], objs[2], objs[3]
  T.eq(job.metadata.name, "my-storm")
  T.eq(cm.metadata.name, "my-storm-scenario")
  T.eq(pvc.metadata.name, "my-storm-results")
  local spec = job.spec
  T.eq(spec.completionMode, "Indexed")
  T.eq(spec.completions, 4)
  T.eq(spec.parallelism, 4)
  T.eq(spec.backoffLimit, 0)
  local pod = spec.template.spec
  T.eq(pod.restartPolicy, "Never")
  T.eq(pod.securityContext.runAsNonRoot, true)
  T.eq(pod.securityContext.runAsUser, 10001)
  local c = pod.containers[1]
  T.eq(c.image, "reg.example/kbrun:1.2")
  T.same(c.command, { "kbrun" })
  T.same(c.args, { "-o", "/results/my-storm", "-p", "/scenario/kbrun-params.yaml", "--seed", "7",
    "/scenario/my_storm.lua", "runs=40" })
  T.eq(env_value(c, "KBRUN_SHARD_COUNT"), "4")
  T.eq(env_value(c, "KBRUN_RESULTS_DB"), "off", "shards on several nodes must not share one SQLite file")
  T.eq(c.securityContext.allowPrivilegeEscalation, false)
  T.eq(c.securityContext.readOnlyRootFilesystem, true)
  T.same(c.resources, { requests = { cpu = "500m", memory = "1Gi" }, limits = { cpu = "500m", memory = "1Gi" } })
  -- The scenario, its libraries (subfolders mapped back) and data; not other files.
  T.ok(cm.data["my_storm.lua"]:find("require \"helper\"", 1, true), "scenario shipped")
  T.eq(cm.data["helper.lua"], "return { go = function() return {} end }\n")
  T.eq(cm.data["lib__nested.lua"], "return {}\n")
  T.eq(cm.data["cluster.yaml"], "pools: []\n")
  T.eq(cm.data["kbrun-params.yaml"], "runs: 20\n")
  T.eq(cm.data["notes.txt"], nil)
  local paths = {}
  for _, it in ipairs(pod.volumes[1].configMap.items) do paths[it.key] = it.path end
  T.eq(paths["lib__nested.lua"], "lib/nested.lua")
  T.eq(paths["helper.lua"], "helper.lua")
  T.eq(pvc.spec.accessModes[1], "ReadWriteMany")
  T.eq(pvc.spec.resources.requests.storage, "1Gi")

  -- An existing claim: no PVC rendered.
  objs = k8s_job.render { scenario = SCENARIO, shards = 2, pvc = "shared", name = "Run_42!" }
  T.eq(#objs, 2)
  T.eq(objs[2].metadata.name, "run-42")
  T.eq(objs[2].spec.template.spec.volumes[2].persistentVolumeClaim.claimName, "shared")
  T.eq(objs[2].spec.template.spec.containers[1].image, k8s_job.DEFAULT_IMAGE)
end)

T.case("rendered objects validate against the Kubernetes 1.32 schema", function()
  local spec = openapi.k8s()
  local objs = k8s_job.render { scenario = SCENARIO, shards = 3, pvc_size = "5Gi", storage_class = "nfs",
    cpu = 2, memory = "4Gi", service_account = "bench", deadline = 3600, ttl = 600, namespace = "bench",
    params_file = PARAMS }
  local defs = { ConfigMap = "io.k8s.api.core.v1.ConfigMap",
    PersistentVolumeClaim = "io.k8s.api.core.v1.PersistentVolumeClaim", Job = "io.k8s.api.batch.v1.Job" }
  for _, o in ipairs(objs) do
    local ok, errs = spec:validate(defs[o.kind], o, o.kind, { strict = true })
    T.ok(ok, o.kind .. ": " .. table.concat(errs, "; "))
  end
  -- And after a YAML round trip, as kubectl would read them.
  local text = k8s_job.yaml(objs)
  local back = kb.yaml.decode_all(text)
  T.eq(#back, 3)
  for _, o in ipairs(back) do
    local ok, errs = spec:validate(defs[o.kind], o, o.kind, { strict = true })
    T.ok(ok, o.kind .. " (YAML): " .. table.concat(errs, "; "))
  end
  T.eq(back[3].spec.completionMode, "Indexed")
  -- The validator does catch a broken Job (the check can fail).
  local broken = objs[3]
  broken.spec.completions = "three"
  T.eq((spec:validate(defs.Job, broken, "Job", { strict = true })), false)
end)

T.case("render refuses what cannot work, saying why", function()
  T.raises(function() k8s_job.render { scenario = fs.join(work, "nope.lua"), shards = 2 } end,
    "k8s-job: cannot read scenario '" .. fs.join(work, "nope.lua") .. "'")
  T.raises(function() k8s_job.render { scenario = SCENARIO } end, "k8s-job: --shards N is required")
  T.raises(function() k8s_job.render { scenario = SCENARIO, shards = 0 } end,
    "k8s-job: --shards wants a positive integer, got '0'")
  T.raises(function() k8s_job.render { scenario = SCENARIO, shards = 2, pvc = "a", pvc_size = "1Gi" } end,
    "k8s-job: give --pvc CLAIM or --pvc-size SIZE, not both")
  T.raises(function() k8s_job.render { scenario = SCENARIO, shards = 2, memory = "lots" } end,
    "k8s-job: --memory wants a Kubernetes quantity (like 500m, 2, 1Gi), got 'lots'")
  T.raises(function() k8s_job.render { scenario = SCENARIO, shards = 2, assignments = { "oops" } } end,
    "k8s-job: 'oops' is not a key=value parameter")
  T.raises(function() k8s_job.render { scenario = SCENARIO, shards = 2, seed = "-1" } end,
    "k8s-job: --seed wants a non-negative integer, got '-1'")
  local big_dir = fs.join(work, "big")
  fs.mkdir(big_dir)
  fs.write(fs.join(big_dir, "s.lua"), "return {}\n")
  fs.write(fs.join(big_dir, "data.json"), "[" .. string.rep("1,", 600 * 1024) .. "1]")
  T.raises(function() k8s_job.render { scenario = fs.join(big_dir, "s.lua"), shards = 2 } end,
    "KiB of .lua/.yaml/.json, more than a ConfigMap takes (1 MiB)")
  T.raises(function() k8s_job.parse_args({ "s.lua", "--bogus" }) end, "k8s-job: unknown option '--bogus'")
  T.raises(function() k8s_job.parse_args({ "s.lua", "--shards" }) end, "k8s-job: --shards needs a value")
  local o = k8s_job.parse_args({ "--shards=3", "s.lua", "a=1", "--apply", "-n", "ns" })
  T.eq(o.shards, "3")
  T.eq(o.scenario, "s.lua")
  T.same(o.assignments, { "a=1" })
  T.eq(o.apply, true)
  T.eq(o.namespace, "ns")
end)

local BIN = os.getenv("KBRUN_BIN")

T.case("kbrun k8s-job prints the objects as YAML", function()
  if not BIN then error("KBRUN_BIN is not set (run through ctest)") end
  local r = kb.process.run { cmd = { BIN, "k8s-job", SCENARIO, "--shards", "3", "--image", "x/kbrun:1" }, timeout = 60 }
  T.eq(r.code, 0, r.stderr)
  local docs = kb.yaml.decode_all(r.stdout)
  T.eq(#docs, 3)
  T.eq(docs[3].kind, "Job")
  T.eq(docs[3].spec.completions, 3)
  r = kb.process.run { cmd = { BIN, "k8s-job", SCENARIO }, timeout = 60 }
  T.eq(r.code, 2)
  T.contains(r.stderr, "kbrun: k8s-job: --shards N is required")
  r = kb.process.run { cmd = { BIN, "k8s-job", "--help" }, timeout = 60 }
  T.eq(r.code, 0)
  T.contains(r.stdout, "usage: kbrun k8s-job SCENARIO.lua --shards N")
end)

T.case("--apply creates the objects; the simulator runs the Job's pods", function()
  if not BIN then error("KBRUN_BIN is not set (run through ctest)") end
  local sim = kb.sim.start { profile = "fast", speed = 600, seed = 1 }
  local ok, err = pcall(function()
    local kubeconfig = sim:write_kubeconfig(fs.join(work, "kubeconfig"))
    local objs = k8s_job.render { scenario = SCENARIO, shards = 3, pvc_size = "1Gi", cpu = "100m", memory = "128Mi" }
    local done = k8s_job.apply(objs, { kubeconfig = kubeconfig })
    T.same({ done[1].kind, done[2].kind, done[3].kind }, { "ConfigMap", "PersistentVolumeClaim", "Job" })
    local c = require("kb.k8s").client { kubeconfig = kubeconfig }
    local cm = c:get("ConfigMap", "my-storm-scenario")
    T.eq(cm.data["lib__nested.lua"], "return {}\n")
    -- The pods run in the simulator's model (they do not run kbrun).
    local job
    for _ = 1, 120 do
      job = c:get("Job", "my-storm")
      if job.status and (job.status.succeeded or 0) >= 3 then break end
      kb.sleep(30)
    end
    T.eq(job.status.succeeded, 3, "the simulator ran 3 pods to completion")
    T.eq(job.spec.completionMode, "Indexed")
    T.eq(job.status.completedIndexes, "0-2")
    local pods = c:list("pods", { label_selector = { ["job-name"] = "my-storm" } })
    T.eq(#pods.items, 3)
    -- Each pod has its completion index, as the Job controller sets it:
    -- what kb.shard reads as the shard number.
    local KEY = "batch.kubernetes.io/job-completion-index"
    local seen = {}
    for _, pod in ipairs(pods.items) do
      local idx = pod.metadata.annotations[KEY]
      T.eq(pod.metadata.labels[KEY], idx)
      T.ok(pod.metadata.name:match("^my%-storm%-" .. idx .. "%-%w+$"), pod.metadata.name)
      T.eq(pod.spec.hostname, "my-storm-" .. idx)
      local env = {}
      for _, e in ipairs(pod.spec.containers[1].env) do env[e.name] = e end
      T.eq(env.JOB_COMPLETION_INDEX.valueFrom.fieldRef.fieldPath, "metadata.annotations['" .. KEY .. "']")
      T.eq(env.KBRUN_SHARD_COUNT.value, "3")
      seen[#seen + 1] = idx
    end
    table.sort(seen)
    T.same(seen, { "0", "1", "2" })
    -- Applying again: the objects exist; the message says what to do.
    local e = T.raises(function() k8s_job.apply(objs, { kubeconfig = kubeconfig }) end, "exists already")
    T.contains(tostring(e.message), "ConfigMap my-storm-scenario exists already in namespace default")
    -- The command line, with a kubeconfig from the environment.
    local r = kb.process.run { cmd = { BIN, "k8s-job", SCENARIO, "--shards", "2", "--name", "cli-run", "--apply" },
      env = { KUBECONFIG = kubeconfig }, timeout = 60 }
    T.eq(r.code, 0, r.stderr)
    T.contains(r.stdout, "job/cli-run created")
    T.eq(c:get("Job", "cli-run").spec.completions, 2)
    r = kb.process.run { cmd = { BIN, "k8s-job", SCENARIO, "--shards", "2", "--name", "cli-run", "--apply" },
      env = { KUBECONFIG = kubeconfig }, timeout = 60 }
    T.eq(r.code, 1)
    T.contains(r.stderr, "kbrun: k8s-job: ")
    T.contains(r.stderr, "exists already")
  end)
  sim:stop()
  if not ok then error(err, 0) end
end)

T.run()
fs.remove(work, { recursive = true })
