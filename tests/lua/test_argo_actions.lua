-- argo-server's validation, lint and workflow actions against the embedded
-- simulator (fast profile: no overheads, so every time below is the sum of
-- the steps' fixed durations), on the events clock: kb.sleep jumps.
-- Validation words are argo's (workflow/validate); suspend/resume/stop/
-- terminate/retry/resubmit act on the model, checked in the Kubernetes view
-- (pods) and against the durations the model ran.
local kb = require "kb"
local T = require "kb.testing"
local argo = require "kb.argo"
local k8s = require "kb.k8s"
local json = require "kb.json"

local fx = require("k8s_sim").start("argo-actions")
local sim = fx.sim
local c = argo.client { host = sim.url }
local kc = fx.client()
local NS = "default"

local function url(path) return sim.url .. "/api/v1/workflows/" .. NS .. path end

-- A raw call: status and decoded body, errors included.
local function call(method, path, body)
  local r = kb.http.request { method = method, url = url(path),
    body = body and json.encode(body) or nil, headers = { ["Content-Type"] = "application/json" } }
  return r.status, r.body ~= "" and json.decode(r.body) or nil
end

-- n sequential steps of `secs` seconds each (template "work"); opts.exit
-- adds an exit handler step of 10 s.
local function steps_wf(name, n, secs, opts)
  opts = opts or {}
  local seq = {}
  for i = 1, n do seq[i] = { { name = "s" .. i, template = "work" } } end
  local templates = {
    { name = "main", steps = seq },
    { name = "work", metadata = { annotations = { ["sim.kbrun.io/duration"] = "fixed:" .. secs } },
      container = { image = "busybox:1.36", resources = opts.resources } },
  }
  local spec = { entrypoint = "main", templates = templates }
  if opts.exit then
    spec.onExit = "bye"
    templates[#templates + 1] = { name = "bye",
      metadata = { annotations = { ["sim.kbrun.io/duration"] = "fixed:10" } },
      container = { image = "busybox:1.36" } }
  end
  return { metadata = { name = name, labels = { suite = "actions" } }, spec = spec }
end

local function pods_of(name)
  local l = kc:list("pods", { label_selector = "workflows.argoproj.io/workflow=" .. name })
  local by_phase, n = {}, 0
  for _, p in ipairs(l.items) do
    by_phase[p.status.phase] = (by_phase[p.status.phase] or 0) + 1
    n = n + 1
  end
  return n, by_phase, l.items
end

-- RFC 3339 "2024-01-01T00:01:37Z" to seconds (UTC, whole seconds).
local function secs(ts)
  local y, mo, d, h, mi, s = ts:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)Z$")
  return os.time { year = y, month = mo, day = d, hour = h, min = mi, sec = s }
end

local function get(name) return select(2, call("GET", "/" .. name)) end

