--- kb.kubebench.argo: an experiment as an Argo Workflow, for teams that
-- want it to run in the cluster with Kubebench's shape but no ksonnet.
--
--   local argo = require "kb.kubebench.argo"
--   local wf = argo.workflow(rendered, exp [, opts])   -- rendered: kubebench.render()
--   argo.submit(wf, {host = "sim" | url, namespace =, token =, wait = true})
--
-- Steps (entrypoint kubebench-workflow), as Kubebench's user-guide workflow
-- but fixed where it went wrong:
--   run-configurator   busybox: creates <exp>/{config,output,result} on the
--                      experiment PVC and saves kf-job-manifest.yaml and the
--                      params (raw artifacts, so no quoting can break them)
--   launch-main-job    resource create, setOwnerReference
--   wait-for-main-job  kubectl: decides by conditions (Succeeded/Complete vs
--                      Failed, not completionTime) within the timeout,
--                      copies every pod's log into output/, outputs
--                      parameter `status` (passed | failed | timeout)
--   run-post-job       the post job container (image, command = args), only
--                      when the main job passed
--   run-reporter       python: appends the row to <exp root>/report.csv with
--                      kbrun's rules (sorted union header, atomic, flock),
--                      then fails the Workflow if the experiment failed
--   onExit cleanup     deletes the main (and post) job unless keep
-- A Lua post job cannot run in the cluster: the step is left out and the
-- Workflow is annotated kbrun.io/post-job: lua.
local json = require "kb.json"
local yaml = require "kb.yaml"
local inject = require "kb.kubebench.inject"
local template = require "kb.kubebench.template"

local M = {}

local format = string.format
local ARRAY_MT = getmetatable(json.array())

M.IMAGES = {
  configurator = "busybox:1.36",
  monitor = "bitnami/kubectl:1.30",
  reporter = "python:3.12-alpine",
}

local function array(t) return setmetatable(t or {}, ARRAY_MT) end

local PLURAL = { TFJob = "tfjobs.kubeflow.org", PyTorchJob = "pytorchjobs.kubeflow.org",
  MPIJob = "mpijobs.kubeflow.org", Job = "jobs.batch" }

-- The monitor: polls the job's conditions with kubectl; the template's
-- activeDeadlineSeconds bounds it.
local MONITOR = [[
set -u
res="$1"; name="$2"; ns="$3"; good="$4"; selector="$5"; timeout="$6"
start=$(date +%s)
cond() { kubectl get "$res" "$name" -n "$ns" -o jsonpath="{.status.conditions[?(@.type==\"$1\")].status}"; }
status=""
while [ -z "$status" ]; do
  if [ "$(cond Failed)" = "True" ]; then status=failed
  elif [ "$(cond "$good")" = "True" ]; then status=passed
  elif [ $(( $(date +%s) - start )) -ge "$timeout" ]; then status=timeout
  else sleep 10; fi
done
mkdir -p "$KUBEBENCH_EXP_OUTPUT_PATH"
for pod in $(kubectl get pods -n "$ns" -l "$selector" -o name); do
  kubectl logs -n "$ns" "$pod" --all-containers > "$KUBEBENCH_EXP_OUTPUT_PATH/${pod#pod/}.log" || true
done
echo "$status" > /tmp/status
echo "$res $name: $status"
]]

