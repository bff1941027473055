--- kb.kfp.pipeline_gen: synthetic pipelines of any size, so the number of
-- steps can be a sweep dimension (docs/sweep.md).
--
--   local gen = require "kb.kfp.pipeline_gen"     -- also kb.kfp.pipeline
--   local text, doc = gen.pipeline{ steps = 20, shape = "diamond",
--     cpu = "500m", memory = "256Mi", duration = 60, node_selector = "pool-1" }
--   kb.fs.write(exp:path("config", "pipeline.yaml"), text)
--
-- Options (all optional):
--   steps          number of steps (default 5, at least 1, at most 10,000)
--   shape          "chain" (1 -> 2 -> ... -> N), "fan-out" (1 -> 2..N),
--                  "diamond" (1 -> 2..N-1 -> N; a chain below 3 steps) or
--                  "random" (each step after the first depends on 1 to
--                  `max_deps` earlier steps drawn with `seed`)
--   format         "v1" (an Argo Workflow, what the KFP v1 SDK compiles, the
--                  default) or "v2" (KFP v2 IR, with a platform spec as a
--                  second YAML document when node_selector is set)
--   name           the pipeline's name ("synthetic-<shape>-<steps>")
--   image          the steps' image ("python:3.11-slim")
--   cpu, memory    each step's request (a Kubernetes quantity or a number
--                  of cores / bytes); none by default
--   cpu_limit, memory_limit   limits (default: none)
--   duration       the simulator's step runtime model: seconds (fixed) or
--                  a model string "lognormal:60,90", "uniform:20,40", ...
--                  (annotation sim.kbrun.io/duration; a real cluster runs
--                  `sleep <seconds>` instead: see `command`)
--   node_selector  a pool name (label cloud.google.com/gke-nodepool, or
--                  `pool_label`) or a table of labels
--   seed, max_deps the random shape's seed (1) and fan-in (3)
--   command        the container command (default: sleep the median of
--                  `duration`, so the pipeline also runs on a real cluster)
--
-- Returns the YAML text and the document (v2 with a platform spec: a list
-- of the two documents). Deterministic: the same options give the same
-- bytes.
local yaml = require "kb.yaml"
local json = require "kb.json"

local M = {}

local SHAPES = { chain = true, ["fan-out"] = true, diamond = true, random = true }
M.SHAPES = { "chain", "fan-out", "diamond", "random" }
M.POOL_LABEL = "cloud.google.com/gke-nodepool"
M.MAX_STEPS = 10000

local function bad(fmt, ...)
  error("kb.kfp.pipeline: " .. string.format(fmt, ...), 0)
end

local function array(t) return setmetatable(t, getmetatable(json.array({}))) end

-- splitmix64: a tiny deterministic generator for the random shape.
local function rng(seed)
  local state = math.tointeger(seed) or 1
  return function(n)
    state = state + 0x9E3779B97F4A7C15
    local z = state
    z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ~ (z >> 27)) * 0x94D049BB133111EB
    z = z ~ (z >> 31)
    return (z >> 1) % n + 1
  end
end