T.case("create and lint refuse a cycle and a missing entrypoint in argo's words", function()
  local cyc = { metadata = { name = "cyc" }, spec = { entrypoint = "main", templates = {
    { name = "main", dag = { tasks = {
      { name = "a", template = "w", dependencies = { "b" } },
      { name = "b", template = "w", depends = "a.Succeeded" } } } },
    { name = "w", container = { image = "busybox" } } } } }
  local st, body = call("POST", "", { workflow = cyc })
  T.eq(st, 400)
  T.eq(body.code, 3, "InvalidArgument")
  T.eq(body.message, "templates.main sorting failed: graph with cycle")
  st, body = call("POST", "/lint", { workflow = cyc })
  T.eq(st, 400)
  T.eq(body.message, "templates.main sorting failed: graph with cycle")

  local noentry = { metadata = { name = "noentry" }, spec = { entrypoint = "nope", templates = {
    { name = "w", container = { image = "busybox" } } } } }
  st, body = call("POST", "", { workflow = noentry })
  T.eq(st, 400)
  T.eq(body.code, 3)
  T.eq(body.message, "template name 'nope' undefined")
  st, body = call("POST", "/lint", { workflow = noentry })
  T.eq(st, 400)
  T.eq(body.message, "template name 'nope' undefined")
  noentry.spec.entrypoint = nil
  T.eq(select(2, call("POST", "", { workflow = noentry })).message, "spec.entrypoint is required")

  -- a cycle in a template the entrypoint does not reach: argo prefixes it
  local side = json.decode(json.encode(cyc))
  side.metadata.name = "side"
  side.spec.entrypoint = "w"
  T.eq(select(2, call("POST", "", { workflow = side })).message,
    "templates.main templates.main sorting failed: graph with cycle")
  local unknown = json.decode(json.encode(cyc))
  unknown.spec.templates[1].dag.tasks[1].dependencies = { "zz" }
  T.eq(select(2, call("POST", "/lint", { workflow = unknown })).message,
    "templates.main sorting failed: invalid dependency zz")

  -- a WorkflowTemplate is checked the same way (its entrypoint may be empty)
  local WT = sim.url .. "/api/v1/workflow-templates/" .. NS
  local tcyc = json.decode(json.encode(cyc))
  tcyc.metadata.name, tcyc.spec.entrypoint = "tcyc", nil
  local ts, tb = kb.http.post(WT, json.encode { template = tcyc }), nil
  tb = json.decode(ts.body)
  T.eq(ts.status, 400)
  T.eq(tb.message, "templates.main templates.main sorting failed: graph with cycle")
  local ok = json.decode(json.encode(steps_wf("tok", 1, 5)))
  ok.spec.entrypoint = nil
  T.eq(kb.http.post(WT, json.encode { template = ok }).status, 200)

  -- none of them was stored; a valid lint answers the workflow, stores nothing
  local l = c:list {}
  for _, w in ipairs(l.items) do
    T.ok(w.name ~= "cyc" and w.name ~= "noentry" and w.name ~= "side", "not created: " .. w.name)
  end
  st, body = call("POST", "/lint", { workflow = steps_wf("linted", 1, 5) })
  T.eq(st, 200)
  T.eq(body.metadata.name, "linted")
  T.eq(body.metadata.namespace, NS)
  T.eq(call("GET", "/linted"), 404)
end)

T.case("suspend holds new steps, resume completes", function()
  local st = call("POST", "", { workflow = steps_wf("sus", 3, 30) })
  T.eq(st, 200)
  kb.sleep(10) -- s1 running
  local s, wf = call("PUT", "/sus/suspend", { name = "sus", namespace = NS })
  T.eq(s, 200)
  T.eq(wf.spec.suspend, true)
  T.eq(wf.status.phase, "Running")
  kb.sleep(200) -- s1 ends at 30; without the hold s2 and s3 would be done
  local n, phases = pods_of("sus")
  T.eq(n, 1, "no new pod while suspended")
  T.eq(phases.Succeeded, 1, "the running step finished")
  wf = get("sus")
  T.eq(wf.status.phase, "Running")
  T.eq(wf.status.progress, "1/3")
  -- suspending what is done is refused as argo does
  s, wf = call("PUT", "/sus/resume", {})
  T.eq(s, 200)
  T.eq(wf.spec.suspend, nil)
  kb.sleep(59)
  T.eq(get("sus").status.phase, "Running")
  kb.sleep(2)
  wf = get("sus")
  T.eq(wf.status.phase, "Succeeded")
  n, phases = pods_of("sus")
  T.eq(n, 3)
  T.eq(phases.Succeeded, 3)
  local body
  s, body = call("PUT", "/sus/suspend", {})
  T.eq(s, 400)
  T.eq(body.message, "cannot suspend completed workflows")
end)

T.case("terminate stops now: Failed with argo's message, no pod running", function()
  call("POST", "", { workflow = steps_wf("term", 3, 30, { exit = true }) })
  kb.sleep(40) -- s2 running
  local s, wf = call("PUT", "/term/terminate", {})
  T.eq(s, 200)
  T.eq(wf.spec.shutdown, "Terminate")
  T.eq(wf.status.phase, "Failed")
  T.eq(wf.status.message, "Stopped with strategy 'Terminate'")
  kb.sleep(100)
  local n, phases = pods_of("term")
  T.eq(n, 2, "s1 and s2 only: no exit handler")
  T.eq(phases.Running, nil)
  T.eq(phases.Failed, 1)
  local body
  s, body = call("PUT", "/term/terminate", {})
  T.eq(s, 500)
  T.eq(body.message, 'cannot shutdown a completed workflow: workflow: "term", namespace: "default"')
end)