-- The reporter: the same rules as kb.kubebench.report, in Python.
local REPORTER = [[
import csv, fcntl, json, os, sys, tempfile
row_in = json.load(open("/kubebench/reporter/row.json"))
status = os.environ["KUBEBENCH_STATUS"]
def flat(d, prefix, out):
    for k, v in d.items():
        key = prefix + str(k)
        if isinstance(v, dict) and v: flat(v, key + ".", out)
        elif isinstance(v, (list, dict)): out[key] = json.dumps(v)
        elif v is None: out[key] = ""
        elif isinstance(v, bool): out[key] = str(v).lower()
        else: out[key] = v
    return out
row = flat(row_in["row"], "", {})
row["status"] = status
row["started_at"] = os.environ["KUBEBENCH_STARTED_AT"]
path = os.path.join(os.environ["KUBEBENCH_EXP_RESULT_PATH"], row_in["input"])
if status == "passed" and os.path.exists(path):
    for k, v in flat(json.load(open(path)), "", {}).items():
        row["result." + k if k in row_in["reserved"] else k] = v
out = os.path.join(os.environ["KUBEBENCH_EXP_ROOT"], row_in["output"])
first = ["experiment_id", "started_at", "status"]
with open(out + ".lock", "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    rows = list(csv.reader(open(out, newline=""))) if os.path.exists(out) else []
    head = rows[0] if rows else []
    cols = sorted(set(head) | set(row) | set(first), key=lambda c: (first.index(c) if c in first else 3, c))
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(out))
    with os.fdopen(fd, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(cols)
        for r in rows[1:]:
            old = dict(zip(head, r))
            w.writerow([old.get(c, "") for c in cols])
        w.writerow([row.get(c, "") for c in cols])
        f.flush(); os.fsync(f.fileno())
    os.replace(tmp, out)
print("report row:", row["experiment_id"], status)
sys.exit(0 if status == "passed" else 1)
]]

local function env_list(id, extra, more)
  local env = inject.env(id)
  for _, e in ipairs(extra or {}) do env[#env + 1] = e end
  for _, e in ipairs(more or {}) do env[#env + 1] = e end
  return array(env)
end

local function container(image, id, exp, mounts, fields)
  local c = { image = image, env = env_list(id, exp.env, fields.env), volumeMounts = array(template.copy(mounts)) }
  for k, v in pairs(fields) do if k ~= "env" then c[k] = v end end
  return c
end

local function step(name, tmpl, extra)
  local s = { name = name, template = tmpl }
  for k, v in pairs(extra or {}) do s[k] = v end
  return array { s }
end

local function delete_manifest(obj)
  return yaml.encode { apiVersion = obj.apiVersion, kind = obj.kind,
    metadata = { name = obj.metadata.name, namespace = obj.metadata.namespace } }
end

--- The Workflow (a table) for a rendered experiment (kubebench.render's
-- result) and its experiment. opts: images = {configurator, monitor,
-- reporter}, service_account, keep (default exp.keep), timeout (default
-- exp.timeout).
function M.workflow(r, exp, opts)
  opts = opts or {}
  local images = {}
  for k, v in pairs(M.IMAGES) do images[k] = (opts.images or {})[k] or v end
  local id, ns, manifest = r.id, r.namespace, r.manifest
  local kind = manifest.kind
  local keep = opts.keep
  if keep == nil then keep = exp.keep end
  local timeout = math.floor(opts.timeout or exp.timeout)
  local vols, mounts = inject.volumes(exp.volumes)
  local params_name = exp.params_file or "params.yaml"
  local selector = inject.KINDS[kind].training and ("training.kubeflow.org/job-name=" .. id)
    or ("job-name=" .. id)
  local lua_post = type(exp.post_job) == "function"
  local labels = { [inject.LABEL] = id }

  local steps = array {
    step("run-configurator", "configurator"),
    step("launch-main-job", "main-job"),
    step("wait-for-main-job", "main-job-monitor"),
  }
  local when_passed = "{{steps.wait-for-main-job.outputs.parameters.status}} == passed"
  if r.post_job then steps[#steps + 1] = step("run-post-job", "post-job", { when = when_passed }) end
  steps[#steps + 1] = step("run-reporter", "reporter", { arguments = { parameters = array {
    { name = "status", value = "{{steps.wait-for-main-job.outputs.parameters.status}}" } } } })

  local report_input = {
    row = { experiment_id = id, job_kind = kind, params = r.params, message = "" },
    input = exp.reporter.csvReporterInput,
    output = exp.reporter.csvReporterOutput,
    reserved = array { "experiment_id", "started_at", "status", "finished_at", "duration",
      "job_kind", "message", "params", "timings" },
  }

  local templates = array {
    { name = "kubebench-workflow", steps = steps },
    {
      name = "configurator",
      inputs = { artifacts = array {
        { name = "kf-job-manifest", path = "/kubebench/configurator/kf-job-manifest.yaml",
          raw = { data = yaml.encode(manifest) } },
        { name = "params", path = "/kubebench/configurator/" .. params_name,
          raw = { data = yaml.encode(r.params) } },
      } },
      container = container(images.configurator, id, exp, mounts, {
        command = array { "sh", "-c" },
        args = array { 'mkdir -p "$KUBEBENCH_EXP_CONFIG_PATH" "$KUBEBENCH_EXP_OUTPUT_PATH" '
          .. '"$KUBEBENCH_EXP_RESULT_PATH" && cp /kubebench/configurator/* "$KUBEBENCH_EXP_CONFIG_PATH/"' },
      }),
    },
    {
      name = "main-job",
      resource = { action = "create", setOwnerReference = true, manifest = yaml.encode(manifest) },
    },
    {
      name = "main-job-monitor",
      activeDeadlineSeconds = timeout + 300, -- a safety net: the script stops at timeout
      outputs = { parameters = array { { name = "status", valueFrom = { path = "/tmp/status" } } } },
      container = container(images.monitor, id, exp, mounts, {
        command = array { "sh", "-c", MONITOR, "monitor" },
        args = array { PLURAL[kind], id, ns, kind == "Job" and "Complete" or "Succeeded", selector,
          tostring(timeout) },
      }),
    },
    {
      name = "reporter",
      inputs = {
        parameters = array { { name = "status" } },
        artifacts = array { { name = "row", path = "/kubebench/reporter/row.json",
          raw = { data = json.encode(report_input) } } },
      },
      script = container(images.reporter, id, exp, mounts, {
        command = array { "python3" },
        source = REPORTER,
        env = {
          { name = "KUBEBENCH_STATUS", value = "{{inputs.parameters.status}}" },
          { name = "KUBEBENCH_STARTED_AT", value = "{{workflow.creationTimestamp}}" },
        },
      }),
    },
  }
  if r.post_job then
    local pc = r.post_job.spec.template.spec.containers[1]
    local fields = { command = pc.command }
    templates[#templates + 1] = { name = "post-job", container = container(pc.image, id, exp, mounts, fields) }
  end

  local spec = {
    entrypoint = "kubebench-workflow",
    volumes = array(template.copy(vols)),
    templates = templates,
  }
  if opts.service_account then spec.serviceAccountName = opts.service_account end
  if not keep then
    spec.onExit = "cleanup"
    templates[#templates + 1] = { name = "cleanup", steps = array {
      step("delete-main-job", "delete-main-job") } }
    templates[#templates + 1] = { name = "delete-main-job", resource = { action = "delete",
      flags = array { "--ignore-not-found" }, manifest = delete_manifest(manifest) } }
  end
  local annotations = { ["kbrun.io/experiment"] = exp.name }
  if lua_post then annotations["kbrun.io/post-job"] = "lua" end
  return {
    apiVersion = "argoproj.io/v1alpha1",
    kind = "Workflow",
    metadata = { name = id, namespace = ns, labels = labels, annotations = annotations },
    spec = spec,
  }
