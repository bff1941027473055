--- kb.kubebench.inject: what Kubebench's configurator "modifier" did to a
-- rendered manifest: name it after the experiment, put it in the
-- namespace, label it, and give every container of every replica the
-- experiment volumes and the KUBEBENCH_* environment.
--
--   local inject = require "kb.kubebench.inject"
--   inject.apply(manifest, {id =, namespace =, volumes =, env =})
--   for _, r in ipairs(inject.replicas(manifest)) do ... r.type, r.template end
local json = require "kb.json"
local template = require "kb.kubebench.template"

local M = {}

local fail = template.fail
local ARRAY_MT = getmetatable(json.array())

M.LABEL = "kubebench.kubeflow.org/experiment-id"

M.ROOT = {
  config = "/kubebench/config",
  experiments = "/kubebench/experiments",
  data = "/kubebench/data",
}

--- Where each supported kind keeps its replica specs; nil: spec.template.
M.KINDS = {
  TFJob = { specs = "tfReplicaSpecs", training = true },
  PyTorchJob = { specs = "pytorchReplicaSpecs", training = true },
  MPIJob = { specs = "mpiReplicaSpecs", training = true },
  Job = { batch = true },
}

--- Checks that kbrun knows how to run the kind; returns its description.
function M.kind(manifest)
  local k = M.KINDS[manifest.kind]
  if not k then
    local names = {}
    for n in pairs(M.KINDS) do names[#names + 1] = n end
    table.sort(names)
    fail("main job kind '%s' is not supported (kbrun runs %s)", tostring(manifest.kind),
      table.concat(names, ", "))
  end
  return k
end

--- The replicas of a main job manifest: list of {type =, replicas =,
-- template = the pod template table (modifiable in place)}. An MPIJob
-- v1alpha1 (spec.replicas + spec.template) is one "Worker" type.
function M.replicas(manifest)
  local k = M.kind(manifest)
  local spec = manifest.spec
  if type(spec) ~= "table" then fail("%s manifest has no spec", manifest.kind) end
  local out = {}
  local specs = k.specs and spec[k.specs]
  if type(specs) == "table" then
    local types = {}
    for t in pairs(specs) do types[#types + 1] = t end
    table.sort(types)
    for _, t in ipairs(types) do
      local rs = specs[t]
      if type(rs) ~= "table" or type(rs.template) ~= "table" then
        fail("%s spec.%s.%s has no template", manifest.kind, k.specs, t)
      end
      out[#out + 1] = { type = t, replicas = tonumber(rs.replicas) or 1, template = rs.template }
    end
  elseif type(spec.template) == "table" then
    out[1] = { type = manifest.kind == "Job" and "Job" or "Worker",
               replicas = tonumber(spec.replicas or spec.parallelism) or 1, template = spec.template }
  else
    fail("%s manifest has no %s", manifest.kind, k.specs and ("spec." .. k.specs) or "spec.template")
  end
  return out
end

--- The KUBEBENCH_* variables for an experiment, in Kubebench's order, with
-- absolute values (no $(VAR) expansion needed).
function M.env(id)
  local exp_path = M.ROOT.experiments .. "/" .. id
  return {
    { name = "KUBEBENCH_CONFIG_ROOT", value = M.ROOT.config },
    { name = "KUBEBENCH_EXP_ROOT", value = M.ROOT.experiments },
    { name = "KUBEBENCH_DATA_ROOT", value = M.ROOT.data },
    { name = "KUBEBENCH_EXP_ID", value = id },
    { name = "KUBEBENCH_EXP_PATH", value = exp_path },
    { name = "KUBEBENCH_EXP_CONFIG_PATH", value = exp_path .. "/config" },
    { name = "KUBEBENCH_EXP_OUTPUT_PATH", value = exp_path .. "/output" },
    { name = "KUBEBENCH_EXP_RESULT_PATH", value = exp_path .. "/result" },
  }
end

--- Pod volumes and mounts for the PVC names (Kubebench's params
-- experimentConfigPvc, experimentRecordPvc, experimentDataPvc); a name
-- that is null, false or "" leaves that volume out.
function M.volumes(pvcs)
  pvcs = pvcs or {}
  local vols, mounts = {}, {}
  local function add(param, vname, path)
    local claim = pvcs[param]
    if claim == nil or claim == json.null or claim == false or claim == "" then return end
    vols[#vols + 1] = { name = vname, persistentVolumeClaim = { claimName = tostring(claim) } }
    mounts[#mounts + 1] = { name = vname, mountPath = path }
  end
  add("experimentConfigPvc", "kubebench-config-volume", M.ROOT.config)
  add("experimentRecordPvc", "kubebench-experiment-volume", M.ROOT.experiments)
  add("experimentDataPvc", "kubebench-data-volume", M.ROOT.data)
  return vols, mounts
end

local function list_field(t, key)
  local v = t[key]
  if v == nil or v == json.null then
    v = setmetatable({}, ARRAY_MT)
    t[key] = v
  end
  return v
end

-- Appends items whose `name` is not there yet (a template that already
-- mounts a volume of that name keeps its own).
local function merge_named(list, items)
  local have = {}
  for _, x in ipairs(list) do if type(x) == "table" and x.name then have[x.name] = true end end
  for _, x in ipairs(items) do
    if not have[x.name] then list[#list + 1] = template.copy(x) end
  end
end

local function set_label(meta, id)
  local labels = meta.labels
  if type(labels) ~= "table" then labels = {} meta.labels = labels end
  labels[M.LABEL] = id
end

--- Injects into one pod template: label, volumes, mounts and env on every
-- container (init containers too).
function M.pod_template(tmpl, id, vols, mounts, env)
  if type(tmpl.metadata) ~= "table" then tmpl.metadata = {} end
  set_label(tmpl.metadata, id)
  local ps = tmpl.spec
  if type(ps) ~= "table" or type(ps.containers) ~= "table" or #ps.containers == 0 then
    fail("a pod template has no containers")
  end
  merge_named(list_field(ps, "volumes"), vols)
  for _, key in ipairs({ "initContainers", "containers" }) do
    for _, c in ipairs(type(ps[key]) == "table" and ps[key] or {}) do
      merge_named(list_field(c, "volumeMounts"), mounts)
      merge_named(list_field(c, "env"), env)
    end
  end
end

--- Applies the experiment to a rendered main job manifest in place and
-- returns it. opts: id (required), namespace, volumes (the PVC params),
-- env (extra {name, value} entries after the KUBEBENCH_* ones), labels,
-- annotations (on the job's metadata).
function M.apply(manifest, opts)
  local id = assert(opts.id, "inject.apply: id is required")
  local reps = M.replicas(manifest)
  if type(manifest.metadata) ~= "table" then manifest.metadata = {} end
  local meta = manifest.metadata
  meta.name = id
  meta.generateName = nil
  if opts.namespace then meta.namespace = opts.namespace end
  set_label(meta, id)
  for k, v in pairs(opts.labels or {}) do meta.labels[k] = v end
  if opts.annotations and next(opts.annotations) then
    if type(meta.annotations) ~= "table" then meta.annotations = {} end
    for k, v in pairs(opts.annotations) do meta.annotations[k] = tostring(v) end
  end
  local vols, mounts = M.volumes(opts.volumes)
  local env = M.env(id)
  for _, e in ipairs(opts.env or {}) do env[#env + 1] = e end
  for _, r in ipairs(reps) do M.pod_template(r.template, id, vols, mounts, env) end
  return manifest
end

--- A batch/v1 Job running the post job container (image + args), with the
-- same volumes, env and label as the main job. args: a list or
-- Kubebench's comma-separated string; empty keeps the image's ENTRYPOINT.
function M.post_job(post, opts)
  local id = opts.id
  local args = post.args
  if type(args) == "string" then
    local list = {}
    for part in args:gmatch("[^,]+") do list[#list + 1] = part end
    args = list
  end
  local container = { name = "post-job", image = post.image }
  if type(args) == "table" and #args > 0 then
    container.command = setmetatable(template.copy(args), ARRAY_MT)
  end
  local job = {
    apiVersion = "batch/v1",
    kind = "Job",
    metadata = { name = id .. "-post", namespace = opts.namespace, labels = { [M.LABEL] = id } },
    spec = {
      backoffLimit = 0,
      template = {
        metadata = { labels = { [M.LABEL] = id } },
        spec = { restartPolicy = "Never", containers = setmetatable({ container }, ARRAY_MT) },
      },
    },
  }
  local vols, mounts = M.volumes(opts.volumes)
  local env = M.env(id)
  for _, e in ipairs(opts.env or {}) do env[#env + 1] = e end
  M.pod_template(job.spec.template, id, vols, mounts, env)
  return job
end

return M
