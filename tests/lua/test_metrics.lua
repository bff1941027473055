-- kb.metrics: keys, get-or-create semantics, counters and gauges, snapshot,
-- exact merge of snapshots (shards), reset/clear, errors.
local T = require "kb.testing"
local hist = require "kb.hist"
local metrics = require "kb.metrics"

-- Only plain data: what a JSON encoder can write.
local function plain(v, path)
  local t = type(v)
  if t == "table" then
    local mt = getmetatable(v)
    T.ok(mt == nil or mt == getmetatable(require("kb.json").array({})),
      path .. " has a metatable other than the JSON array mark")
    for k, x in pairs(v) do
      T.ok(type(k) == "string" or math.type(k) == "integer", path .. ": key type")
      plain(x, path .. "." .. tostring(k))
    end
  else
    T.ok(t == "string" or t == "number" or t == "boolean", path .. " is a " .. t)
  end
end

T.case("keys", function()
  T.eq(metrics.key("run.create"), "run.create")
  T.eq(metrics.key("run.create", {}), "run.create")
  T.eq(metrics.key("http.request", { status = 200, method = "GET" }),
    "http.request{method=GET,status=200}")
  T.eq(metrics.key("x", { status = 200.0 }), "x{status=200}")
  T.eq(metrics.key("x", { ratio = 0.5, ok = true }), "x{ok=true,ratio=0.5}")
  T.eq(metrics.key("x", { path = "/api/v1:x" }), "x{path=/api/v1:x}")
  T.eq(metrics.key("x", { q = "a b,c=d}" }), 'x{q="a b,c=d}"}')
  T.eq(metrics.key("x", { q = "" }), 'x{q=""}')
  T.raises(function() metrics.key("") end, 'kb.metrics: bad metric name ""')
  T.raises(function() metrics.key(42) end, "kb.metrics: bad metric name number")
  T.raises(function() metrics.key("a b") end, 'bad metric name "a b"')
  T.raises(function() metrics.key("x", "GET") end, "kb.metrics: labels must be a table, got string")
  T.raises(function() metrics.key("x", { [1] = "a" }) end, "kb.metrics: bad label name 1")
  T.raises(function() metrics.key("x", { ["a-b"] = 1 }) end, 'kb.metrics: bad label name "a-b"')
  T.raises(function() metrics.key("x", { v = {} }) end,
    "kb.metrics: label 'v' must be a string, number or boolean, got table")
  T.raises(function() metrics.key("x", { v = 0 / 0 }) end, "kb.metrics: label 'v' is NaN")
end)

T.case("get or create", function()
  metrics.clear()
  local labels = { method = "GET", status = 200 }
  local h = metrics.histogram("http.request", labels)
  T.ok(hist.is(h))
  T.eq(metrics.histogram("http.request", { status = 200, method = "GET" }), h)
  labels.status = 500 -- the registry keeps its own copy
  T.eq(metrics.histogram("http.request", { method = "GET", status = 200 }), h)
  T.ok(metrics.histogram("http.request", labels) ~= h)
  local m, kind = metrics.get("http.request", { method = "GET", status = 200 })
  T.eq(m, h)
  T.eq(kind, "histogram")
  T.eq(metrics.get("nothing"), nil)
  T.raises(function() metrics.counter("http.request", { method = "GET", status = 200 }) end,
    "kb.metrics: http.request{method=GET,status=200} is a histogram, not a counter")
  T.raises(function() metrics.get("") end, "kb.metrics: bad metric name")
  -- layouts
  local g = metrics.histogram("step.duration", nil, { lowest = 1e-3, highest = 86400 })
  T.same(g:layout(), { lowest = 1e-3, highest = 86400, digits = 3 })
  T.eq(metrics.histogram("step.duration", nil, { lowest = 1e-3, highest = 86400 }), g)
  T.eq(metrics.histogram("step.duration"), g)
  T.raises(function() metrics.histogram("step.duration", nil, { digits = 2 }) end,
    "kb.metrics: histogram step.duration already exists with another layout")
end)

