-- The Argo Workflow emitted for a Kubebench experiment, against the Argo
-- schema (specs/argo), its submission, and `kbrun render`.
local T = require "kb.testing"
local kb = require "kb"
local fs = kb.fs
local json = kb.json
local kubebench = require "kb.kubebench"
local openapi = require "kb.openapi"

local SRC = os.getenv("KBRUN_SOURCE_DIR") or ".."
local EXAMPLES = fs.join(SRC, "scenarios", "kubebench")
local BIN = os.getenv("KBRUN_BIN") or "/proc/self/exe"
local WF = "io.argoproj.workflow.v1alpha1.Workflow"

local spec = openapi.argo()

local function template_named(wf, name)
  for _, t in ipairs(wf.spec.templates) do if t.name == name then return t end end
end

local function step_names(wf)
  local names = {}
  for _, group in ipairs(template_named(wf, "kubebench-workflow").steps) do names[#names + 1] = group[1].name end
  return table.concat(names, ",")
end

T.case("the schema check is real: a broken Workflow fails it", function()
  local ok, errs = spec:validate(WF, { metadata = { name = "x" }, spec = { templates = { { name = 3 } } } })
  T.eq(ok, false)
  T.ok(#errs > 0)
  T.contains(table.concat(errs, "\n"), "spec.templates[0].name")
end)

for _, file in ipairs({ "tf-cnn.yaml", "pytorch.yaml", "mpi.yaml" }) do
  T.case("the Workflow of " .. file .. " validates against the Argo schema", function()
    local wf = kubebench.workflow(fs.join(EXAMPLES, file))
    local ok, errs = spec:validate(WF, wf)
    T.ok(ok, errs and table.concat(errs, "\n"))
    -- and it survives the YAML round trip kbrun render prints
    local again = kb.yaml.decode(kb.yaml.encode(wf))
    ok, errs = spec:validate(WF, again)
    T.ok(ok, errs and table.concat(errs, "\n"))
  end)
end

T.case("the Workflow has Kubebench's steps, decides by conditions and cleans up", function()
  local wf = kubebench.workflow(fs.join(EXAMPLES, "mpi.yaml"), { id = "mpi-x-202501011200-abcd", timeout = 600 })
  T.eq(wf.metadata.name, "mpi-x-202501011200-abcd")
  T.eq(wf.metadata.labels["kubebench.kubeflow.org/experiment-id"], "mpi-x-202501011200-abcd")
  T.eq(step_names(wf), "run-configurator,launch-main-job,wait-for-main-job,run-post-job,run-reporter")
  local create = template_named(wf, "main-job").resource
  T.eq(create.action, "create")
  T.eq(create.setOwnerReference, true)
  local job = kb.yaml.decode(create.manifest)
  T.eq(job.kind, "MPIJob")
  T.eq(job.metadata.name, "mpi-x-202501011200-abcd")
  local monitor = template_named(wf, "main-job-monitor")
  T.same(monitor.container.args, { "mpijobs.kubeflow.org", "mpi-x-202501011200-abcd", "default", "Succeeded",
    "training.kubeflow.org/job-name=mpi-x-202501011200-abcd", "600" })
  T.contains(monitor.container.command[3], 'cond Failed')
  T.ok(not monitor.container.command[3]:find("completionTime"), "never completionTime")
  local post_step = template_named(wf, "kubebench-workflow").steps[4][1]
  T.eq(post_step.when, "{{steps.wait-for-main-job.outputs.parameters.status}} == passed")
  T.eq(template_named(wf, "post-job").container.image, "busybox:1.36")
  local row = json.decode(template_named(wf, "reporter").inputs.artifacts[1].raw.data)
  T.eq(row.output, "report.csv")
  T.eq(row.row.experiment_id, "mpi-x-202501011200-abcd")
  T.eq(wf.spec.onExit, "cleanup")
  T.eq(kb.yaml.decode(template_named(wf, "delete-main-job").resource.manifest).kind, "MPIJob")
  local env = {}
  for _, e in ipairs(template_named(wf, "configurator").container.env) do env[e.name] = e.value end
  T.eq(env.KUBEBENCH_EXP_CONFIG_PATH, "/kubebench/experiments/mpi-x-202501011200-abcd/config")
  T.eq(#wf.spec.volumes, 2)
end)

T.case("a Lua post job is left out and noted; keep drops the cleanup", function()
  local wf = kubebench.workflow(fs.join(EXAMPLES, "tf-cnn.yaml"), { keep = true })
  T.eq(step_names(wf), "run-configurator,launch-main-job,wait-for-main-job,run-reporter")
  T.eq(wf.metadata.annotations["kbrun.io/post-job"], "lua")
  T.eq(wf.spec.onExit, nil)
  T.eq(template_named(wf, "cleanup"), nil)
  local ok, errs = spec:validate(WF, wf)
  T.ok(ok, errs and table.concat(errs, "\n"))
end)

T.case("submit posts the Workflow to argo-server", function()
  local created = kubebench.submit(fs.join(EXAMPLES, "tf-cnn.yaml"), { host = "sim" })
  T.ok(created.metadata.name:match("^tf%-cnn%-dummy%-"), created.metadata.name)
  local base = require("kb.target").resolve("sim")
  local got = kb.http.get(base .. "/api/v1/workflows/default/" .. created.metadata.name)
  T.eq(got.status, 200)
  T.eq(json.decode(got.body).spec.entrypoint, "kubebench-workflow")
  local err = T.raises(function()
    require("kb.kubebench.argo").submit({ metadata = { name = "Not_A_Name" }, spec = {} }, { host = "sim" })
  end)
  T.eq(err.class, "argo")
  T.eq(err.status, 400)
  T.contains(err.message, "/api/v1/workflows/default: 400 ")
end)

-- ---- kbrun render ---------------------------------------------------------------

local function render(...)
  return kb.process.run { cmd = { BIN, "render", ... }, timeout = 60 }
end

T.case("kbrun render prints the manifests it would create", function()
  local r = render(fs.join(EXAMPLES, "tf-cnn.yaml"), "num_worker=3", "namespace=team")
  T.eq(r.code, 0, r.stderr)
  local docs = kb.yaml.decode_all(r.stdout)
  T.eq(#docs, 1)
  T.eq(docs[1].kind, "TFJob")
  T.eq(docs[1].metadata.namespace, "team")
  T.eq(docs[1].spec.tfReplicaSpecs.Worker.replicas, 3)
  r = render(fs.join(SRC, "scenarios", "kubebench_mpi.lua"))
  T.eq(r.code, 0, r.stderr)
  docs = kb.yaml.decode_all(r.stdout)
  T.eq(#docs, 2)
  T.eq(docs[1].kind, "MPIJob")
  T.eq(docs[2].kind, "Job")
  r = render("--argo", fs.join(EXAMPLES, "pytorch.yaml"))
  T.eq(r.code, 0, r.stderr)
  local wf = kb.yaml.decode(r.stdout)
  T.eq(wf.kind, "Workflow")
  local ok, errs = spec:validate(WF, wf)
  T.ok(ok, errs and table.concat(errs, "\n"))
end)

T.case("kbrun render explains what is wrong", function()
  local r = render()
  T.eq(r.code, 2)
  T.eq(r.stderr, "kbrun: usage: kbrun render [--argo] EXPERIMENT.yaml|SCENARIO.lua [key=value...]\n")
  r = render("--nope", "x")
  T.eq(r.code, 2)
  T.contains(r.stderr, "kbrun: render: unknown option '--nope'")
  r = render("/nonexistent.yaml")
  T.eq(r.stderr, "kbrun: render: cannot read '/nonexistent.yaml'\n")
  r = render(fs.join(EXAMPLES, "pytorch.yaml"), "epoch=2")
  T.eq(r.code, 1)
  T.eq(r.stderr, "kbrun: render: experiment pytorch-dummy: unknown parameter 'epoch' (params: epochs, image, name, num_worker)\n")
  r = render(fs.join(EXAMPLES, "pytorch.yaml"), "oops")
  T.eq(r.code, 2)
  T.contains(r.stderr, "'oops' is not a key=value parameter")
end)

T.run()
