-- kb.argo against the embedded simulator, through argo-server's REST API
-- and through the CRD path (a kb.k8s client): every operation on both,
-- the same normalised results from both, submit from a WorkflowTemplate
-- with parameters, watch (Running, then Succeeded), logs, wait (success,
-- failure, timeout), errors, credentials.
local kb = require "kb"
local T = require "kb.testing"
local argo = require "kb.argo"
local k8s = require "kb.k8s"
local json = require "kb.json"
local metrics = require "kb.metrics"

local fx = require("k8s_sim").start("argo-client")
local sim, dir, KUBECONFIG = fx.sim, fx.dir, fx.kubeconfig

local PATHS = {
  server = function() return argo.client { host = sim.url, watch_window = 2 } end,
  crd = function() return argo.client { k8s = k8s.client { kubeconfig = KUBECONFIG }, watch_window = 2 } end,
}

-- A workflow of `steps` sequential steps of `duration` (the simulator's
-- model: "fixed:30" seconds), each logging its lines.
local function workflow(name, steps, duration, extra)
  local seq = {}
  for i = 1, steps do seq[i] = { { name = "s" .. i, template = "work" } } end
  local wf = {
    apiVersion = "argoproj.io/v1alpha1", kind = "Workflow",
    metadata = { name = name, labels = { suite = "argo-client" } },
    spec = {
      entrypoint = "main",
      templates = {
        { name = "main", steps = seq },
        { name = "work", metadata = { annotations = { ["sim.kbrun.io/duration"] = duration } },
          container = { image = "busybox:1.36", command = { "sh", "-c", "echo hi" } } },
      },
    },
  }
  for k, v in pairs(extra or {}) do wf.metadata[k] = v end
  return wf
end

local TEMPLATE = [[
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata:
  name: %s
spec:
  entrypoint: main
  arguments:
    parameters:
    - name: msg
      value: hello
  workflowMetadata:
    labels:
      team: bench
  templates:
  - name: main
    steps:
    - - name: one
        template: work
  - name: work
    metadata:
      annotations:
        sim.kbrun.io/duration: "fixed:%d"
        sim.kbrun.io/fail-probability: "%s"
    container:
      image: busybox:1.36
      command: [echo, "{{workflow.parameters.msg}}"]
]]

local function template(name, duration, fail)
  return string.format(TEMPLATE, name, duration or 10, fail or "0")
end

-- The normalised fields without raw (and per-node), to compare paths.
local function comparable(wf)
  local c = {}
  for k, v in pairs(wf) do
    if k ~= "raw" and k ~= "resource_version" then c[k] = v end
  end
  return c
end

local function hist_count(name)
  local h = metrics.get(name)
  return h and h:count() or 0
end

T.case("client options and credentials", function()
  local c = PATHS.server()
  T.eq(c.path, "argo-server")
  T.eq(c.namespace, "default")
  T.eq(c.url, sim.url)
  T.eq(PATHS.crd().path, "crd")
  T.raises(function() argo.client {} end, "give host= (argo-server's URL) or k8s=")
  T.raises(function() argo.client { host = sim.url, colour = 1 } end, "unknown option 'colour'")
  T.raises(function() argo.client { host = "ftp://x" } end, "server must start with https:// or http://")
  T.raises(function() argo.client { k8s = {} } end, "k8s= must be a kb.k8s client")
  T.raises(function() argo.client { k8s = k8s.client { kubeconfig = KUBECONFIG }, token = "t" } end,
    "token= is for host=; give credentials to the kb.k8s client")
  local err = T.raises(function() argo.client { host = "http://10.1.2.3:2746", token = "s3cret-token" } end)
  T.eq(err.class, "security")
  T.contains(err.message, "refusing to send credentials (token) in clear text over http:// to 10.1.2.3")
  T.ok(not err.message:find("s3cret", 1, true), "no token in the error")
  T.ok(argo.client { host = "http://10.1.2.3:2746", token = "t", allow_insecure_credentials = true })
  err = T.raises(function() argo.client { host = sim.url, token_file = kb.fs.join(dir, "none") } end)
  T.eq(err.class, "auth")
  T.contains(err.message, "kb.argo: cannot read token_file '" .. kb.fs.join(dir, "none") .. "'")
  local tf = kb.fs.join(dir, "token")
  kb.fs.write(tf, "")
  err = T.raises(function() argo.client { host = sim.url, token_file = tf } end)
  T.contains(err.message, "token_file '" .. tf .. "' is empty")
  kb.fs.write(tf, "abcd-token\n")
  local tc = argo.client { host = sim.url, token_file = tf }
  T.ok(not tostring(tc):find("abcd", 1, true), "no token in tostring")
  T.ok(not json.encode(tc):find("abcd", 1, true), "no token in the fields")
  T.eq(tc:version().version:sub(1, 2), "v3")
end)

