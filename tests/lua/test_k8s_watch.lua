-- kb.k8s watches over streamed requests, against the embedded simulator:
-- events are observed as they arrive (not when their window ends), windows
-- follow each other without losing or repeating events, a stream cut
-- mid-window (or an error status cut mid-body) resumes, a 410 in the
-- stream re-lists, an error status is raised with the server's message,
-- stop() aborts the open request.
local kb = require "kb"
local T = require "kb.testing"
local k8s = require "kb.k8s"
local metrics = require "kb.metrics"

local fx = require("k8s_sim").start("k8s-watch")
local sim, client = fx.sim, fx.client

local function cm(name, labels)
  return { apiVersion = "v1", kind = "ConfigMap", metadata = { name = name, labels = labels },
    data = { k = "v" } }
end

local function counter(name, labels)
  local m = metrics.get(name, labels)
  return m and m:value() or 0
end

-- Stops a watch and waits until its background task has ended.
local function stop(w)
  w:stop()
  pcall(w.task.wait, w.task)
end

T.case("events are observed as they arrive, far before the window ends", function()
  T.eq(client().watch_window, 300, "the default window")
  -- A long window, so that a tenth of it (0.5 s of real time at x600)
  -- leaves room for a loaded machine; a lag measured in loopback time is
  -- about 0.1 s of virtual time.
  local c = client({ watch_window = 3000 })
  local w = c:watch("configmaps", { label_selector = "set=live" })
  kb.sleep(1) -- well inside the first window
  for i = 1, 5 do
    local t0 = kb.now()
    c:create(cm("live-" .. i, { set = "live" }))
    local ev = w:next()
    T.eq(ev.type .. " " .. ev.object.metadata.name, "ADDED live-" .. i)
    local lag = ev.observed - t0
    T.ok(lag >= 0 and lag < 300, string.format("observed %.3f s after the create (window 3000 s)", lag))
    kb.sleep(10)
  end
  T.eq(counter("k8s.watch.windows", { resource = "configmaps" }), 1, "all in the first window")
  T.eq(kb.http.active(), 1, "the window's request is open")
  stop(w)
  T.eq(kb.http.active(), 0, "stop() aborted it")
  T.eq(w:next(), nil)
end)

T.case("consecutive windows: every event once, in order", function()
  local c = client({ watch_window = 20 })
  local windows0 = counter("k8s.watch.windows", { resource = "configmaps" })
  local w = c:watch("configmaps", { label_selector = "set=windows" })
  local created = {}
  local writer = kb.spawn(function()
    for i = 1, 12 do
      created[i] = kb.now()
      c:create(cm("win-" .. i, { set = "windows" }))
      kb.sleep(9) -- 108 s of writes: several 20 s windows
    end
  end)
  for i = 1, 12 do
    local ev = w:next()
    T.eq(ev.object.metadata.name, "win-" .. i, "event " .. i .. " once, in order")
    T.ok(ev.observed >= created[i], "observed after its create")
  end
  writer:wait()
  T.ok(counter("k8s.watch.windows", { resource = "configmaps" }) - windows0 >= 5, "several windows")
  stop(w)
end)

local function reset_error()
  return setmetatable({ class = "reset", message = "connection reset by test" },
    getmetatable(kb.cancelled))
end

-- A 503 whose body is cut by a reset.
local function cut_503()
  local proxy = { status = 503, headers = {} }
  function proxy.read() error(reset_error(), 0) end
  function proxy.close() end
  return setmetatable(proxy, { __close = proxy.close })
end

-- An http client whose chosen watch streams break after their first event
-- line, as a dropped connection would, or (plan "503") answer a 503 whose
-- body is cut.
local function breaking_http(plan)
  local n = 0
  return {
    request = function(_, o) return kb.http.request(o) end,
    stream = function(_, o)
      if o.query and o.query.watch == "true" then n = n + 1 end
      if plan[n] == "503" then return cut_503() end
      local s = kb.http.stream(o)
      if not (o.query and o.query.watch == "true") then return s end
      if not plan[n] then return s end
      local proxy = { status = s.status, headers = s.headers }
      function proxy.lines()
        local it, passed = s:lines(), false
        return function()
          if passed then error(reset_error(), 0) end
          local line = it(s)
          if line and line:find('"type":"ADDED"', 1, true) then passed = true end
          return line
        end
      end
      function proxy.close() s:close() end
      return setmetatable(proxy, { __close = proxy.close })
    end,
  }
end

T.case("a stream broken mid-window resumes from the last event", function()
  local c = client({ http = breaking_http({ [1] = true, [2] = "503", [3] = true }) })
  local retries0 = counter("k8s.watch.retries", { resource = "configmaps", class = "reset" })
  local w = c:watch("configmaps", { label_selector = "set=broken" })
  local writer = kb.spawn(function()
    for i = 1, 8 do
      c:create(cm("br-" .. i, { set = "broken" }))
      kb.sleep(2)
    end
  end)
  for i = 1, 8 do T.eq(w:next().object.metadata.name, "br-" .. i, "event " .. i .. " once") end
  writer:wait()
  T.eq(counter("k8s.watch.retries", { resource = "configmaps", class = "reset" }) - retries0, 3)
  stop(w)
end)

T.case("an error status is read whole and raised with the server's message", function()
  local c = client()
  -- The simulator refuses this field selector with a 400 Status before
  -- any event; a bad request is not retried.
  local w = c:watch("configmaps", { field_selector = "spec.nope=x", resource_version = "1" })
  local err = T.raises(function() w:next() end)
  T.eq(err.class, "bad_request")
  T.eq(err.status, 400)
  T.eq(err.verb, "watch")
  T.ok(err.server_message and err.server_message ~= "", "the Status message: "
    .. tostring(err.server_message))
  T.eq(kb.http.active(), 0)
end)

T.case("410 Gone in the stream re-lists", function()
  local c = client()
  for i = 1, 3 do c:create(cm("old-" .. i, { set = "old" })) end
  -- More writes than the simulator's watch history, so resourceVersion 1
  -- is gone.
  c:create(cm("churn"))
  local pool = kb.pool(8)
  for i = 1, 4200 do
    pool:spawn(function() c:patch("cm", "churn", { data = { n = tostring(i) } }) end)
  end
  pool:wait()
  local relists0 = counter("k8s.watch.relists", { resource = "configmaps" })
  local w = c:watch("configmaps", { label_selector = "set=old", resource_version = "1" })
  local names = {}
  for _ = 1, 3 do
    local ev = w:next()
    T.eq(ev.type, "ADDED")
    T.eq(ev.relist, true)
    names[#names + 1] = ev.object.metadata.name
  end
  table.sort(names)
  T.eq(table.concat(names, ","), "old-1,old-2,old-3")
  T.eq(counter("k8s.watch.relists", { resource = "configmaps" }) - relists0, 1)
  c:create(cm("old-4", { set = "old" }))
  local ev = w:next()
  T.eq(ev.type .. " " .. ev.object.metadata.name, "ADDED old-4")
  T.eq(ev.relist, nil)
  stop(w)
end)

T.run()
sim:stop()