T.case("stop kills the running step, runs the exit handler, ends Failed", function()
  call("POST", "", { workflow = steps_wf("stp", 3, 30, { exit = true }) })
  kb.sleep(40)
  local s, wf = call("PUT", "/stp/stop", {})
  T.eq(s, 200)
  T.eq(wf.spec.shutdown, "Stop")
  kb.sleep(5)
  T.eq(get("stp").status.phase, "Running", "the exit handler runs")
  kb.sleep(10)
  wf = get("stp")
  T.eq(wf.status.phase, "Failed")
  T.eq(wf.status.message, "Stopped with strategy 'Stop'")
  local n, phases = pods_of("stp")
  T.eq(n, 3, "s1, s2 and the exit handler; s3 never started")
  T.eq(phases.Succeeded, 2)
  T.eq(phases.Failed, 1)
end)

T.case("retry re-runs the failed node; resubmit makes a labelled copy", function()
  local admin = sim.url .. "/sim/v1/faults"
  T.eq(kb.http.post(admin, json.encode { step_fail_prob = 1 }).status, 200)
  call("POST", "", { workflow = steps_wf("rt", 1, 20) })
  kb.sleep(30)
  local wf = get("rt")
  T.eq(wf.status.phase, "Failed")
  local _, _, old = pods_of("rt")
  local s, body = call("PUT", "/rt/retry", { restartSuccessful = false })
  T.eq(kb.http.post(admin, json.encode { step_fail_prob = 0 }).status, 200)
  T.eq(s, 200)
  -- it was retried with failures on: fail again, then retry without
  kb.sleep(30)
  T.eq(get("rt").status.phase, "Failed")
  s, body = call("PUT", "/rt/retry", {})
  T.eq(s, 200)
  T.eq(body.status.phase, "Running")
  local n, phases = pods_of("rt")
  T.eq(phases.Failed, nil, "the failed pod was deleted")
  kb.sleep(30)
  wf = get("rt")
  T.eq(wf.status.phase, "Succeeded")
  T.eq(wf.status.progress, "1/1")
  n, phases = pods_of("rt")
  T.eq(n, 1)
  T.eq(phases.Succeeded, 1)
  T.ok(old[1].metadata.uid ~= select(3, pods_of("rt"))[1].metadata.uid, "a new pod")
  s, body = call("PUT", "/rt/retry", {})
  T.eq(s, 400)
  T.eq(body.message, "To retry a succeeded workflow, set the options restartSuccessful and nodeFieldSelector")

  s, body = call("PUT", "/rt/resubmit", { memoized = false })
  T.eq(s, 200)
  T.ok(body.metadata.name:match("^rt%-%w%w%w%w%w$"), body.metadata.name)
  T.eq(body.metadata.labels["workflows.argoproj.io/resubmitted-from-workflow"], "rt")
  T.eq(body.metadata.labels.suite, "actions")
  kb.sleep(30)
  T.eq(get(body.metadata.name).status.phase, "Succeeded")
  s, body = call("PUT", "/rt/set", { nodeFieldSelector = "displayName=s1", phase = "Succeeded" })
  T.eq(s, 500)
  T.contains(body.message, "currently, set only targets suspend nodes")
  s, body = call("PUT", "/rt/set", { phase = "Running" })
  T.eq(s, 400)
  T.eq(body.message, "Running is an invalid phase to set to")
  T.eq(call("PUT", "/nope/suspend", {}), 404)

  -- a workflow the model cannot run ends in Error; retried, it is loaded
  -- again and ends the same way (not left Running)
  local res = { metadata = { name = "res" }, spec = { entrypoint = "main", templates = {
    { name = "main", resource = { action = "create", manifest = "{}" } } } } }
  T.eq(call("POST", "", { workflow = res }), 200)
  kb.sleep(1)
  local msg = get("res").status.message
  T.eq(get("res").status.phase, "Error")
  T.contains(msg, "unsupported template type")
  T.eq(call("PUT", "/res/retry", {}), 200)
  kb.sleep(1)
  T.eq(get("res").status.phase, "Error")
  T.eq(get("res").status.message, msg)
end)