for path, make in pairs(PATHS) do
  local P = path .. ": "

  T.case(P .. "create, get, list, delete, errors", function()
    local c = make()
    local n0 = hist_count("argo.create")
    local wf = c:create(workflow(path .. "-crud", 2, "fixed:20"))
    T.eq(wf.name, path .. "-crud")
    T.eq(wf.namespace, "default")
    T.eq(hist_count("argo.create"), n0 + 1)
    local y = c:create(kb.yaml.encode(workflow("x", 1, "fixed:5")), { generate_name = path .. "-gen-" })
    T.ok(y.name:match("^" .. path .. "%-gen%-"), y.name)
    local got = c:get(wf.name)
    T.eq(got.uid, wf.uid)
    T.eq(got.labels.suite, "argo-client")
    local err = T.raises(function() c:create(workflow(path .. "-crud", 1, "fixed:5")) end)
    T.eq(err.class, "conflict")
    T.eq(err.status, 409)
    T.contains(err.message, "already exists")
    err = T.raises(function() c:get("nope") end)
    T.eq(err.class, "not_found")
    T.eq(err.status, 404)
    T.contains(err.message, 'workflows.argoproj.io "nope" not found')

    local l = c:list { label_selector = { suite = "argo-client" }, field_selector = "metadata.name=" .. wf.name }
    T.eq(#l.items, 1)
    T.eq(l.items[1].name, wf.name)
    local page = c:list { label_selector = "suite=argo-client", limit = 1 }
    T.eq(#page.items, 1)
    T.ok(page.continue, "a continue token")
    local rest = c:list { label_selector = "suite=argo-client", continue = page.continue }
    T.ok(#rest.items >= 1, "the next page")
    T.ok(rest.items[1].name ~= page.items[1].name, "pages differ")
    T.raises(function() c:list { limit = 0 } end, "limit must be a positive integer")

    T.eq(c:delete(wf.name), true)
    T.eq(c:delete(y.name), true)
    T.eq(T.raises(function() c:get(wf.name) end).class, "not_found")
    T.eq(T.raises(function() c:delete(wf.name) end).class, "not_found")
    T.eq(c:delete(wf.name, { ignore_not_found = true }), false)
    T.raises(function() c:get("") end, "kb.argo: get: name must be a non-empty string")
    T.raises(function() c:create(workflow("x", 1, "fixed:1"), { colour = 1 }) end,
      "kb.argo: create: unknown option 'colour'")
  end)

  T.case(P .. "wait for success: phase, progress, times, nodes, logs", function()
    local c = make()
    local wf = c:create(workflow(path .. "-ok", 2, "fixed:30"))
    local done = c:wait(wf.name, { timeout = 3600, interval = 5 })
    T.eq(done.phase, "Succeeded")
    T.eq(done.succeeded, true)
    T.eq(done.finished, true)
    T.eq(done.progress, "2/2")
    T.eq(done.done, 2)
    T.eq(done.total, 2)
    T.ok(done.started_at and done.finished_at, "times")
    T.ok(done.duration >= 60, "two 30 s steps: " .. tostring(done.duration))
    local pods = {}
    for _, n in ipairs(done.nodes) do
      T.ok(n.id and n.name and n.type and n.phase, "node fields")
      if n.type == "Pod" then
        pods[#pods + 1] = n
        T.eq(n.phase, "Succeeded")
        T.eq(n.template_name, "work")
        T.ok(n.finished_at >= n.started_at, "node times")
      end
    end
    T.eq(#pods, 2)
    T.ok(pods[1].started_at <= pods[2].started_at, "nodes sorted by start")
    T.eq(pods[1].display_name, "s1")
    -- pod names as Argo makes them: the pods exist under those names
    local kc = k8s.client { kubeconfig = KUBECONFIG }
    for _, n in ipairs(pods) do
      T.eq(kc:get("pods", n.pod_name).metadata.labels["workflows.argoproj.io/workflow"], wf.name)
    end
    local text, entries = c:logs(wf.name)
    T.contains(text, "step work: running")
    T.contains(text, "step work: done in 30.0s")
    T.eq(#entries, 6, "three lines per pod")
    T.eq(entries[1].pod, pods[1].pod_name < pods[2].pod_name and pods[1].pod_name or pods[2].pod_name)
    local one = c:logs(wf.name, { pod = pods[2].pod_name, grep = "done" })
    T.eq(one, "step work: done in 30.0s\n")
    T.eq(c:logs(wf.name, { grep = "no-such-text" }), "")
    T.eq(T.raises(function() c:logs("nope") end).class, "not_found")
    T.ok(hist_count("argo.logs") >= 1, "argo.logs timed")
  end)

  T.case(P .. "submit from a WorkflowTemplate with parameters", function()
    local c = make()
    local t = c:create_template(template(path .. "-tmpl"))
    T.eq(t.name, path .. "-tmpl")
    T.eq(c:get_template(t.name).uid, t.uid)
    T.ok(#c:list_templates().items >= 1, "listed")
    T.eq(T.raises(function() c:create_template(template(path .. "-tmpl")) end).class, "conflict")
    local wf = c:submit { template = t.name, parameters = { msg = "bye", extra = 1 },
      labels = { run = "r1" } }
    T.ok(wf.name:match("^" .. path .. "%-tmpl%-"), wf.name)
    T.eq(wf.labels["workflows.argoproj.io/workflow-template"], t.name)
    T.eq(wf.labels.team, "bench")
    T.eq(wf.labels.run, "r1")
    local params = {}
    for _, p in ipairs(wf.raw.spec.arguments.parameters) do params[p.name] = p.value end
    T.same(params, { msg = "bye", extra = "1" })
    local named = c:submit { template = t.name, generate_name = path .. "-named-" }
    T.ok(named.name:match("^" .. path .. "%-named%-"), named.name)
    T.eq(c:wait(wf.name, { timeout = 600 }).phase, "Succeeded")
    local err = T.raises(function() c:submit { template = "no-such-template" } end)
    T.eq(err.class, "not_found")
    T.contains(err.message, 'workflowtemplates.argoproj.io "no-such-template" not found')
    T.eq(c:delete_template(t.name), true)
    T.eq(T.raises(function() c:get_template(t.name) end).class, "not_found")
    T.raises(function() c:submit {} end, "kb.argo: submit: template: name must be a non-empty string")
  end)

  T.case(P .. "a failing workflow ends Failed and wait says so", function()
    local c = make()
    c:create_template(template(path .. "-fail", 10, "1"))
    local wf = c:submit { template = path .. "-fail" }
    local done = c:wait(wf.name, { timeout = 600 })
    T.eq(done.phase, "Failed")
    T.eq(done.succeeded, false)
    T.eq(done.finished, true)
    T.ok(done.message, "a message")
    local failed = 0
    for _, n in ipairs(done.nodes) do if n.type == "Pod" and n.phase == "Failed" then failed = failed + 1 end end
    T.eq(failed, 1)
    T.contains(c:logs(wf.name), "ERROR: step work failed")
  end)

  T.case(P .. "wait times out on a long workflow", function()
    local c = make()
    c:create_template(template(path .. "-long", 36000))
    local wf = c:submit { template = path .. "-long" }
    local err = T.raises(function() c:wait(wf.name, { timeout = 60, interval = 10 }) end)
    T.eq(err.class, "timeout")
    T.contains(err.message, "kb.argo: workflow " .. wf.name .. " not finished after 60 s (phase Running")
    T.eq(err.workflow.phase, "Running")
    T.eq(err.workflow.finished, false)
    c:delete(wf.name)
  end)

  T.case(P .. "watch events arrive as they happen, not when the window ends", function()
    local c = make()
    local name = path .. "-live"
    local w <close> = c:watch { name = name, window = 3000 }
    local t0 = kb.now()
    c:create(workflow(name, 1, "fixed:60"))
    local ev = w:next()
    T.eq(ev.workflow.name, name)
    T.ok(ev.observed - t0 < 300, string.format("observed %.1f s after the create, within a 3000 s "
      .. "window", ev.observed - t0))
    w:stop()
    c:delete(name)
  end)

  T.case(P .. "watch sees Running then Succeeded", function()
    local c = make()
    local name = path .. "-watched"
    local w <close> = c:watch { name = name, window = 5 }
    c:create(workflow(name, 2, "fixed:60"))
    local phases, seen = {}, {}
    for _ = 1, 500 do
      local ev = w:next()
      T.ok(ev, "an event")
      T.eq(ev.workflow.name, name)
      T.ok(ev.observed, "observed")
      local ph = ev.workflow.phase
      if ph ~= "" and not seen[ph] then
        seen[ph] = true
        phases[#phases + 1] = ph
      end
      if ev.workflow.finished then break end
    end
    T.ok(seen.Running, "saw Running: " .. table.concat(phases, ","))
    T.eq(phases[#phases], "Succeeded")
    -- a second watch lists first: the finished workflow as ADDED, initial
    local w2 = c:watch { label_selector = { suite = "argo-client" }, field_selector = "metadata.name=" .. name }
    local ev = w2:next()
    T.eq(ev.type, "ADDED")
    T.eq(ev.initial, true)
    T.eq(ev.workflow.phase, "Succeeded")
    c:delete(name)
    ev = w2:next()
    T.eq(ev.type, "DELETED")
    w2:stop()
    T.eq(w2:next(), nil)
  end)
end

T.case("both paths give the same normalised workflow", function()
  local s, k = PATHS.server(), PATHS.crd()
  local wf = s:create(workflow("same-both", 3, "fixed:15"))
  local a = s:wait(wf.name, { timeout = 600 })
  local b = k:get(wf.name)
  T.same(comparable(b), comparable(a))
  T.eq(#a.nodes, 7, "the root, 3 step groups, 3 pods")
  local la, lb = s:logs(wf.name), k:logs(wf.name)
  T.eq(lb, la)
  local follow = k:logs(wf.name, { follow = true, timeout = 60 })
  T.eq(follow, la)
  local ls = s:list { field_selector = "metadata.name=same-both" }
  local lk = k:list { field_selector = "metadata.name=same-both" }
  T.same(comparable(lk.items[1]), comparable(ls.items[1]))
end)

T.case("argo-server errors: unsupported kinds, bad requests, transport", function()
  local c = PATHS.server()
  local err = T.raises(function() c:submit { template = "x", kind = "CronWorkflow" } end)
  T.eq(err.class, "server")
  T.eq(err.status, 501)
  T.contains(err.server_message, "only WorkflowTemplate is supported by the simulator")
  err = T.raises(function() c:submit { template = "x", kind = "Pod" } end)
  T.eq(err.class, "bad_request")
  T.eq(err.code, 3)
  err = T.raises(function() c:create { metadata = { name = "Not_A_Name" }, spec = {} } end)
  T.eq(err.class, "bad_request")
  T.contains(err.message, "argo.create: POST " .. sim.url .. "/api/v1/workflows/default -> HTTP 400")
  T.raises(function() c:create("kind: Pod\n") end, "kb.argo: create: expected kind Workflow, got Pod")
  T.raises(function() c:create("[1, 2") end, "kb.argo: create: the text is not a YAML mapping")
  local k = PATHS.crd()
  T.raises(function() k:submit { template = "x", kind = "CronWorkflow" } end,
    "kb.argo: submit: the CRD path submits kind WorkflowTemplate only, got CronWorkflow")
  local down = argo.client { host = "http://127.0.0.1:1", timeout = 5 }
  err = T.raises(function() down:get("x") end)
  T.eq(err.class, "connect")
  T.eq(err.op, "argo.get")
  T.contains(err.message, "is argo-server reachable?")
  T.ok((metrics.get("argo.errors", { op = "argo.get", class = "connect" }) or { value = function() return 0 end }):value() >= 1,
    "counted in argo.errors")
end)

T.case("simulator: workflow-events honour timeoutSeconds, logs as SSE", function()
  local c = PATHS.server()
  local wf = c:create(workflow("raw-events", 1, "fixed:5"))
  c:wait(wf.name, { timeout = 600 })
  -- 0.05 real seconds: the stream ends by itself with the current state
  local r = kb.http.request { url = sim.url .. "/api/v1/workflow-events/default", timeout = 60,
    query = { ["listOptions.fieldSelector"] = "metadata.name=raw-events",
      ["listOptions.timeoutSeconds"] = "0.05" } }
  T.eq(r.status, 200)
  local ev = json.decode(r.body:match("^[^\n]+"))
  T.eq(ev.result.type, "ADDED")
  T.eq(ev.result.object.status.phase, "Succeeded")
  r = kb.http.request { url = sim.url .. "/api/v1/workflows/default/raw-events/log", timeout = 60,
    headers = { Accept = "text/event-stream" }, query = { grep = "done" } }
  T.eq(r.status, 200)
  T.eq(r.headers["content-type"], "text/event-stream")
  local msg = json.decode(r.body:match("^data: (.-)\n\n$"))
  T.eq(msg.result.content, "step work: done in 5.0s")
  local pod
  for _, n in ipairs(c:get("raw-events").nodes) do if n.type == "Pod" then pod = n.pod_name end end
  T.eq(msg.result.podName, pod)
  local text = c:logs("raw-events", { container = "wait" })
  T.eq(text, "", "no lines from the wait container")
end)

T.run()