T.case("counters and gauges", function()
  metrics.clear()
  local c = metrics.counter("errors", { class = "timeout" })
  T.eq(c:value(), 0)
  T.eq(c:inc(), c)
  c:inc(5)
  c:inc(0.5)
  T.eq(c:value(), 6.5)
  T.eq(metrics.counter("errors", { class = "timeout" }):value(), 6.5)
  T.raises(function() c:inc(-1) end, "kb.metrics: a counter only goes up (inc by -1)")
  T.raises(function() c:inc("x") end, "kb.metrics: counter amount must be a number, got x")
  T.raises(function() c:inc(0 / 0) end, "kb.metrics: counter amount must be a number")
  T.eq(tostring(c), "counter errors{class=timeout} = 6.5")
  local g = metrics.gauge("runs.in_flight")
  g:inc()
  g:inc(3)
  g:dec()
  T.eq(g:value(), 3)
  g:set(-2.5)
  T.eq(g:value(), -2.5)
  g:dec(2)
  T.eq(g:value(), -4.5)
  T.raises(function() g:set("high") end, "kb.metrics: gauge value must be a number, got high")
  T.raises(function() g:set(0 / 0) end, "kb.metrics: gauge value must be a number")
  T.eq(tostring(g), "gauge runs.in_flight = -4.5")
end)

