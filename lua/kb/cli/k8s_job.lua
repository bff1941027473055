--- kb.cli.k8s_job: one experiment as an Indexed Kubernetes Job of N kbrun pods
-- (`kbrun k8s-job SCENARIO --shards N`).
--
--   local k8s_job = require "kb.cli.k8s_job"
--   local objs = k8s_job.render{ scenario = "scenarios/http_storm.lua", shards = 4,
--                                image = "registry.example/kbrun:0.1" }
--   io.write(k8s_job.yaml(objs))                 -- ConfigMap, [PVC,] Job
--   k8s_job.apply(objs, { kubeconfig = path })   -- creates them
--
-- The ConfigMap holds the scenario and the files next to it (.lua
-- libraries, .yaml/.yml/.json data, subfolders too), mounted read-only at
-- /scenario, so `require` finds the libraries as it does locally. The Job
-- runs `kbrun -o /results/<name> /scenario/<file> key=value...` in pod i of
-- N with KBRUN_SHARD_COUNT=N; Kubernetes sets JOB_COMPLETION_INDEX=i, which
-- kb.shard reads. Results go to a PersistentVolumeClaim (an existing one,
-- or one rendered here; ReadWriteMany when pods may land on several
-- nodes) at /results; `kbrun merge /results/<name>/*` combines them.
-- Pods run as a non-root user with a read-only root filesystem, no
-- privilege escalation and no capabilities. docs/scale-out.md.
local fs = require "kb.fs"
local json = require "kb.json"
local yaml = require "kb.yaml"

local M = {}

local format = string.format

M.DEFAULT_IMAGE = "kbrun:latest"
M.USER_ID = 10001 -- the Dockerfile's kbrun user
M.CONFIGMAP_LIMIT = 1000 * 1024 -- the API server refuses objects above 1 MiB

local function usage_error(fmt, ...)
  error(setmetatable({ class = "usage", message = format(fmt, ...) },
    { __tostring = function(e) return e.message end }), 0)
end

--- k8s_job.name(text) -> a DNS-1123 label short enough for pod names
-- (<job>-<index>-<suffix> must stay within 63 characters).
function M.name(text)
  local s = tostring(text):lower():gsub("[^a-z0-9-]", "-"):gsub("%-+", "-")
  s = s:gsub("^[^a-z0-9]+", ""):sub(1, 40):gsub("%-+$", "")
  if s == "" then s = "kbrun" end
  return s
end

local DATA = { lua = true, yaml = true, yml = true, json = true }

