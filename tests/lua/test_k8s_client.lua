-- kb.k8s against the embedded simulator: generic CRUD through discovery,
-- kind names, errors, paging, selectors, patches, apply, logs, watches
-- across windows, after dropped connections and after 410 Gone, and the
-- lifecycle of a Job and its pods.
local kb = require "kb"
local T = require "kb.testing"
local k8s = require "kb.k8s"
local lifecycle = require "kb.k8s.lifecycle"
local metrics = require "kb.metrics"

local fx = require("k8s_sim").start("k8s-client")
local sim, dir, KUBECONFIG, client = fx.sim, fx.dir, fx.kubeconfig, fx.client

local function cm(name, data, labels)
  return { apiVersion = "v1", kind = "ConfigMap",
    metadata = { name = name, labels = labels }, data = data or { k = "v" } }
end

local function hist_count(name, labels)
  local h = metrics.get(name, labels)
  return h and h:count() or 0
end

local function counter(name, labels)
  local m = metrics.get(name, labels)
  return m and m:value() or 0
end

T.case("client from the simulator's kubeconfig", function()
  local c = client()
  T.eq(c.server, sim.url)
  T.eq(c.namespace, "default")
  T.eq(c.context, "kbrun-sim")
  T.contains(tostring(c), "kb.k8s.client " .. sim.url)
  T.eq(c:version().minor, "32")
  T.eq(client({ namespace = "other" }).namespace, "other")
end)

T.case("kinds by kind, plural, singular, short name, group and table", function()
  local c = client()
  for _, name in ipairs({ "ConfigMap", "configmaps", "configmap", "cm" }) do
    local r = c:resource(name)
    T.eq(r.resource, "configmaps", name)
    T.eq(r.prefix, "/api/v1", name)
    T.eq(r.namespaced, true, name)
  end
  T.eq(c:resource("jobs.batch").prefix, "/apis/batch/v1")
  T.eq(c:resource("jobs.v1.batch").kind, "Job")
  T.eq(c:resource("Job").api_version, "batch/v1")
  T.eq(c:resource("TFJob").resource, "tfjobs")
  T.eq(c:resource("wf").kind, "Workflow")
  T.eq(c:resource({ "argoproj.io", "v1alpha1", "workflows" }).kind, "Workflow")
  T.eq(c:resource({ group = "", version = "v1", resource = "nodes" }).namespaced, false)
  local err = T.raises(function() c:resource("frobnicators") end,
    "not_found: kb.k8s: the server has no resource type 'frobnicators' (is its "
      .. "CustomResourceDefinition installed?")
  T.eq(err.class, "not_found")
  T.raises(function() c:resource(42) end, "a kind must be a name")
end)