T.case("each and snapshot", function()
  metrics.clear()
  metrics.counter("b.count"):inc(2)
  metrics.gauge("c.gauge"):set(7)
  local h = metrics.histogram("a.latency", { op = "create" })
  h:record(0.25)
  h:record(0.5)
  local keys = {}
  for key, m, e in metrics.each() do
    keys[#keys + 1] = key
    T.eq(e.metric, m)
    T.eq(e.key, key)
  end
  T.same(keys, { "a.latency{op=create}", "b.count", "c.gauge" })
  local only = {}
  for key in metrics.each("counter") do only[#only + 1] = key end
  T.same(only, { "b.count" })

  local snap = metrics.snapshot()
  plain(snap, "snapshot")
  T.eq(snap.version, 1)
  T.eq(#snap.metrics, 3)
  local s = snap.metrics[1]
  T.eq(s.kind, "histogram")
  T.eq(s.name, "a.latency")
  T.same(s.labels, { op = "create" })
  T.eq(s.summary.count, 2)
  T.eq(s.summary.max, 0.5)
  T.eq(hist.decode(s.encoded):encode(), h:encode())
  T.same(snap.metrics[2], { key = "b.count", name = "b.count", labels = {}, kind = "counter", value = 2 })
  T.same(snap.metrics[3], { key = "c.gauge", name = "c.gauge", labels = {}, kind = "gauge", value = 7 })
end)

T.case("merge_snapshot merges shards exactly", function()
  local all = hist.new()
  local slow_all = hist.new { lowest = 1e-3, highest = 86400, digits = 2 }
  local snaps = {}
  for shard = 1, 3 do
    metrics.clear()
    for i = 1, 1000 do
      local v = (i * shard % 997) * 1e-4 + shard * 1e-6
      metrics.histogram("run.create", { status = 200 }):record(v)
      all:record(v)
    end
    local slow = metrics.histogram("run.duration", nil, { lowest = 1e-3, highest = 86400, digits = 2 })
    slow:record(shard * 60)
    slow_all:record(shard * 60)
    metrics.counter("runs", { state = "ok" }):inc(10 * shard)
    metrics.gauge("pods"):set(shard)
    snaps[shard] = metrics.snapshot()
  end
  metrics.clear()
  metrics.counter("runs", { state = "ok" }):inc(1) -- existing values are kept
  for _, s in ipairs(snaps) do metrics.merge_snapshot(s) end
  T.eq(metrics.histogram("run.create", { status = 200 }):encode(), all:encode())
  T.eq(metrics.histogram("run.duration"):encode(), slow_all:encode())
  T.same(metrics.histogram("run.duration"):layout(), slow_all:layout())
  T.eq(metrics.counter("runs", { state = "ok" }):value(), 61)
  T.eq(metrics.gauge("pods"):value(), 6)
  -- merging a registry's own snapshot doubles it
  local before = metrics.histogram("run.create", { status = 200 }):count()
  metrics.merge_snapshot(metrics.snapshot())
  T.eq(metrics.histogram("run.create", { status = 200 }):count(), 2 * before)
end)

T.case("merge_snapshot validates before merging", function()
  metrics.clear()
  metrics.counter("runs"):inc(3)
  metrics.histogram("lat", nil, { digits = 2 })
  local good = { kind = "counter", name = "runs", labels = {}, value = 4 }
  local function check(snap, msg)
    T.raises(function() metrics.merge_snapshot(snap) end, msg)
    T.eq(metrics.counter("runs"):value(), 3, "nothing merged after: " .. msg)
  end
  check(nil, "kb.metrics.merge_snapshot: snapshot must be a table")
  check({ version = 2, metrics = {} }, "kb.metrics.merge_snapshot: unsupported snapshot version 2")
  check({ version = 1 }, "kb.metrics.merge_snapshot: snapshot has no metrics list")
  check({ version = 1, metrics = { good, 5 } }, "kb.metrics.merge_snapshot: metric #2: not a table")
  check({ version = 1, metrics = { good, { kind = "timer", name = "t" } } },
    "metric #2: unknown kind timer")
  check({ version = 1, metrics = { good, { kind = "counter", name = "bad name", value = 1 } } },
    'metric #2: bad metric name "bad name"')
  check({ version = 1, metrics = { good, { kind = "counter", name = "n", value = "1" } } },
    "metric #2: value must be a number")
  check({ version = 1, metrics = { good, { kind = "counter", name = "n", value = -1 } } },
    "metric #2: counter value is negative")
  check({ version = 1, metrics = { good, { kind = "gauge", name = "runs", value = 1 } } },
    "metric #2: runs is a counter here, a gauge in the snapshot")
  check({ version = 1, metrics = { good, { kind = "histogram", name = "h" } } },
    "metric #2: histogram without an encoding")
  check({ version = 1, metrics = { good, { kind = "histogram", name = "h", encoded = "AAAA" } } },
    "metric #2: hist: corrupt histogram encoding: not a kbrun histogram (bad magic)")
  check({ version = 1, metrics = { good, { kind = "histogram", name = "lat", encoded = hist.new():encode() } } },
    "metric #2: histogram lat has another layout here")
  -- two entries of one new key with different layouts in the same snapshot
  check({ version = 1, metrics = {
    good,
    { kind = "histogram", name = "new", encoded = hist.new():encode() },
    { kind = "histogram", name = "new", encoded = hist.new { digits = 2 }:encode() },
  } }, "metric #3: histogram new has another layout here")
  T.eq(metrics.get("new"), nil)
  check({ version = 1, metrics = { good, { kind = "histogram", name = "new", encoded = hist.new():encode() },
    { kind = "counter", name = "new", value = 1 } } }, "metric #3: new is a histogram here, a counter in the snapshot")
  metrics.merge_snapshot({ version = 1, metrics = { good } })
  T.eq(metrics.counter("runs"):value(), 7)
end)

T.case("reset and clear", function()
  metrics.clear()
  local c = metrics.counter("c")
  local g = metrics.gauge("g")
  local h = metrics.histogram("h")
  c:inc(2)
  g:set(3)
  h:record(1)
  metrics.reset()
  T.eq(c:value(), 0)
  T.eq(g:value(), 0)
  T.eq(h:count(), 0)
  T.eq(metrics.counter("c"), c) -- still registered
  c:inc()
  T.eq(metrics.snapshot().metrics[1].value, 1)
  metrics.clear()
  T.eq(#metrics.snapshot().metrics, 0)
  T.ok(metrics.counter("c") ~= c)
end)

T.case("scopes: a task's registry is its scope's, inherited by what it spawns", function()
  local kb = require "kb"
  metrics.clear()
  metrics.counter("calls"):inc(100) -- the root's
  local a, b = metrics.scope("a"), metrics.scope("b")
  T.eq(metrics.current_scope(), nil, "a task starts at the root")
  -- two scopes used by tasks running side by side, each spawning tasks
  -- through kb.spawn, kb.pool and kb.timeout
  local function work(n)
    T.ok(metrics.current_scope() ~= nil, "inside a scope")
    local pool = kb.pool(2)
    for _ = 1, n do
      pool:spawn(function()
        kb.sleep(0)
        metrics.counter("calls"):inc()
        metrics.histogram("lat"):record(n * 0.001)
      end)
    end
    pool:wait()
    kb.spawn(function() metrics.gauge("last"):set(n) end):wait()
    kb.timeout(10, function() kb.sleep(0) metrics.counter("timed"):inc(n) end)
    return metrics.counter("calls"):value()
  end
  local ta = kb.spawn(function() return a:run(work, 3) end)
  local tb = kb.spawn(function() return b:run(work, 5) end)
  T.eq(ta:wait(), 3, "scope a counted its own calls")
  T.eq(tb:wait(), 5, "scope b counted its own calls")
  T.eq(a:get("calls"):value(), 3)
  T.eq(b:get("lat"):count(), 5)
  T.near(a:get("lat"):max(), 0.003, 1e-5, "scope a recorded only its own values")
  T.near(b:get("lat"):min(), 0.005, 1e-5, "scope b recorded only its own values")
  T.eq(a:get("last"):value(), 3)
  T.eq(b:get("timed"):value(), 5)
  T.eq(metrics.counter("calls"):value(), 100, "the root saw none of it")
  T.eq(metrics.get("lat"), nil)
  local names = {}
  for key in a:each() do names[#names + 1] = key end
  T.same(names, { "calls", "last", "lat", "timed" })
  T.eq(#a:snapshot().metrics, 4)
  -- the registry is restored however run ends
  T.raises(function() a:run(error, "boom", 0) end, "boom")
  T.eq(metrics.current_scope(), nil)
  -- closing adds a scope into the registry it was made in, exactly
  a:close()
  b:close()
  a:close() -- idempotent
  T.eq(metrics.counter("calls"):value(), 108)
  T.eq(metrics.histogram("lat"):count(), 8)
  T.eq(metrics.counter("timed"):value(), 8)
  T.eq(metrics.gauge("last"):value(), 8, "gauges add, as in merge_snapshot")
  T.raises(function() a:run(function() end) end, "scope a is closed")
  -- a scope inside a scope adds into its parent
  local outer = metrics.scope("outer")
  outer:run(function()
    local inner = metrics.scope("inner")
    inner:run(function() metrics.counter("deep"):inc(2) end)
    T.eq(metrics.get("deep"), nil, "not yet in the outer scope")
    inner:close()
    T.eq(metrics.counter("deep"):value(), 2, "in the outer scope once closed")
  end)
  T.eq(metrics.get("deep"), nil, "the root has it only when the outer scope closes")
  outer:close()
  T.eq(metrics.counter("deep"):value(), 2)
  metrics.clear()
end)

T.case("scopes and the journal: a scope's measurements reach it when the scope closes", function()
  local kjournal = require "kb.journal"
  local fs = require "kb.fs"
  local dir = fs.tmpdir("kb-metrics-scope")
  local path = fs.join(dir, "j.jsonl")
  local saved = metrics.journal()
  metrics.set_journal(nil)
  metrics.clear()
  local j = kjournal.open(path, { interval = 0 })
  metrics.set_journal(j)
  local s = metrics.scope("cell")
  s:run(function()
    metrics.histogram("op"):record(0.25)
    metrics.counter("n"):inc(3)
  end)
  j:flush()
  local before = kjournal.read(path)
  for _, rec in ipairs(before) do
    T.ok(rec.m ~= "op" and rec.m ~= "n", "nothing of the open scope is journaled: " .. tostring(rec.k))
  end
  s:close()
  metrics.set_journal(nil)
  j:close()
  local replayed = require("kb.results.rebuild").replay(kjournal.read(path))
  local got = {}
  for _, m in ipairs(replayed.metrics.metrics) do got[m.key] = m end
  T.eq(got.n and got.n.value, 3, "the counter, replayed")
  T.eq(got.op and got.op.summary.count, 1, "the histogram, replayed")
  metrics.clear()
  if saved then metrics.set_journal(saved) end
  fs.remove(dir, { recursive = true })
end)

T.case("handles: one table per owner and registry; a scope or clear() gives a fresh one", function()
  local owner, other = {}, {}
  local h = metrics.handles(owner)
  h.lat = metrics.histogram("handles.lat")
  T.ok(metrics.handles(owner) == h, "the same table for the same owner")
  T.ok(metrics.handles(other) ~= h, "another owner's is another table")
  local s = metrics.scope("cell")
  local in_scope = s:run(function()
    local hs = metrics.handles(owner)
    T.eq(hs.lat, nil, "a scope starts empty")
    hs.lat = metrics.histogram("handles.lat")
    hs.lat:record(0.5)
    return hs
  end)
  T.ok(in_scope ~= h, "the scope's table is its own")
  T.eq(h.lat:count(), 0, "the root's histogram did not get the scope's value")
  T.eq(s:get("handles.lat"):count(), 1)
  metrics.clear()
  T.eq(metrics.handles(owner).lat, nil, "after clear(), a kept metric is gone with the registry")
end)

T.run()
