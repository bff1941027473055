-- kb.kubebench without a cluster: templates, injection, IDs, loading,
-- report.csv.
local T = require "kb.testing"
local kb = require "kb"
local fs = kb.fs
local json = kb.json
local kubebench = require "kb.kubebench"
local template = require "kb.kubebench.template"
local inject = require "kb.kubebench.inject"
local report = require "kb.kubebench.report"

local SRC = os.getenv("KBRUN_SOURCE_DIR") or ".."
local EXAMPLES = fs.join(SRC, "scenarios", "kubebench")
local null = json.null

local function tmp() return fs.tmpdir("kubebench-test") end

-- ---- templates ----------------------------------------------------------------

T.case("a whole ${param} keeps its type, text placeholders become text", function()
  local out = template.render("kind: Job\nspec:\n  n: ${n}\n  cmd: [run, '--epochs=${n}', '${flags}']\n"
    .. "  tag: v${ver}-${name}\n  list: ${list}\n  lit: $${n}\n", {
    n = 3, flags = "--x", ver = 1.5, name = "a", list = { 1, 2 },
  })
  T.eq(out.spec.n, 3)
  T.eq(math.type(out.spec.n), "integer")
  T.same(out.spec.cmd, { "run", "--epochs=3", "--x" })
  T.eq(out.spec.tag, "v1.5-a")
  T.same(out.spec.list, { 1, 2 })
  T.eq(out.spec.lit, "${n}")
end)

T.case("a null param drops the map entry or list item it fills", function()
  local out = template.render({ kind = "Job", spec = { args = "${args}", list = { "a", "${args}", "b" } } },
    { args = null })
  T.eq(out.spec.args, nil)
  T.same(out.spec.list, { "a", "b" })
end)

T.case("nested params are read with dots", function()
  local out = template.render("kind: Job\nimage: ${img.repo}:${img.tag}\n", { img = { repo = "r", tag = "t" } })
  T.eq(out.image, "r:t")
end)

T.case("an unknown placeholder names where it is and the known params", function()
  local err = T.raises(function()
    template.render("kind: Job\nspec:\n  replicas: ${replica}\n", { replicas = 1, image = "x" }, { template_name = "job.yaml" })
  end)
  T.eq(err.class, "kubebench")
  T.eq(err.message, "template: job.yaml.spec.replicas uses ${replica}, which is not a parameter (params: image, replicas)")
end)

T.case("a list inside text is refused", function()
  local err = T.raises(function() template.render("kind: Job\nx: a-${l}\n", { l = { 1 } }) end)
  T.eq(err.message, 'template: template.x puts ${l} (a table) inside text; only a whole value "${l}" may be a list or mapping')
end)

T.case("a template must render a Kubernetes object, from one document", function()
  T.raises(function() template.render("a: 1\n", {}) end,
    "kubebench: template template: the rendered manifest has no kind (is it a Kubernetes object?)")
  T.raises(function() template.render("kind: Job\n---\nkind: Job\n", {}, { template_name = "t.yaml" }) end,
    "template t.yaml: the main job template must be one YAML document, found 2")
end)

T.case("a Lua function template gets a copy of the params and the context", function()
  local seen
  local out = template.render(function(p, ctx)
    seen = ctx
    p.n = 99 -- must not leak into the caller's params
    return "kind: Job\nmetadata: {name: x}\n"
  end, { n = 1 }, { id = "exp-1", namespace = "ns" })
  T.eq(out.kind, "Job")
  T.eq(seen.id, "exp-1")
  T.eq(seen.namespace, "ns")
end)

-- ---- injection ----------------------------------------------------------------

local function tfjob()
  return {
    apiVersion = "kubeflow.org/v1", kind = "TFJob", metadata = { name = "x", generateName = "g-" },
    spec = { tfReplicaSpecs = {
      Worker = { replicas = 2, template = { spec = {
        initContainers = { { name = "init", image = "i" } },
        containers = { { name = "tensorflow", image = "t", env = { { name = "MINE", value = "1" } } },
                       { name = "sidecar", image = "s" } } } } },
      PS = { replicas = 1, template = { metadata = { labels = { app = "ps" } },
        spec = { containers = { { name = "tensorflow", image = "t" } } } } },
    } },
  }
end