--- The dependencies of each step (a list of lists of step indices) for a
-- shape: the DAG the generator emits.
function M.edges(steps, shape, seed, max_deps)
  local deps = {}
  for i = 1, steps do deps[i] = {} end
  if shape == "chain" or (shape == "diamond" and steps < 3) then
    for i = 2, steps do deps[i] = { i - 1 } end
  elseif shape == "fan-out" then
    for i = 2, steps do deps[i] = { 1 } end
  elseif shape == "diamond" then
    local mid = {}
    for i = 2, steps - 1 do
      deps[i] = { 1 }
      mid[#mid + 1] = i
    end
    deps[steps] = mid
  else -- random
    local draw = rng(seed or 1)
    for i = 2, steps do
      local want, seen, list = draw(math.min(max_deps or 3, i - 1)), {}, {}
      for _ = 1, want do
        local d = draw(i - 1)
        if not seen[d] then seen[d], list[#list + 1] = true, d end
      end
      table.sort(list)
      deps[i] = list
    end
  end
  return deps
end

local function quantity(v, what)
  if v == nil then return nil end
  if type(v) == "number" then return tostring(math.tointeger(v) or v) end
  if type(v) ~= "string" or not v:match("^%d+%.?%d*[a-zA-Z]*$") then
    bad("%s must be a Kubernetes quantity (\"500m\", \"1Gi\") or a number, got %s", what, tostring(v))
  end
  return v
end

local function duration_hint(v)
  if v == nil then return nil, 10 end
  if type(v) == "number" then
    if v < 0 or v ~= v then bad("duration must be >= 0 seconds, got %s", tostring(v)) end
    return string.format("fixed:%s", tostring(v)), v
  end
  if type(v) ~= "string" then bad("duration must be seconds or a model string, got %s", type(v)) end
  local kind, a = v:match("^(%a+):%s*([%d%.]+)")
  if not kind then
    local n = tonumber(v)
    if not n then bad("duration %q: want seconds or \"lognormal:p50,p99\", \"uniform:a,b\", \"normal:m,sd\"", v) end
    return v, n
  end
  if kind ~= "fixed" and kind ~= "lognormal" and kind ~= "uniform" and kind ~= "normal" then
    bad("duration %q: unknown model %q (fixed, lognormal, uniform, normal)", v, kind)
  end
  return v, tonumber(a)
end

local function selector_of(opts)
  local ns = opts.node_selector
  if ns == nil or ns == "" then return nil end
  if type(ns) == "string" then return { [opts.pool_label or M.POOL_LABEL] = ns } end
  if type(ns) ~= "table" then bad("node_selector must be a pool name or a table of labels") end
  for k, v in pairs(ns) do
    if type(k) ~= "string" or type(v) ~= "string" then bad("node_selector labels must be strings") end
  end
  return next(ns) and ns or nil
end

local function check(opts)
  if type(opts) ~= "table" then bad("wants a table of options") end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.steps = o.steps or 5
  if math.type(o.steps) ~= "integer" then o.steps = math.tointeger(o.steps) or o.steps end
  if math.type(o.steps) ~= "integer" or o.steps < 1 or o.steps > M.MAX_STEPS then
    bad("steps must be an integer from 1 to %d, got %s", M.MAX_STEPS, tostring(opts.steps))
  end
  o.shape = o.shape or "chain"
  if not SHAPES[o.shape] then
    bad("shape must be one of %s, got %s", table.concat(M.SHAPES, ", "), tostring(o.shape))
  end
  o.format = o.format or "v1"
  if o.format ~= "v1" and o.format ~= "v2" then bad("format must be v1 or v2, got %s", tostring(o.format)) end
  o.name = o.name or string.format("synthetic-%s-%d", o.shape, o.steps)
  if type(o.name) ~= "string" or not o.name:match("^[a-z0-9][a-z0-9-]*$") then
    bad("name must be lower-case letters, digits and '-', got %s", tostring(o.name))
  end
  o.image = o.image or "python:3.11-slim"
  o.cpu, o.memory = quantity(o.cpu, "cpu"), quantity(o.memory, "memory")
  o.cpu_limit, o.memory_limit = quantity(o.cpu_limit, "cpu_limit"), quantity(o.memory_limit, "memory_limit")
  o.hint, o.seconds = duration_hint(o.duration)
  o.selector = selector_of(o)
  o.max_deps = o.max_deps or 3
  return o
end

local function step_name(i) return string.format("step-%d", i) end

local function command_of(o)
  if o.command then return array(o.command) end
  return array({ "sh", "-c", string.format("sleep %s", tostring(o.seconds)) })
end

-- ---- KFP v1: an Argo Workflow ----------------------------------------------------

local function v1(o, deps)
  local tasks, templates = {}, {}
  for i = 1, o.steps do
    local task = { name = step_name(i), template = step_name(i) }
    if #deps[i] > 0 then
      local names = {}
      for j, d in ipairs(deps[i]) do names[j] = step_name(d) end
      task.dependencies = array(names)
    end
    tasks[i] = task
  end
  templates[1] = { name = o.name, dag = { tasks = array(tasks) } }
  for i = 1, o.steps do
    local resources
    if o.cpu or o.memory or o.cpu_limit or o.memory_limit then
      resources = {}
      if o.cpu or o.memory then resources.requests = { cpu = o.cpu, memory = o.memory } end
      if o.cpu_limit or o.memory_limit then resources.limits = { cpu = o.cpu_limit, memory = o.memory_limit } end
    end
    templates[i + 1] = {
      name = step_name(i),
      metadata = o.hint and { annotations = { ["sim.kbrun.io/duration"] = o.hint } } or nil,
      container = { image = o.image, command = command_of(o), resources = resources },
      nodeSelector = o.selector,
    }
  end
  local spec_annotation = json.encode({ name = o.name, description = string.format(
    "synthetic %s pipeline of %d steps (kb.kfp.pipeline)", o.shape, o.steps) })
  return {
    apiVersion = "argoproj.io/v1alpha1",
    kind = "Workflow",
    metadata = {
      generateName = o.name .. "-",
      annotations = { ["pipelines.kubeflow.org/pipeline_spec"] = spec_annotation },
      labels = { ["pipelines.kubeflow.org/kfp_sdk_version"] = "1.8.22" },
    },
    spec = {
      entrypoint = o.name,
      serviceAccountName = "pipeline-runner",
      templates = array(templates),
    },
  }
end

-- ---- KFP v2: pipeline IR (+ platform spec) ---------------------------------------

local function v2(o, deps)
  local components, executors, tasks, platform = {}, {}, {}, {}
  for i = 1, o.steps do
    local name = step_name(i)
    components["comp-" .. name] = { executorLabel = "exec-" .. name }
    local resources
    if o.cpu or o.memory or o.cpu_limit or o.memory_limit then
      resources = { resourceCpuRequest = o.cpu, resourceMemoryRequest = o.memory,
        resourceCpuLimit = o.cpu_limit, resourceMemoryLimit = o.memory_limit }
    end
    executors["exec-" .. name] = { container = { image = o.image, command = command_of(o), resources = resources } }
    local task = { componentRef = { name = "comp-" .. name }, taskInfo = { name = name },
      cachingOptions = { enableCache = false } }
    if #deps[i] > 0 then
      local names = {}
      for j, d in ipairs(deps[i]) do names[j] = step_name(d) end
      task.dependentTasks = array(names)
    end
    tasks[name] = task
    if o.selector or o.hint then
      platform["exec-" .. name] = {
        nodeSelector = o.selector and { labels = o.selector } or nil,
        podMetadata = o.hint and { annotations = { ["sim.kbrun.io/duration"] = o.hint } } or nil,
      }
    end
  end
  local ir = {
    components = components,
    deploymentSpec = { executors = executors },
    pipelineInfo = { name = o.name },
    root = { dag = { tasks = tasks } },
    schemaVersion = "2.1.0",
    sdkVersion = "kfp-2.13.0",
  }
  if next(platform) == nil then return ir, false end
  return { ir, { platforms = { kubernetes = { deploymentSpec = { executors = platform } } } } }, true
end

--- pipeline(opts) -> YAML text, document(s). See the module comment.
function M.pipeline(opts)
  local o = check(opts)
  local deps = M.edges(o.steps, o.shape, o.seed, o.max_deps)
  if o.format == "v1" then
    local doc = v1(o, deps)
    return yaml.encode(doc), doc
  end
  local doc, multi = v2(o, deps)
  if multi then
    return "# PIPELINE DEFINITION\n# Name: " .. o.name .. "\n" .. yaml.encode_all(doc), doc
  end
  return "# PIPELINE DEFINITION\n# Name: " .. o.name .. "\n" .. yaml.encode(doc), doc
end

return M