T.case("fields= keeps or drops the paths asked", function()
  call("POST", "", { workflow = steps_wf("fld", 1, 5) })
  kb.sleep(10)
  local r = kb.http.get(url(""), { query = { fields = "items.metadata.name,items.status.phase",
    ["listOptions.labelSelector"] = "suite=actions" } })
  local l = json.decode(r.body)
  T.ok(#l.items >= 1, "items")
  for _, w in ipairs(l.items) do
    local keys = {}
    for k in pairs(w) do keys[#keys + 1] = k end
    table.sort(keys)
    T.same(keys, { "metadata", "status" })
    T.same(w.metadata, { name = w.metadata.name })
    T.same(w.status, { phase = w.status.phase })
  end
  T.eq(l.metadata, nil, "the list's own metadata is not asked for")
  local one = json.decode(kb.http.get(url("/fld"), { query = { fields = "-status,metadata.managedFields" } }).body)
  T.eq(one.status, nil)
  T.eq(one.metadata.name, "fld")
  T.eq(one.spec.entrypoint, "main")
  -- the event stream takes argo's "result.object." paths
  local ev = kb.http.get(sim.url .. "/api/v1/workflow-events/" .. NS, { query = {
    ["listOptions.fieldSelector"] = "metadata.name=fld", ["listOptions.timeoutSeconds"] = 1,
    fields = "result.object.metadata.name,result.object.status.phase" } })
  T.eq(ev.status, 200)
  local n = 0
  for line in ev.body:gmatch("[^\n]+") do
    local m = json.decode(line).result
    T.eq(m.type, "ADDED")
    T.same(m.object, { metadata = { name = "fld" }, status = { phase = "Succeeded" } })
    n = n + 1
  end
  T.eq(n, 1)
end)

T.case("resourcesDuration, conditions and the pods' completed label follow the model", function()
  local res = { requests = { cpu = "500m", memory = "1Gi" } }
  call("POST", "", { workflow = steps_wf("rd", 2, 37, { resources = res }) })
  kb.sleep(40)
  local wf = get("rd")
  local conds = {}
  for _, cd in ipairs(wf.status.conditions) do conds[cd.type] = cd.status end
  T.eq(conds.PodRunning, "True")
  T.eq(conds.Completed, nil)
  kb.sleep(40)
  wf = get("rd")
  T.eq(wf.status.phase, "Succeeded")
  conds = {}
  for _, cd in ipairs(wf.status.conditions) do conds[cd.type] = cd.status end
  T.eq(conds.PodRunning, "False")
  T.eq(conds.Completed, "True")
  -- per pod, argo's formula: per container (wait: 100m/100Mi defaults,
  -- main: the requests) quantity x run seconds / unit (1 cpu, 100Mi)
  local n, _, pods = pods_of("rd")
  T.eq(n, 2)
  local cpu, mem = 0, 0
  for _, p in ipairs(pods) do
    T.eq(p.metadata.labels["workflows.argoproj.io/completed"], "true")
    local t = p.status.containerStatuses[1].state.terminated
    local age = secs(t.finishedAt) - secs(t.startedAt)
    T.eq(age, 37, "the model's step duration")
    cpu = cpu + (100 * age // 1000) + (500 * age // 1000)
    mem = mem + age + (1024 * age // 100)
  end
  T.eq(wf.status.resourcesDuration.cpu, cpu)
  T.eq(wf.status.resourcesDuration.memory, mem)
  T.eq(cpu, 2 * (3 + 18))
  T.eq(mem, 2 * (37 + 378))
  local node_cpu = 0
  for _, node in pairs(wf.status.nodes) do
    if node.type == "Pod" then node_cpu = node_cpu + node.resourcesDuration.cpu end
  end
  T.eq(node_cpu, cpu)
end)

-- s1 (10 s), a suspend step, s2 (10 s); duration: the suspend's, or none.
local function gated_wf(name, duration)
  return { metadata = { name = name, labels = { suite = "actions" } }, spec = { entrypoint = "main",
    templates = {
      { name = "main", steps = { { { name = "s1", template = "work" } }, { { name = "approve", template = "gate" } },
        { { name = "s2", template = "work" } } } },
      { name = "gate", suspend = { duration = duration } },
      { name = "work", metadata = { annotations = { ["sim.kbrun.io/duration"] = "fixed:10" } },
        container = { image = "busybox:1.36" } } } } }
end

local function node_named(wf, display)
  for _, n in pairs(wf.status.nodes) do if n.displayName == display then return n end end
end

T.case("suspend templates wait; set, resume and stop by node end them", function()
  call("POST", "", { workflow = gated_wf("gate") })
  kb.sleep(60)
  local wf = get("gate")
  T.eq(wf.status.phase, "Running")
  local gate = node_named(wf, "approve")
  T.eq(gate.type, "Suspend")
  T.eq(gate.phase, "Running")
  T.eq(wf.status.progress, "1/2", "pods only")
  T.eq((pods_of("gate")), 1, "s2 waits for the gate")
  local s, body = call("PUT", "/gate/set", { nodeFieldSelector = "displayName=nope", phase = "Succeeded" })
  T.eq(s, 500)
  T.eq(body.message, "currently, set only targets suspend nodes: no suspend nodes matching nodeFieldSelector: displayName=nope")
  s, body = call("PUT", "/gate/set", { nodeFieldSelector = "displayName=approve", phase = "Succeeded", message = "ok" })
  T.eq(s, 200)
  T.eq(node_named(body, "approve").phase, "Succeeded")
  kb.sleep(5)
  T.eq((pods_of("gate")), 2, "s2 started")
  kb.sleep(10)
  wf = get("gate")
  T.eq(wf.status.phase, "Succeeded")
  T.eq(wf.status.progress, "2/2")
  -- a whole-workflow resume ends the suspend node too
  call("POST", "", { workflow = gated_wf("gate2") })
  kb.sleep(30)
  T.eq(call("PUT", "/gate2/resume", {}), 200)
  kb.sleep(15)
  T.eq(get("gate2").status.phase, "Succeeded")
  -- stop by node fails the node, and with it the workflow
  call("POST", "", { workflow = gated_wf("gate3") })
  kb.sleep(30)
  s, body = call("PUT", "/gate3/stop", { nodeFieldSelector = "templateName=gate", message = "no" })
  T.eq(s, 200)
  kb.sleep(5)
  wf = get("gate3")
  T.eq(wf.status.phase, "Failed")
  T.eq(node_named(wf, "approve").phase, "Failed")
  T.eq((pods_of("gate3")), 1, "s2 never ran")
end)

T.case("a suspend with a duration continues by itself", function()
  call("POST", "", { workflow = gated_wf("timed", "20s") })
  kb.sleep(35)
  T.eq((pods_of("timed")), 2, "s2 started after 10 + 20 s")
  kb.sleep(10)
  local wf = get("timed")
  T.eq(wf.status.phase, "Succeeded")
  T.eq(secs(wf.status.finishedAt) - secs(wf.status.startedAt), 40, "10 + 20 + 10 s")
  local gate = node_named(wf, "approve")
  T.eq(secs(gate.finishedAt) - secs(gate.startedAt), 20)
end)

T.case("the archive keeps finished workflows after their deletion", function()
  call("POST", "", { workflow = steps_wf("arch", 2, 5) })
  call("POST", "", { workflow = steps_wf("arch-running", 1, 3600) })
  kb.sleep(15)
  local live = get("arch")
  T.eq(live.status.phase, "Succeeded")
  T.eq(call("DELETE", "/arch"), 200)
  T.eq(call("GET", "/arch"), 404)
  local AR = sim.url .. "/api/v1/archived-workflows"
  local l = json.decode(kb.http.get(AR, { query = { namePrefix = "arch", namespace = NS } }).body)
  T.eq(#l.items, 1, "only the finished one")
  local a = l.items[1]
  T.eq(a.metadata.name, "arch")
  T.eq(a.metadata.uid, live.metadata.uid)
  T.eq(a.status.phase, "Succeeded")
  T.eq(a.status.nodes, nil, "the list leaves the nodes out")
  T.eq(next(a.spec), nil, "an empty spec")
  local whole = json.decode(kb.http.get(AR .. "/" .. live.metadata.uid).body)
  T.eq(whole.spec.entrypoint, "main")
  local pods = 0
  for _, n in pairs(whole.status.nodes) do if n.type == "Pod" then pods = pods + 1 end end
  T.eq(pods, 2)
  T.same(whole.status.resourcesDuration, live.status.resourcesDuration)
  local r = kb.http.put(AR .. "/" .. live.metadata.uid .. "/resubmit", { memoized = false })
  T.eq(r.status, 200)
  local again = json.decode(r.body)
  T.eq(again.metadata.labels["workflows.argoproj.io/resubmitted-from-workflow"], "arch")
  kb.sleep(15)
  T.eq(get(again.metadata.name).status.phase, "Succeeded")
  T.eq(kb.http.delete(AR .. "/" .. live.metadata.uid).status, 200)
  r = kb.http.get(AR .. "/" .. live.metadata.uid)
  T.eq(r.status, 404)
  T.eq(json.decode(r.body).message, "not found")
  l = json.decode(kb.http.get(AR, { query = { namePrefix = "arch" } }).body)
  T.eq(#l.items, 1, "the resubmitted one, finished")
  T.eq(l.items[1].metadata.name, again.metadata.name)
  call("DELETE", "/arch-running")
end)

T.run()