-- Files of the scenario's folder worth shipping: relative paths, sorted.
local function scenario_files(dir, rel, out, depth)
  for _, name in ipairs(fs.list(dir)) do
    local path, r = fs.join(dir, name), rel and (rel .. "/" .. name) or name
    local kind = name:sub(1, 1) ~= "." and fs.exists(path)
    if kind == "file" and DATA[name:match("%.(%w+)$") or ""] then
      out[#out + 1] = r
    elseif kind == "dir" and depth < 3 then
      scenario_files(path, r, out, depth + 1)
    end
  end
  return out
end

-- ConfigMap keys may not hold '/': sub/x.lua is stored as sub__x.lua and
-- mapped back to its path by the volume's items.
local function key_of(rel)
  local k = rel:gsub("/", "__")
  if not k:match("^[%w%-_.]+$") then
    usage_error("k8s-job: cannot ship '%s': a ConfigMap key may hold only letters, digits, '-', '_' and '.'", rel)
  end
  return k
end

local function positive_int(v, what)
  local n = math.tointeger(tonumber(v))
  if not n or n < 1 then usage_error("k8s-job: %s wants a positive integer, got '%s'", what, tostring(v)) end
  return n
end

local function quantity(v, what)
  if v == nil then return nil end
  local s = tostring(v)
  if not s:match("^%d+%.?%d*[a-zA-Z]*$") then
    usage_error("k8s-job: %s wants a Kubernetes quantity (like 500m, 2, 1Gi), got '%s'", what, s)
  end
  return s
end

--- k8s_job.render(opts) -> list of objects (ConfigMap, PVC if rendered,
-- Job). opts: scenario (path, required), shards (N, required), image
-- (default M.DEFAULT_IMAGE), name (default: the scenario's file name),
-- namespace, assignments ({"k=v", ...}: the scenario's parameters),
-- params_file (YAML, shipped in the ConfigMap), seed, parallelism
-- (default N), pvc (an existing claim) or pvc_size (render a claim
-- <name>-results of that size, access mode ReadWriteMany, storage_class
-- optional), cpu and memory (requests = limits), service_account,
-- deadline (activeDeadlineSeconds), ttl (ttlSecondsAfterFinished),
-- labels (extra, on every object). Raises class "usage" on bad options.
function M.render(opts)
  if type(opts) ~= "table" then usage_error("k8s-job: render wants a table of options") end
  local scenario = opts.scenario
  if type(scenario) ~= "string" or fs.exists(scenario) ~= "file" then
    usage_error("k8s-job: cannot read scenario '%s'", tostring(scenario))
  end
  if opts.shards == nil then usage_error("k8s-job: --shards N is required") end
  local shards = positive_int(opts.shards, "--shards")
  local parallelism = opts.parallelism and positive_int(opts.parallelism, "--parallelism") or shards
  if opts.pvc and opts.pvc_size then usage_error("k8s-job: give --pvc CLAIM or --pvc-size SIZE, not both") end
  local file = fs.basename(scenario)
  local name = M.name(opts.name or file:gsub("%.lua$", ""))
  local labels = { ["app.kubernetes.io/name"] = "kbrun", ["app.kubernetes.io/instance"] = name,
    ["kbrun.io/scenario"] = M.name(file:gsub("%.lua$", "")) }
  for k, v in pairs(opts.labels or {}) do labels[k] = tostring(v) end
  local function meta(n)
    return { name = n, namespace = opts.namespace, labels = labels }
  end

  -- The ConfigMap: the scenario, its folder's libraries and data, params.
  local dir = fs.dirname(scenario)
  local data, items, size = {}, {}, 0
  local function ship(rel, path, as)
    local key = key_of(as or rel)
    if data[key] then return end
    local text = fs.read(path)
    if not utf8.len(text) then
      usage_error("k8s-job: '%s' is not UTF-8 text; a ConfigMap's data holds text only", path)
    end
    data[key], size = text, size + #text + #key
    items[#items + 1] = { key = key, path = as or rel }
  end
  ship(file, scenario)
  for _, rel in ipairs(scenario_files(dir, nil, {}, 1)) do ship(rel, fs.join(dir, rel)) end
  local args = { "-o", "/results/" .. name }
  if opts.params_file then
    if fs.exists(opts.params_file) ~= "file" then
      usage_error("k8s-job: cannot read params file '%s'", tostring(opts.params_file))
    end
    ship(nil, opts.params_file, "kbrun-params.yaml")
    args[#args + 1], args[#args + 2] = "-p", "/scenario/kbrun-params.yaml"
  end
  if size > M.CONFIGMAP_LIMIT then
    usage_error("k8s-job: the scenario folder '%s' holds %d KiB of .lua/.yaml/.json, more than a "
      .. "ConfigMap takes (1 MiB): put the scenario and its libraries in a folder of their own", dir, size // 1024)
  end
  if opts.seed ~= nil then
    if not tostring(opts.seed):match("^%d+$") then
      usage_error("k8s-job: --seed wants a non-negative integer, got '%s'", tostring(opts.seed))
    end
    args[#args + 1], args[#args + 2] = "--seed", tostring(opts.seed)
  end
  args[#args + 1] = "/scenario/" .. file
  for _, a in ipairs(opts.assignments or {}) do
    if type(a) ~= "string" or not a:match("^[%a_][%w_.%-]*=") then
      usage_error("k8s-job: '%s' is not a key=value parameter", tostring(a))
    end
    args[#args + 1] = a
  end

  local objects = {}
  objects[1] = { apiVersion = "v1", kind = "ConfigMap", metadata = meta(name .. "-scenario"), data = data }

  local results_volume
  if opts.pvc then
    results_volume = { name = "results", persistentVolumeClaim = { claimName = tostring(opts.pvc) } }
  else
    local claim = name .. "-results"
    objects[#objects + 1] = {
      apiVersion = "v1", kind = "PersistentVolumeClaim", metadata = meta(claim),
      spec = {
        accessModes = json.array({ "ReadWriteMany" }),
        storageClassName = opts.storage_class,
        resources = { requests = { storage = quantity(opts.pvc_size or "1Gi", "--pvc-size") } },
      },
    }
    results_volume = { name = "results", persistentVolumeClaim = { claimName = claim } }
  end

  local resources
  local cpu, memory = quantity(opts.cpu, "--cpu"), quantity(opts.memory, "--memory")
  if cpu or memory then
    local r = { cpu = cpu, memory = memory }
    resources = { requests = r, limits = { cpu = cpu, memory = memory } }
  end

  local container = {
    name = "kbrun",
    image = opts.image or M.DEFAULT_IMAGE,
    imagePullPolicy = "IfNotPresent",
    command = json.array({ "kbrun" }),
    args = json.array(args),
    env = json.array({
      { name = "KBRUN_SHARD_COUNT", value = tostring(shards) },
      { name = "KBRUN_JOB", value = name },
      { name = "HOME", value = "/tmp" },
      -- no results database from the shards: SQLite's locking does not hold
      -- across nodes on a ReadWriteMany volume (NFS); `kbrun merge`
      -- records the merged experiment (docs/results.md)
      { name = "KBRUN_RESULTS_DB", value = "off" },
    }),
    resources = resources,
    securityContext = {
      allowPrivilegeEscalation = false,
      readOnlyRootFilesystem = true,
      runAsNonRoot = true,
      capabilities = { drop = json.array({ "ALL" }) },
    },
    volumeMounts = json.array({
      { name = "scenario", mountPath = "/scenario", readOnly = true },
      { name = "results", mountPath = "/results" },
      { name = "tmp", mountPath = "/tmp" },
    }),
  }
  objects[#objects + 1] = {
    apiVersion = "batch/v1", kind = "Job", metadata = meta(name),
    spec = {
      completionMode = "Indexed",
      completions = shards,
      parallelism = parallelism,
      -- A retried shard would leave a second, partial experiment folder
      -- behind; a failed shard fails the experiment instead.
      backoffLimit = 0,
      activeDeadlineSeconds = opts.deadline and positive_int(opts.deadline, "--deadline") or nil,
      ttlSecondsAfterFinished = opts.ttl and positive_int(opts.ttl, "--ttl") or nil,
      template = {
        metadata = { labels = labels },
        spec = {
          restartPolicy = "Never",
          serviceAccountName = opts.service_account,
          securityContext = {
            runAsNonRoot = true, runAsUser = M.USER_ID, runAsGroup = M.USER_ID, fsGroup = M.USER_ID,
            seccompProfile = { type = "RuntimeDefault" },
          },
          containers = json.array({ container }),
          volumes = json.array({
            { name = "scenario", configMap = { name = name .. "-scenario", items = json.array(items) } },
            results_volume,
            { name = "tmp", emptyDir = {} },
          }),
        },
      },
    },
  }
  return objects
end

--- k8s_job.yaml(objects) -> multi-document YAML text.
function M.yaml(objects)
  return yaml.encode_all(objects)
end

--- k8s_job.apply(objects, opts) -> list of {kind, name, namespace}: creates
-- the objects in order through kb.k8s (kubeconfig from opts.kubeconfig,
-- else $KUBECONFIG or ~/.kube/config; opts.context, opts.namespace). An
-- object that exists already raises kb.k8s's "conflict" error, with a hint.
function M.apply(objects, opts)
  opts = opts or {}
  local k8s = require "kb.k8s"
  local c = k8s.client({ kubeconfig = opts.kubeconfig, context = opts.context, namespace = opts.namespace })
  local done = {}
  for _, obj in ipairs(objects) do
    local ok, created = pcall(c.create, c, obj)
    if not ok then
      local err = created
      if type(err) == "table" and err.class == "conflict" then
        err.message = format("%s: %s %s exists already in namespace %s: delete it (kubectl delete %s %s) "
          .. "or choose another --name", tostring(err.message), obj.kind, obj.metadata.name,
          obj.metadata.namespace or c.namespace, obj.kind:lower(), obj.metadata.name)
      end
      error(err, 0)
    end
    done[#done + 1] = { kind = obj.kind, name = created.metadata and created.metadata.name or obj.metadata.name,
      namespace = created.metadata and created.metadata.namespace or c.namespace }
  end
  return done
end

local USAGE = [[
usage: kbrun k8s-job SCENARIO.lua --shards N [options] [key=value ...]

Renders (or with --apply creates) an Indexed Kubernetes Job that runs the
scenario in N pods, pod i taking shard i/N of the work (kb.shard).

  --shards N            number of pods and shards (required)
  --image IMAGE         kbrun image (default kbrun:latest; see Dockerfile)
  --name NAME           Job name (default: the scenario's file name)
  --namespace NS        namespace of the objects
  --parallelism P       pods running at once (default N)
  --pvc CLAIM           write results to this existing PersistentVolumeClaim
  --pvc-size SIZE       render a claim <name>-results of SIZE (default 1Gi)
  --storage-class SC    storage class of the rendered claim
  --cpu Q, --memory Q   requests and limits of each pod
  --service-account SA  the pods' service account (for in-cluster targets)
  --deadline S          activeDeadlineSeconds
  --ttl S               ttlSecondsAfterFinished
  -p, --params FILE     scenario parameters file (shipped in the ConfigMap)
  --seed N              kbrun --seed in every pod
  --apply               create the objects (kubeconfig: --kubeconfig FILE,
                        else $KUBECONFIG, else ~/.kube/config)
  --context CTX         kubeconfig context for --apply]]
M.USAGE = USAGE

local VALUE_OPTIONS = {
  ["--shards"] = "shards", ["--image"] = "image", ["--name"] = "name", ["--namespace"] = "namespace",
  ["-n"] = "namespace", ["--parallelism"] = "parallelism", ["--pvc"] = "pvc", ["--pvc-size"] = "pvc_size",
  ["--storage-class"] = "storage_class", ["--cpu"] = "cpu", ["--memory"] = "memory",
  ["--service-account"] = "service_account", ["--deadline"] = "deadline", ["--ttl"] = "ttl",
  ["-p"] = "params_file", ["--params"] = "params_file", ["--seed"] = "seed",
  ["--kubeconfig"] = "kubeconfig", ["--context"] = "context",
}

--- k8s_job.parse_args(argv) -> opts (for render and apply; opts.apply,
-- opts.help), or raises class "usage".
function M.parse_args(argv)
  local opts = { assignments = {} }
  local i = 1
  while i <= #argv do
    local a = argv[i]
    local opt, inline = a:match("^(%-%-[%w-]+)=(.*)$")
    opt = opt or a
    if VALUE_OPTIONS[opt] then
      local v = inline
      if v == nil then
        i = i + 1
        v = argv[i]
        if v == nil then usage_error("k8s-job: %s needs a value\n%s", opt, USAGE) end
      end
      opts[VALUE_OPTIONS[opt]] = v
    elseif a == "--apply" then
      opts.apply = true
    elseif a == "-h" or a == "--help" then
      opts.help = true
    elseif a:sub(1, 1) == "-" then
      usage_error("k8s-job: unknown option '%s'\n%s", a, USAGE)
    elseif not opts.scenario then
      opts.scenario = a
    else
      opts.assignments[#opts.assignments + 1] = a
    end
    i = i + 1
  end
  if not opts.help and not opts.scenario then usage_error("%s", USAGE) end
  return opts
end

return M