T.case("every container of every replica gets the volumes, mounts and KUBEBENCH_* env", function()
  local m = inject.apply(tfjob(), { id = "exp-202501011200-abcd", namespace = "team",
    volumes = { experimentConfigPvc = "cfg", experimentRecordPvc = "rec", experimentDataPvc = "data" } })
  T.eq(m.metadata.name, "exp-202501011200-abcd")
  T.eq(m.metadata.generateName, nil)
  T.eq(m.metadata.namespace, "team")
  T.eq(m.metadata.labels[inject.LABEL], "exp-202501011200-abcd")
  local containers = 0
  for _, rtype in ipairs({ "Worker", "PS" }) do
    local tmpl = m.spec.tfReplicaSpecs[rtype].template
    T.eq(tmpl.metadata.labels[inject.LABEL], "exp-202501011200-abcd", rtype .. " label")
    T.eq(#tmpl.spec.volumes, 3)
    T.eq(tmpl.spec.volumes[1].persistentVolumeClaim.claimName, "cfg")
    T.eq(tmpl.spec.volumes[3].persistentVolumeClaim.claimName, "data")
    for _, key in ipairs({ "initContainers", "containers" }) do
      for _, c in ipairs(tmpl.spec[key] or {}) do
        containers = containers + 1
        local mounts = {}
        for _, vm in ipairs(c.volumeMounts) do mounts[vm.mountPath] = vm.name end
        T.eq(mounts["/kubebench/config"], "kubebench-config-volume")
        T.eq(mounts["/kubebench/experiments"], "kubebench-experiment-volume")
        T.eq(mounts["/kubebench/data"], "kubebench-data-volume")
        local env = {}
        for _, e in ipairs(c.env) do env[e.name] = e.value end
        T.eq(env.KUBEBENCH_CONFIG_ROOT, "/kubebench/config")
        T.eq(env.KUBEBENCH_DATA_ROOT, "/kubebench/data")
        T.eq(env.KUBEBENCH_EXP_ROOT, "/kubebench/experiments")
        T.eq(env.KUBEBENCH_EXP_ID, "exp-202501011200-abcd")
        T.eq(env.KUBEBENCH_EXP_PATH, "/kubebench/experiments/exp-202501011200-abcd")
        T.eq(env.KUBEBENCH_EXP_CONFIG_PATH, "/kubebench/experiments/exp-202501011200-abcd/config")
        T.eq(env.KUBEBENCH_EXP_OUTPUT_PATH, "/kubebench/experiments/exp-202501011200-abcd/output")
        T.eq(env.KUBEBENCH_EXP_RESULT_PATH, "/kubebench/experiments/exp-202501011200-abcd/result")
      end
    end
  end
  T.eq(containers, 4)
  local c = m.spec.tfReplicaSpecs.Worker.template.spec.containers[1]
  T.eq(c.env[1].name, "MINE", "the template's own env comes first")
  T.eq(m.spec.tfReplicaSpecs.PS.template.metadata.labels.app, "ps")
end)

T.case("a null PVC leaves its volume out; the env is still complete", function()
  local m = inject.apply(tfjob(), { id = "e", volumes = { experimentConfigPvc = "cfg",
    experimentRecordPvc = "rec", experimentDataPvc = null } })
  local ps = m.spec.tfReplicaSpecs.PS.template.spec
  T.eq(#ps.volumes, 2)
  T.eq(#ps.containers[1].volumeMounts, 2)
  T.eq(#ps.containers[1].env, 8)
end)

T.case("the replicas of each kind are found", function()
  local kinds = {
    { kind = "PyTorchJob", spec = { pytorchReplicaSpecs = { Master = { template = { spec = {} } } } } },
    { kind = "MPIJob", spec = { mpiReplicaSpecs = { Launcher = { template = {} }, Worker = { replicas = 3, template = {} } } } },
    { kind = "MPIJob", spec = { replicas = 3, template = {} } }, -- v1alpha1
    { kind = "Job", spec = { parallelism = 2, template = {} } },
  }
  T.eq(#inject.replicas(kinds[1]), 1)
  local mpi = inject.replicas(kinds[2])
  T.eq(mpi[1].type, "Launcher")
  T.eq(mpi[2].replicas, 3)
  T.eq(inject.replicas(kinds[3])[1].replicas, 3)
  T.eq(inject.replicas(kinds[4])[1].type, "Job")
end)

T.case("an unsupported kind and a replica without containers are refused", function()
  T.raises(function() inject.apply({ kind = "Deployment", spec = { template = {} } }, { id = "e" }) end,
    "main job kind 'Deployment' is not supported (kbrun runs Job, MPIJob, PyTorchJob, TFJob)")
  T.raises(function()
    inject.apply({ kind = "TFJob", spec = { tfReplicaSpecs = { Worker = { template = { spec = {} } } } } }, { id = "e" })
  end, "a pod template has no containers")
  T.raises(function() inject.apply({ kind = "TFJob", spec = { tfReplicaSpecs = { Worker = {} } } }, { id = "e" }) end,
    "TFJob spec.tfReplicaSpecs.Worker has no template")
end)

T.case("a post job is a batch Job with the same volumes and env; args split on commas", function()
  local job = inject.post_job({ image = "proc:1", args = "python,post.py,--x=1" },
    { id = "e-1", namespace = "ns", volumes = { experimentRecordPvc = "rec" } })
  T.eq(job.kind, "Job")
  T.eq(job.metadata.name, "e-1-post")
  T.eq(job.spec.backoffLimit, 0)
  local c = job.spec.template.spec.containers[1]
  T.same(c.command, { "python", "post.py", "--x=1" })
  T.eq(c.volumeMounts[1].mountPath, "/kubebench/experiments")
  T.eq(#c.env, 8)
  local bare = inject.post_job({ image = "proc:1" }, { id = "e-1" })
  T.eq(bare.spec.template.spec.containers[1].command, nil, "no args: the image's ENTRYPOINT")
end)

-- ---- experiments ----------------------------------------------------------------

T.case("the tf-cnn example renders Kubebench's TFJob: 1 worker, no PS", function()
  local exp = kubebench.load(fs.join(EXAMPLES, "tf-cnn.yaml"))
  T.eq(exp.name, "tf-cnn-dummy")
  T.eq(exp.params_file, "tf-cnn-dummy.yaml")
  local r = kubebench.render(exp)
  T.ok(r.id:match("^tf%-cnn%-dummy%-%d%d%d%d%d%d%d%d%d%d%d%d%-[0-9a-z][0-9a-z][0-9a-z][0-9a-z]$"), r.id)
  T.eq(r.manifest.kind, "TFJob")
  T.eq(r.manifest.metadata.name, r.id)
  T.eq(r.manifest.spec.tfReplicaSpecs.PS, nil)
  local w = r.manifest.spec.tfReplicaSpecs.Worker
  T.eq(w.replicas, 1)
  T.eq(w.template.spec.containers[1].args[1], "--model=resnet50")
  T.eq(r.post_job, nil, "a Lua post job is no manifest")
  local r2 = kubebench.render(exp, { params = { num_ps = 1, num_worker = 2 }, id = "fixed-id", namespace = "x" })
  T.eq(r2.manifest.spec.tfReplicaSpecs.PS.replicas, 1)
  T.eq(r2.manifest.spec.tfReplicaSpecs.Worker.replicas, 2)
  T.eq(r2.manifest.metadata.namespace, "x")
  T.eq(r2.id, "fixed-id")
end)

T.case("experiment IDs follow Kubebench: lower-cased params name, -YYYYMMDDhhmm-xxxx", function()
  local exp = kubebench.load { template = "kind: Job\nspec: {template: {spec: {containers: [{name: a}]}}}\n",
    name = "My_Params.v2" }
  local id = exp:new_id()
  T.ok(id:match("^my%-params%-v2%-%d+%-[0-9a-z]+$"), id)
  T.eq(#id, #"my-params-v2" + 1 + 12 + 1 + 4)
  T.ok(exp:new_id() ~= id, "4 random characters")
end)

T.case("loading refuses unknown fields, missing files and a kind mismatch", function()
  T.raises(function() kubebench.load { template = "x", paramz = {} } end, "experiment: unknown field 'paramz' (fields: ")
  T.raises(function() kubebench.load { template = "missing.yaml" } end, "experiment: template file 'missing.yaml' does not exist")
  T.raises(function() kubebench.load { params = {} } end, "experiment: 'template' is required")
  T.raises(function() kubebench.load { template = "kind: Job\n", volumes = { configPvc = "x" } } end,
    "experiment: unknown volume 'configPvc' (volumes: experimentConfigPvc, experimentDataPvc, experimentRecordPvc)")
  T.raises(function() kubebench.load { template = "kind: Job\n", post_job = { args = "x" } } end,
    "experiment: post_job needs an image (or is a Lua function)")
  T.raises(function() kubebench.load { template = "kind: Job\n", timeout = "soon" } end,
    "experiment: field 'timeout' must be a number, got string")
  local exp = kubebench.load { template = "kind: Job\nspec: {template: {spec: {containers: [{name: a}]}}}\n", kind = "TFJob" }
  T.raises(function() kubebench.render(exp) end, "experiment experiment: the template renders a Job, the experiment says kind TFJob")
  local exp2 = kubebench.load(fs.join(EXAMPLES, "pytorch.yaml"))
  T.raises(function() kubebench.render(exp2, { params = { epoch = 2 } }) end,
    "experiment pytorch-dummy: unknown parameter 'epoch' (params: epochs, image, name, num_worker)")
  T.raises(function() kubebench.load(fs.join(EXAMPLES, "nope.yaml")) end, "does not exist")
end)

T.case("the YAML-template example keeps numbers numbers", function()
  local r = kubebench.render(fs.join(EXAMPLES, "pytorch.yaml"), { params = { num_worker = 4, epochs = 3 } })
  local specs = r.manifest.spec.pytorchReplicaSpecs
  T.eq(math.type(specs.Worker.replicas), "integer")
  T.eq(specs.Worker.replicas, 4)
  T.eq(specs.Master.template.spec.containers[1].command[3], "--epochs=3")
end)

T.case("the MPI example renders the launcher command as a list and a post Job", function()
  local r = kubebench.render(fs.join(EXAMPLES, "mpi.yaml"))
  local l = r.manifest.spec.mpiReplicaSpecs.Launcher.template.spec.containers[1]
  T.eq(l.command[1], "mpirun")
  T.eq(l.command[#l.command], "--use_fp16")
  T.eq(r.manifest.spec.mpiReplicaSpecs.Worker.template.spec.containers[1].resources.limits["nvidia.com/gpu"], 1)
  T.eq(r.post_job.kind, "Job")
  T.eq(r.post_job.spec.template.spec.containers[1].image, "busybox:1.36")
end)

-- ---- report.csv ------------------------------------------------------------------

T.case("report.csv: fixed columns first, the rest sorted; nested keys dotted", function()
  local dir = tmp()
  local path = fs.join(dir, "report.csv")
  local header = report.append(path, { status = "passed", zeta = 1, alpha = "a,b", experiment_id = "e1",
    started_at = "2025-01-01T00:00:00Z", gpu = { util = 0.5, mem = { used = 3 } }, list = { 1, 2 } })
  T.same(header, { "experiment_id", "started_at", "status", "alpha", "gpu.mem.used", "gpu.util", "list", "zeta" })
  T.eq(fs.read(path), "experiment_id,started_at,status,alpha,gpu.mem.used,gpu.util,list,zeta\n"
    .. 'e1,2025-01-01T00:00:00Z,passed,"a,b",3,0.5,"[1,2]",1\n')
  fs.remove(dir, { recursive = true })
end)

T.case("report.csv: a new key adds a column and old rows get empty cells", function()
  local dir = tmp()
  local path = fs.join(dir, "sub", "report.csv")
  report.append(path, { experiment_id = "e1", started_at = "t1", status = "passed", b = 2 })
  report.append(path, { experiment_id = "e2", started_at = "t2", status = "failed", b = 3 })
  local text_before = fs.read(path)
  T.eq(select(2, text_before:gsub("\n", "")), 3, "same columns: appended")
  report.append(path, { experiment_id = "e3", started_at = "t3", status = "passed", a = 1 })
  T.eq(fs.read(path), "experiment_id,started_at,status,a,b\n"
    .. "e1,t1,passed,,2\ne2,t2,failed,,3\ne3,t3,passed,1,\n")
  local rows, header = report.read(path)
  T.eq(#rows, 3)
  T.eq(#header, 5)
  T.eq(rows[3].a, "1")
  T.eq(rows[1].a, "")
  fs.remove(dir, { recursive = true })
end)

T.case("report.csv: a row without the fixed columns still gets them", function()
  local dir = tmp()
  local path = fs.join(dir, "report.csv")
  report.append(path, { x = 1 })
  T.eq(fs.read(path), "experiment_id,started_at,status,x\n,,,1\n")
  T.raises(function() report.append(path, "row") end, "kb.kubebench.report.append: row must be a table, got string")
  T.raises(function() report.append("", {}) end, "kb.kubebench.report.append: path must be a non-empty string")
  fs.remove(dir, { recursive = true })
end)

T.case("a record becomes a row: params prefixed, result keys as they are", function()
  local row = kubebench.report_row { experiment_id = "e", started_at = "t", status = "passed", duration = 2,
    job_kind = "TFJob", params = { batch_size = 2 }, result = { images_per_sec = 10, status = "x" } }
  local flat = report.flatten(row)
  T.eq(flat["params.batch_size"], 2)
  T.eq(flat.images_per_sec, 10)
  T.eq(flat["result.status"], "x", "a result key that clashes is prefixed")
  T.eq(flat.status, "passed")
end)

T.run()