end

local Error = { __name = "kb.error" }
Error.__index = Error
Error.__tostring = function(e) return e.class .. ": " .. e.message end

-- kb.argo's HTTP errors as this module has always raised them (class
-- "argo", "METHOD url: status message"); others pass through.
local function rethrow(err, method, url)
  if type(err) == "table" and err.status then
    error(setmetatable({ class = "argo", status = err.status, message = format("%s %s: %d %s",
      method, url, err.status, tostring(err.server_message or "")) }, Error), 0)
  end
  error(err, 0)
end

--- Submits a Workflow to argo-server (POST /api/v1/workflows/{ns}, through
-- kb.argo) and returns the created Workflow. opts: host (kb.target: "sim"
-- or a URL), namespace (default the Workflow's), token, timeout (seconds
-- to wait for it to finish when opts.wait), wait, poll.
function M.submit(wf, opts)
  opts = opts or {}
  local base = require("kb.target").resolve(opts.host)
  local ns = opts.namespace or wf.metadata.namespace or "default"
  local c = require("kb.argo").client { host = base, namespace = ns, token = opts.token, timeout = 60 }
  local url = format("%s/api/v1/workflows/%s", base, ns)
  local ok, created = pcall(c.create, c, wf, { namespace = ns })
  if not ok then rethrow(created, "POST", url) end
  if not opts.wait then return created.raw end
  local name = created.name
  local okw, done = pcall(c.wait, c, name, { timeout = opts.timeout or 3600, interval = opts.poll or 2 })
  if not okw then rethrow(done, "GET", url .. "/" .. name) end
  return done.raw
end

return M