T.case("create, get, list, update, patch and delete a ConfigMap", function()
  local c = client()
  local created = c:create(cm("crud-a", { a = "1" }))
  T.eq(created.metadata.name, "crud-a")
  T.eq(created.metadata.namespace, "default")
  T.ok(created.metadata.uid, "uid set by the server")
  T.eq(c:get("cm", "crud-a").data.a, "1")
  T.ok(hist_count("k8s.create.configmaps") >= 1, "create timed")
  T.ok(hist_count("k8s.get.configmaps") >= 1, "get timed")

  local got = c:get("ConfigMap", "crud-a")
  got.data.a = "2"
  local updated = c:update(got)
  T.eq(updated.data.a, "2")
  -- The same object again carries a stale resourceVersion.
  local err = T.raises(function() c:update(got) end, "HTTP 409 Conflict")
  T.eq(err.class, "conflict")
  T.eq(err.reason, "Conflict")
  T.eq(err.verb, "update")
  T.eq(err.resource, "configmaps")

  T.eq(c:patch("configmaps", "crud-a", { data = { b = "3" } }).data.b, "3")
  local p = c:patch("configmaps", "crud-a", { { op = "replace", path = "/data/a", value = "4" } },
    { type = "json" })
  T.eq(p.data.a, "4")
  p = c:patch("configmaps", "crud-a", { metadata = { labels = { x = "y" } } }, { type = "strategic" })
  T.eq(p.metadata.labels.x, "y")
  T.eq(p.data.b, "3")
  T.raises(function() c:patch("cm", "crud-a", {}, { type = "yaml" }) end,
    "kb.k8s: patch: type must be \"merge\", \"json\", \"strategic\" or \"apply\", got yaml")
  T.raises(function() c:patch("cm", "crud-a", { op = "add" }, { type = "json" }) end,
    "a json patch is a list of operations")

  local l = c:list("configmaps", { label_selector = { x = "y" } })
  T.eq(#l.items, 1)
  T.eq(l.items[1].metadata.name, "crud-a")
  T.ok(l.metadata.resourceVersion, "list has a resourceVersion")

  c:delete("configmaps", "crud-a", { propagation_policy = "Background" })
  err = T.raises(function() c:get("cm", "crud-a") end,
    "not_found: k8s.get.configmaps: GET " .. sim.url
      .. "/api/v1/namespaces/default/configmaps/crud-a -> HTTP 404 NotFound: configmaps \"crud-a\" not found")
  T.eq(err.status, 404)
  T.eq(c:delete("cm", "crud-a", { ignore_not_found = true }), nil)
  T.raises(function() c:delete("cm", "crud-a") end, "HTTP 404 NotFound")
  T.raises(function() c:delete("cm", "x", { propagation_policy = "Now" }) end,
    "propagation_policy must be \"Background\", \"Foreground\" or \"Orphan\", got Now")
  T.ok(counter("k8s.errors", { verb = "get", resource = "configmaps", class = "not_found" }) >= 1,
    "errors counted by class")
  T.ok(counter("k8s.requests", { verb = "create", resource = "configmaps", status = "201" }) >= 1,
    "requests counted by status")
end)

T.case("AlreadyExists, namespaces, cluster-scoped kinds and option errors", function()
  local c = client()
  c:create(cm("dup"))
  local err = T.raises(function() c:create(cm("dup")) end, "HTTP 409 AlreadyExists")
  T.eq(err.reason, "AlreadyExists")
  c:create({ apiVersion = "v1", kind = "Namespace", metadata = { name = "k8s-test" } })
  local other = c:create(cm("dup"), { namespace = "k8s-test" })
  T.eq(other.metadata.namespace, "k8s-test")
  T.eq(#c:list("cm", { namespace = "k8s-test" }).items, 1)
  local all = c:list("cm", { all_namespaces = true, field_selector = "metadata.name=dup" })
  T.eq(#all.items, 2)
  local nodes = c:list("nodes")
  T.eq(#nodes.items, 6)
  T.ok(c:get("node", nodes.items[1].metadata.name).status, "a node")
  T.raises(function() c:get("cm", "dup", { nope = 1 }) end, "kb.k8s: get: unknown option 'nope'")
  T.raises(function() c:get("cm", "") end, "kb.k8s: get: name must be a non-empty string")
  T.raises(function() c:create("text") end, "kb.k8s: create: takes an object")
  T.raises(function() c:create({ kind = "ConfigMap" }) end, "an object needs apiVersion and kind")
  T.raises(function() c:create({ apiVersion = "nope.io/v1", kind = "Thing", metadata = { name = "a" } }) end,
    "kb.k8s: the server has no kind Thing in nope.io/v1")
  T.raises(function() k8s.client({ kubeconfig = KUBECONFIG, bogus = 1 }) end,
    "kb.k8s.client: unknown option 'bogus'")
  T.raises(function() k8s.client({ kubeconfig = KUBECONFIG, timeout = 0 }) end,
    "kb.k8s.client: timeout must be a number > 0")
end)

T.case("paging: limit and continue, list_all", function()
  local c = client()
  for i = 1, 25 do c:create(cm(string.format("page-%02d", i), nil, { set = "paging" })) end
  local first = c:list("cm", { label_selector = "set=paging", limit = 10 })
  T.eq(#first.items, 10)
  T.ok(type(first.metadata.continue) == "string" and first.metadata.continue ~= "", "continue token")
  local second = c:list("cm", { label_selector = "set=paging", limit = 10,
    continue = first.metadata.continue })
  T.eq(#second.items, 10)
  T.eq(second.items[1].metadata.name, "page-11")
  local pages_before = hist_count("k8s.list.configmaps")
  local all = c:list_all("cm", { label_selector = "set=paging", page_size = 7 })
  T.eq(#all.items, 25)
  T.eq(all.items[25].metadata.name, "page-25")
  T.eq(all.metadata.continue, nil)
  T.eq(hist_count("k8s.list.configmaps") - pages_before, 4, "4 pages of 7")
  T.raises(function() c:list("cm", { limit = 0 }) end, "limit must be a positive integer")
  local err = T.raises(function() c:list_all("cm", { label_selector = "set=paging", page_size = 5,
    max_pages = 2 }) end, "more than 2 pages")
  T.eq(err.class, "limit")
end)

T.case("apply: create, unchanged, configured with a removed field", function()
  local c = client()
  local yaml1 = [[
apiVersion: v1
kind: ConfigMap
metadata: {name: applied, labels: {app: demo}}
data: {a: "1", b: "2"}
---
apiVersion: batch/v1
kind: Job
metadata: {name: applied-job}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox}]
]]
  local r = c:apply(yaml1)
  T.eq(#r, 2)
  T.eq(r[1].action, "created")
  T.eq(r[2].action, "created")
  T.eq(r[2].object.kind, "Job")
  T.ok(r[1].object.metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"],
    "last-applied annotation")
  r = c:apply(yaml1)
  T.eq(r[1].action, "unchanged")
  T.eq(r[2].action, "unchanged")
  r = c:apply([[
apiVersion: v1
kind: ConfigMap
metadata: {name: applied, labels: {app: demo}}
data: {a: "10"}
]])
  T.eq(r[1].action, "configured")
  local live = c:get("cm", "applied")
  T.eq(live.data.a, "10")
  T.eq(live.data.b, nil, "a field no longer applied is removed")
  -- An object table and a list of objects work too.
  T.eq(c:apply(cm("applied-2"))[1].action, "created")
  T.eq(c:apply({ cm("applied-2"), cm("applied-3") })[2].action, "created")
  T.raises(function() c:apply({ { apiVersion = "v1", kind = "ConfigMap", metadata = {} } }) end,
    "every object needs metadata.name")
  T.raises(function() c:apply("a: [") end, "yaml")
end)

-- An http client that drops chosen watch requests after they completed
-- (their events are lost with the body), or cuts a body mid-line, or holds
-- watch requests while `paused`.
local function flaky_http(plan)
  local n = 0
  return {
    request = function(_, o)
      local is_watch = o.query and o.query.watch == "true"
      while is_watch and plan.paused do kb.sleep(0.5) end
      local r = kb.http.request(o)
      if is_watch and r.status == 200 and r.body ~= "" then
        n = n + 1
        local action = plan[n]
        if action == "drop" then
          error(setmetatable({ class = "reset", message = "connection reset by test" },
            getmetatable(kb.cancelled)), 0)
        elseif action == "cut" then
          local cut = r.body:find("\n", 1, true)
          r.body = r.body:sub(1, (cut or #r.body) + 20) -- one event and a piece of the next
        end
      end
      return r
    end,
  }
end

T.case("watch: initial list, events in order across windows, stop", function()
  local c = client()
  c:create(cm("w-0", nil, { set = "watch" }))
  local w = c:watch("configmaps", { label_selector = "set=watch", window = 2 })
  local ev = w:next()
  T.eq(ev.type, "ADDED")
  T.eq(ev.initial, true)
  T.eq(ev.object.metadata.name, "w-0")
  local writer = kb.spawn(function()
    for i = 1, 12 do
      c:create(cm("w-" .. i, nil, { set = "watch" }))
      kb.sleep(1.5) -- spread the writes over several windows
    end
    c:patch("cm", "w-1", { data = { k = "changed" } })
    c:delete("cm", "w-2")
  end)
  local seen = {}
  for e in w:events() do
    seen[#seen + 1] = e.type .. " " .. e.object.metadata.name
    T.ok(e.observed, "observation time")
    if #seen == 14 then break end
  end
  writer:wait()
  T.eq(seen[1], "ADDED w-1")
  T.eq(seen[12], "ADDED w-12")
  T.eq(seen[13], "MODIFIED w-1")
  T.eq(seen[14], "DELETED w-2")
  T.ok(counter("k8s.watch.windows", { resource = "configmaps" }) >= 5, "several windows")
  w:stop()
  T.eq(w:next(), nil)
  T.eq(w:next(), nil)
  T.raises(function() c:watch("cm", { nope = true }) end, "kb.k8s: watch: unknown option 'nope'")
end)

T.case("watch: resumes after dropped connections and a cut stream without losing events", function()
  local plan = { [2] = "drop", [3] = "cut", [5] = "drop", [6] = "drop" }
  local c = client({ http = flaky_http(plan) })
  local w = c:watch("configmaps", { label_selector = "set=flaky", window = 3 })
  local retries0 = counter("k8s.watch.retries", { resource = "configmaps", class = "reset" })
  local writer = kb.spawn(function()
    for i = 1, 20 do
      c:create(cm("f-" .. i, nil, { set = "flaky" }))
      kb.sleep(0.7)
    end
  end)
  local names = {}
  for e in w:events() do
    T.eq(e.type, "ADDED")
    names[#names + 1] = e.object.metadata.name
    if #names == 20 then break end
  end
  writer:wait()
  for i = 1, 20 do T.eq(names[i], "f-" .. i, "event " .. i .. " once, in order") end
  T.eq(counter("k8s.watch.retries", { resource = "configmaps", class = "reset" }) - retries0, 3,
    "three dropped windows")
  T.ok(counter("k8s.watch.retries", { resource = "configmaps", class = "protocol" }) >= 1,
    "the cut stream was retried")
  w:stop()
end)

T.case("watch: 410 Gone re-lists and delivers the difference", function()
  local plan = { paused = false }
  local c = client({ http = flaky_http(plan) })
  c:create(cm("g-1", nil, { set = "gone" }))
  c:create(cm("g-2", nil, { set = "gone" }))
  local w = c:watch("configmaps", { label_selector = "set=gone", window = 2 })
  T.eq(w:next().object.metadata.name, "g-1")
  T.eq(w:next().object.metadata.name, "g-2")
  plan.paused = true
  kb.sleep(5) -- the watch is now held before its next window
  c:patch("cm", "g-1", { data = { k = "new" } })
  c:delete("cm", "g-2")
  c:create(cm("g-3", nil, { set = "gone" }))
  -- More writes than the simulator's watch history (4096 events).
  c:create(cm("filler"))
  local pool = kb.pool(8)
  for i = 1, 4200 do
    pool:spawn(function() c:patch("cm", "filler", { data = { n = tostring(i) } }) end)
  end
  pool:wait()
  local relists0 = counter("k8s.watch.relists", { resource = "configmaps" })
  plan.paused = false
  local got = {}
  for _ = 1, 3 do
    local e = w:next()
    T.eq(e.relist, true)
    got[e.object.metadata.name] = e.type
  end
  T.eq(got["g-1"], "MODIFIED")
  T.eq(got["g-2"], "DELETED")
  T.eq(got["g-3"], "ADDED")
  T.eq(counter("k8s.watch.relists", { resource = "configmaps" }) - relists0, 1)
  -- Later events flow again from the new resourceVersion.
  c:create(cm("g-4", nil, { set = "gone" }))
  local e = w:next()
  T.eq(e.type .. " " .. e.object.metadata.name, "ADDED g-4")
  T.eq(e.relist, nil)
  w:stop()

  -- A watch asked to start at a compacted resourceVersion lists instead.
  local w2 = c:watch("configmaps", { label_selector = "set=gone", resource_version = "1", window = 2 })
  local names = {}
  for _ = 1, 3 do
    local ev = w2:next()
    T.eq(ev.type, "ADDED")
    names[#names + 1] = ev.object.metadata.name
  end
  table.sort(names)
  T.eq(table.concat(names, ","), "g-1,g-3,g-4")
  w2:stop()
end)

local JOB = [[
apiVersion: batch/v1
kind: Job
metadata: {name: %s}
spec:
  template:
    metadata:
      annotations: {sim.kbrun.io/duration: "fixed:30"}
    spec:
      restartPolicy: Never
      containers:
      - {name: main, image: busybox, command: [echo, hi]}
]]

T.case("an Indexed Job: every index runs once to success, failed indexes are retried", function()
  local c = client()
  c:apply [[
apiVersion: batch/v1
kind: Job
metadata: {name: idx}
spec:
  completionMode: Indexed
  completions: 4
  parallelism: 2
  backoffLimit: 50
  template:
    metadata:
      annotations: {sim.kbrun.io/duration: "fixed:20", sim.kbrun.io/fail-probability: "0.4"}
    spec:
      restartPolicy: Never
      containers:
      - {name: main, image: busybox}
]]
  local job
  for _ = 1, 200 do
    job = c:get("Job", "idx")
    if job.status and job.status.completionTime then break end
    kb.sleep(10)
  end
  T.eq(job.status.succeeded, 4)
  T.eq(job.status.completedIndexes, "0-3")
  local KEY = "batch.kubernetes.io/job-completion-index"
  local pods = c:list("pods", { label_selector = { ["job-name"] = "idx" } }).items
  T.eq(#pods, 4 + (job.status.failed or 0), "one pod per attempt")
  local ok_by_index = {}
  for _, pod in ipairs(pods) do
    local i = pod.metadata.labels[KEY]
    T.ok(pod.metadata.name:match("^idx%-" .. i .. "%-%w+$"), pod.metadata.name)
    if pod.status.phase == "Succeeded" then ok_by_index[i] = (ok_by_index[i] or 0) + 1 end
  end
  T.same(ok_by_index, { ["0"] = 1, ["1"] = 1, ["2"] = 1, ["3"] = 1 })
  c:delete("Job", "idx")
end)

T.case("log_stream: a running pod's log lines arrive as they are written", function()
  local c = client()
  c:apply(string.format(JOB:gsub("fixed:30", "fixed:120"), "streamer"))
  local pod
  for _ = 1, 100 do
    local items = c:list("pods", { label_selector = { ["job-name"] = "streamer" } }).items
    pod = items[1]
    if pod and pod.status and pod.status.phase == "Running" then break end
    kb.sleep(5)
  end
  T.eq(pod.status.phase, "Running")
  local s <close> = c:log_stream(pod)
  T.eq(s.status, 200)
  local times, lines = {}, {}
  for line in s:lines() do
    lines[#lines + 1] = line
    times[#times + 1] = kb.now()
  end
  T.ok(#lines >= 2, "several lines: " .. table.concat(lines, " | "))
  T.ok(times[#times] - times[1] > 60, string.format("the first line came %.0f s before the last "
    .. "(the container ran 120 s)", times[#times] - times[1]))
  T.raises(function() c:log_stream(pod, { bogus = 1 }) end, "kb.k8s: log_stream: unknown option 'bogus'")
  c:delete("Job", "streamer")
end)

T.case("lifecycle of a Job and its pods; logs", function()
  local c = client()
  local jobs = lifecycle.track(c, "Job", { field_selector = "metadata.name=life", window = 1 })
  local pods = lifecycle.track(c, "Pod", { label_selector = "job-name=life", window = 1 })
  jobs:created("life")
  c:apply(string.format(JOB, "life"))
  local jr = jobs:wait { count = 1, timeout = 600 }
  local pr = pods:wait { count = 1, timeout = 600 }
  T.eq(#jr, 1)
  T.eq(jr[1].name, "life")
  T.eq(jr[1].outcome, "complete")
  local m = jr[1].milestones
  T.ok(m.started and m.complete, "job milestones")
  -- The upper bounds allow for a loaded machine: at x600 a 10 ms hiccup of
  -- the simulator's loop before the controller reacts is 6 cluster seconds.
  T.ok(m.complete.server >= 30 and m.complete.server <= 40, "complete ~30 s after creation (server)")
  T.ok(m.complete.observed >= 29 and m.complete.observed <= 40, "complete ~30 s (watch)")
  T.eq(pr[1].outcome, "succeeded")
  local pm = pr[1].milestones
  for _, name in ipairs({ "scheduled", "initialized", "running", "ready", "succeeded" }) do
    T.ok(pm[name], "pod milestone " .. name)
  end
  T.eq(pm.failed, nil)
  -- server timestamps have a 1 s resolution: each end may round either way
  T.ok(pm.succeeded.server >= 29 and pm.succeeded.server <= 31, "pod succeeded ~30 s (server)")
  T.eq(hist_count("lifecycle.job.complete", { source = "server" }), 1)
  T.eq(hist_count("lifecycle.job.complete", { source = "watch" }), 1)
  T.eq(hist_count("lifecycle.pod.succeeded", { source = "server" }), 1)
  T.eq(hist_count("lifecycle.pod.scheduled", { source = "watch" }), 1)
  jobs:stop()
  pods:stop()

  local pod = c:list("pods", { label_selector = "job-name=life" }).items[1]
  local text = c:logs(pod)
  T.contains(text, "step job: done in 30.0s")
  T.contains(c:logs(pod.metadata.name, { container = "main", follow = true }), "step job: running")
  T.ok(hist_count("k8s.logs.pods") >= 2, "logs timed")
  T.raises(function() c:logs("nope-pod") end, "HTTP 404")

  -- A tracker that times out says how far it got.
  local t = lifecycle.track(c, "Job", { field_selector = "metadata.name=never", window = 1 })
  local err = T.raises(function() t:wait { count = 1, timeout = 5 } end,
    "kb.k8s.lifecycle: 0 of 1 jobs done after 5 s")
  T.eq(err.class, "timeout")
  t:stop()
  T.raises(function() lifecycle.track(c, "ConfigMap") end,
    "kb.k8s.lifecycle: no built-in milestones for kind ConfigMap")
end)

T.case("lifecycle with custom milestones and existing objects", function()
  local c = client()
  c:create(cm("life-old", { stage = "new" }, { set = "custom" }))
  local t = lifecycle.track(c, "cm", { label_selector = "set=custom", window = 1, name = "stage",
    milestones = {
      half = function(o) return o.data.stage == "half" or o.data.stage == "done" end,
      done = function(o) return o.data.stage == "done" end,
    }, order = { "half", "done" } })
  c:create(cm("life-new", { stage = "new" }, { set = "custom" }))
  kb.sleep(3)
  c:patch("cm", "life-new", { data = { stage = "half" } })
  kb.sleep(3)
  c:patch("cm", "life-new", { data = { stage = "done" } })
  c:patch("cm", "life-old", { data = { stage = "done" } })
  local r = t:wait { count = 1, timeout = 120 }
  T.eq(#r, 1, "the object that existed before is not tracked")
  T.eq(r[1].name, "life-new")
  T.eq(r[1].outcome, "done")
  T.ok(r[1].milestones.half.observed < r[1].milestones.done.observed, "half before done")
  T.eq(r[1].milestones.done.server, nil, "no server time given")
  T.eq(hist_count("lifecycle.stage.done", { source = "watch" }), 1)
  t:stop()
end)

T.case("credentials are refused over plain http to a remote host", function()
  local err = T.raises(function() k8s.client({ server = "http://10.1.2.3:8080", token = "s3cr3t-token" }) end,
    "security: kb.k8s: refusing to send credentials (token) in clear text over http:// to 10.1.2.3")
  T.ok(not tostring(err):find("s3cr3t", 1, true), "the token is not in the message")
  -- Loopback is fine, and so is a remote host without credentials.
  T.eq(k8s.client({ server = sim.url, token = "s3cr3t-token" }):list("nodes").kind, "NodeList")
  T.eq(k8s.client({ server = "http://10.1.2.3:8080" }).server, "http://10.1.2.3:8080")
  local c = k8s.client({ server = "http://10.1.2.3:8080", token = "s3cr3t-token",
    allow_insecure_credentials = true })
  T.ok(not kb.json.encode(setmetatable({}, { __index = c })):find("s3cr3t"), "no secret in fields")
  for k, v in pairs(c) do
    T.ok(not tostring(v):find("s3cr3t", 1, true), "field " .. tostring(k) .. " holds no secret")
  end
end)

T.case("a server that is down: class connect with a hint", function()
  local srv = kb.httpd.listen { handler = function() return 200 end }
  local url = srv.url
  srv:close()
  local c = k8s.client({ server = url, timeout = 60 })
  local err = T.raises(function() c:get({ group = "", version = "v1", resource = "pods",
    namespaced = true }, "x") end, "is the API server reachable? check the kubeconfig's server (" .. url .. ")")
  T.eq(err.class, "connect")
  T.eq(err.verb, "get")
  T.eq(err.resource, "pods")
end)

T.run()
sim:stop()
kb.fs.remove(dir, { recursive = true })
