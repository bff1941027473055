-- KFP v2beta1 GetRun's run_details.task_details from the embedded
-- simulator, against ground truth: the run's Workflow and pods in the
-- Kubernetes view of the same simulator (one task per Argo node, the node
-- id as pod_name, the pod's phase and times), and the v2beta1 swagger;
-- v1beta1 GetRun's cached workflow_manifest following the run.
local kb = require "kb"
local T = require "kb.testing"
local kfp = require "kb.kfp"
local k8s = require "kb.k8s"
local openapi = require "kb.openapi"

local SRC = os.getenv("KBRUN_SOURCE_DIR") or ".."
local CHAIN = SRC .. "/tests/data/sim/v1_argo_benchmark_pipeline_10_nodes.yaml" -- 11 steps

local sim = kb.sim.start { profile = "fast", seed = 3, clock = "events" }
local c = kfp.client { host = sim.url }
local kube = k8s.client { server = sim.url }
local spec = openapi.kfp("v2beta1", { strict_response = true })

local STATE_OF_PHASE = { Succeeded = "SUCCEEDED", Failed = "FAILED", Running = "RUNNING", Pending = "PENDING" }

local function by_pod_name(tasks)
  local out = {}
  for _, t in ipairs(tasks) do
    T.ok(out[t.pod_name] == nil, "one task per node: " .. tostring(t.pod_name))
    out[t.pod_name] = t
  end
  return out
end

T.case("a finished run lists one task per workflow node, as its pods ran", function()
  local p = c:upload_pipeline { file = CHAIN, name = "chain-tasks" }
  local r = c:create_run { name = "tasks-1", pipeline_id = p.id }
  r = c:wait_run(r.id, { interval = 5, timeout = 7200 })
  T.eq(r.state, "Succeeded")
  local got = c:request { op = "run.get", path = "/runs/" .. r.id }
  local ok, errs = spec:validate("v2beta1Run", got, "run", { strict = true })
  T.ok(ok, "GetRun with task_details matches the swagger: " .. table.concat(errs or {}, "; "))
  local tasks = got.run_details and got.run_details.task_details
  T.ok(type(tasks) == "table" and #tasks > 0, "task_details are filled")

  local wf = kube:list("workflows.argoproj.io", { all_namespaces = true,
    label_selector = { ["pipeline/runid"] = r.id } }).items[1]
  T.ok(wf, "the run's Workflow is in the Kubernetes view")
  local nodes = 0
  for _ in pairs(wf.status.nodes) do nodes = nodes + 1 end
  T.eq(#tasks, nodes, "one task per node of the workflow")
  local index = by_pod_name(tasks)
  for id, node in pairs(wf.status.nodes) do
    local t = index[id]
    T.ok(t, "node " .. id .. " has its task")
    if t then
      T.eq(t.display_name, node.displayName, id .. ": display name")
      T.eq(t.start_time, node.startedAt, id .. ": start")
      T.eq(t.end_time, node.finishedAt, id .. ": end")
      T.eq(t.state, STATE_OF_PHASE[node.phase], id .. ": state")
      T.eq(t.run_id, r.id)
      local children = {}
      for _, ch in ipairs(t.child_tasks or {}) do children[#children + 1] = ch.pod_name end
      table.sort(children)
      local want = {}
      for _, ch in ipairs(node.children or {}) do want[#want + 1] = ch end
      table.sort(want)
      T.same(children, want, id .. ": children")
    end
  end

  -- every pod the run made is the task of its node, and finished as it did
  local pods = kube:list("pods", { all_namespaces = true,
    label_selector = { ["workflows.argoproj.io/workflow"] = wf.metadata.name } }).items
  T.eq(#pods, 11, "the pipeline's 11 steps ran as pods")
  for _, pod in ipairs(pods) do
    local t = index[pod.metadata.annotations["workflows.argoproj.io/node-id"]]
    T.ok(t, pod.metadata.name .. " is a task")
    if t then
      T.eq(t.state, STATE_OF_PHASE[pod.status.phase], pod.metadata.name .. ": state = pod phase")
      T.ok(kfp.parse_time(t.start_time) <= kfp.parse_time(pod.status.startTime) + 1,
        pod.metadata.name .. ": the task starts by the pod's start")
    end
  end

  local again = c:request { op = "run.get", path = "/runs/" .. r.id }
  local ids = {}
  for _, t in ipairs(tasks) do ids[t.pod_name] = t.task_id end
  for _, t in ipairs(again.run_details.task_details) do
    T.eq(t.task_id, ids[t.pod_name], "task ids are the same on every GetRun")
  end
end)

T.case("v1beta1 GetRun's workflow_manifest follows the run (it is cached per version)", function()
  local v1 = kfp.client { host = sim.url, api = "v1beta1" }
  local p = c:upload_pipeline { file = CHAIN, name = "chain-manifest" }
  local r = c:create_run { name = "manifest-1", pipeline_id = p.id }
  local function manifest()
    local d = v1:request { op = "run.get", path = "/runs/" .. r.id }
    return kb.json.decode(d.pipeline_runtime.workflow_manifest)
  end
  local early = manifest()
  T.ok(early.status.phase ~= "Succeeded", "not finished right after create: " .. tostring(early.status.phase))
  T.same(manifest(), early, "the same manifest while nothing changed")
  c:wait_run(r.id, { interval = 5, timeout = 7200 })
  local late = manifest()
  T.eq(late.status.phase, "Succeeded", "the manifest of the finished run")
  local wf = kube:list("workflows.argoproj.io", { all_namespaces = true,
    label_selector = { ["pipeline/runid"] = r.id } }).items[1]
  T.same(late.status.nodes, wf.status.nodes, "its nodes are the workflow's, as the Kubernetes view has them")
end)

T.case("ListRuns leaves task_details out (GetRun has them)", function()
  local list = c:request { op = "run.list", path = "/runs" }
  T.ok(#list.runs >= 1, "the run of the case before is listed")
  for _, run in ipairs(list.runs) do T.eq(run.run_details, nil, "lists stay small") end
end)

T.run()
sim:stop()
