-- The run journal (output/journal.jsonl) and the results rebuilt from it
-- (kb.journal, kb.metrics.set_journal, kb.results.rebuild, `kbrun report`).
-- Runs kbrun as a child process (KBRUN_BIN, set by ctest).
local kb = require "kb"
local T = require "kb.testing"
local fs = require "kb.fs"
local json = require "kb.json"
local journal = require "kb.journal"
local metrics = require "kb.metrics"
local rebuild = require "kb.results.rebuild"

local BIN = os.getenv("KBRUN_BIN")
local SRC = os.getenv("KBRUN_SOURCE_DIR") or "."

local function kbrun(args, env)
  if not BIN then error("KBRUN_BIN is not set (run through ctest)") end
  local cmd = { BIN }
  for _, a in ipairs(args) do cmd[#cmd + 1] = a end
  return kb.process.run { cmd = cmd, env = env, timeout = 120 }
end

local function only_dir(root)
  local dirs = {}
  for _, name in ipairs(fs.list(root)) do
    if fs.exists(fs.join(root, name)) == "dir" then dirs[#dirs + 1] = fs.join(root, name) end
  end
  T.eq(#dirs, 1, "experiments in " .. root)
  return dirs[1]
end

-- A scenario that uses every kind of measurement.
local SCENARIO = [[
local kb = require "kb"
local m = kb.metrics
return {
  name = "journal_probe",
  params = { n = 500 },
  run = function(p)
    local h = m.histogram("lat", { op = "a" })
    for i = 1, p.n do h:record(i * 1.7e-4) end
    h:record(0); h:record(1e-9); h:record(7200) -- zero, below lowest, saturated
    h:record(0.25, 4)
    m.histogram("lat", { op = "b" }, { lowest = 1e-3, highest = 86400, digits = 2 }):record(12.5)
    m.histogram("corrected"):record_corrected(1.0, 0.1)
    local other = kb.hist.new(); other:record(0.5); other:record(0.75)
    m.histogram("merged"):merge(other)
    local r = m.histogram("was_reset"); r:record(3); r:reset(); r:record(4)
    m.counter("requests", { status = 200 }):inc(3)
    kb.sleep(0.12)                           -- past a flush
    m.counter("requests", { status = 200 }):inc()
    m.gauge("in_flight"):set(7); m.gauge("in_flight"):dec(2)
    local hold = kb.hist.new(); hold:record(9)  -- not registered: not journaled
    return { done = true }
  end,
}
]]

local function metrics_by_key(doc)
  local out = {}
  for _, m in ipairs(doc.metrics.metrics) do out[m.key] = m end
  return out
end

local function same_metrics(live, rebuilt)
  local a, b = metrics_by_key(live), metrics_by_key(rebuilt)
  local n = 0
  for key, m in pairs(a) do
    n = n + 1
    T.ok(b[key], "rebuilt has " .. key)
    T.eq(b[key].kind, m.kind, key .. " kind")
    if m.kind == "histogram" then
      T.eq(b[key].encoded, m.encoded, key .. " encoded")
      T.eq(b[key].summary.count, m.summary.count, key .. " count")
    else
      T.eq(b[key].value, m.value, key .. " value")
    end
  end
  for key in pairs(b) do T.ok(a[key], "live has " .. key) end
  return n
end

local function run_probe(env)
  local work = fs.tmpdir("kb-journal-")
  local file = fs.join(work, "probe.lua")
  fs.write(file, SCENARIO)
  local r = kbrun({ "-q", "-o", fs.join(work, "out"), file }, env)
  T.eq(r.code, 0, "kbrun exit code: " .. r.stderr)
  local dir = only_dir(fs.join(work, "out"))
  return dir, json.decode(fs.read(fs.join(dir, "result", "result.json")))
end

T.case("a rebuilt result.json has the live run's metrics exactly", function()
  for _, env in ipairs({ {}, { KBRUN_JOURNAL_FLUSH_MS = "0" } }) do
    local dir, live = run_probe(env)
    T.eq(rebuild.needed(dir), false, "a finished run needs no rebuild")
    fs.remove(fs.join(dir, "result", "result.json"))
    local needed, why = rebuild.needed(dir)
    T.eq(needed, true)
    T.eq(why, "no result/result.json")
    local html, doc = rebuild.experiment(dir)
    T.eq(html, fs.join(dir, "result", "report.html"))
    T.ok(fs.exists(html) == "file", "report.html written")
    local saved = json.decode(fs.read(fs.join(dir, "result", "result.json")))
    T.eq(same_metrics(live, saved), 7, "metrics compared")
    T.eq(saved.status, "passed", "status from the end record")
    T.eq(saved.experiment_id, live.experiment_id)
    T.eq(saved.seed, live.seed)
    T.eq(saved.params.n, 500)
    T.eq(saved.scenario.name, "journal_probe")
    T.eq(saved.rebuilt.from, "output/journal.jsonl")
    T.eq(saved.rebuilt.skipped, 0)
    T.eq(doc.status, "passed")
    T.eq(metrics_by_key(saved)["requests{status=200}"].value, 4)
    T.eq(metrics_by_key(saved)["in_flight"].value, 5)
    T.eq(metrics_by_key(saved)["lat{op=a}"].summary.count, 507)
    T.eq(metrics_by_key(saved)["was_reset"].summary.count, 1)
  end
end)

T.case("write-through and buffered journals hold the same measurements", function()
  local dir = run_probe({ KBRUN_JOURNAL_FLUSH_MS = "0" })
  local records = journal.read(fs.join(dir, "output", "journal.jsonl"))
  T.eq(records[1].k, "begin")
  T.eq(records[1].flush_ms, 0)
  T.eq(records[#records].k, "end")
  T.eq(records[#records].status, "passed")
  local values = 0
  for _, r in ipairs(records) do
    if r.k == "h" and r.m == "lat{op=a}" then
      values = values + #r.u
      T.eq(#r.u, 1, "write-through: a record per value")
    end
  end
  T.eq(values, 504)
end)

T.case("a journal cut by a kill rebuilds as killed, up to its last whole line", function()
  local dir, live = run_probe({})
  local path = fs.join(dir, "output", "journal.jsonl")
  local text = fs.read(path)
  -- drop the end record and leave half a line, as a SIGKILL mid-write would
  local cut = text:gsub('{"[^\n]*"k":"end"[^\n]*\n$', "")
  T.ok(#cut < #text, "the end record was removed")
  fs.write(path, cut .. '{"k":"h","m":"lat{op=a}","u":[1,2')
  T.eq((rebuild.needed(dir)), true, "journal newer than result.json")
  local _, doc = rebuild.experiment(dir)
  T.eq(doc.status, "killed")
  T.contains(doc.error, "kbrun stopped before writing its results")
  T.eq(doc.rebuilt.skipped, 1)
  T.eq(doc.exit_code, nil)
  same_metrics(live, doc)
end)

T.case("kbrun report rebuilds a storm's runs.csv and latencies.csv", function()
  local work = fs.tmpdir("kb-journal-storm-")
  local r = kbrun({ "-q", "-o", work, "--sim-profile", "fast", fs.join(SRC, "scenarios", "taxi_50runs.lua"),
    "num_runs=4" })
  T.eq(r.code, 0, "taxi exit code: " .. r.stderr)
  local dir = only_dir(work)
  local live = {}
  for _, f in ipairs({ "runs.csv", "latencies.csv", "result.json" }) do
    live[f] = fs.read(fs.join(dir, "result", f))
  end
  local rr = kbrun({ "report", "--rebuild", dir })
  T.eq(rr.code, 0, rr.stderr)
  T.contains(rr.stderr, "rebuilt from output/journal.jsonl (--rebuild; status passed)")
  T.eq(fs.read(fs.join(dir, "result", "runs.csv")), live["runs.csv"], "runs.csv")
  T.eq(fs.read(fs.join(dir, "result", "latencies.csv")), live["latencies.csv"], "latencies.csv")
  local a, b = json.decode(live["result.json"]), json.decode(fs.read(fs.join(dir, "result", "result.json")))
  same_metrics(a, b)
  T.eq(b.result.runs.succeeded, a.result.runs.succeeded)
  T.same(b.result, a.result, "run()'s result, from the journal's end record")
  T.ok(#a.thresholds >= 5, "taxi_50runs judges thresholds")
  T.same(b.thresholds, a.thresholds, "the thresholds, judged again as the run judged them")
  T.contains(fs.read(fs.join(dir, "result", "report.html")), "Last KFP state of each run")

  -- the same journal without what the storm writes at its end: as if killed
  -- after the runs finished
  local path = fs.join(dir, "output", "journal.jsonl")
  local keep = {}
  for line in fs.read(path):gmatch("[^\n]+") do
    if line:find('"event":"storm.runs"', 1, true) or line:find('"event":"finish"', 1, true)
        or line:find('"k":"end"', 1, true) then
      break
    end
    keep[#keep + 1] = line
  end
  fs.write(path, table.concat(keep, "\n") .. "\n")
  fs.remove(fs.join(dir, "result", "result.json"))
  fs.remove(fs.join(dir, "result", "runs.csv"))
  rr = kbrun({ "report", dir })
  T.eq(rr.code, 0, rr.stderr)
  T.contains(rr.stderr, "(no result/result.json; status killed)")
  local killed = json.decode(fs.read(fs.join(dir, "result", "result.json")))
  T.eq(killed.status, "killed")
  T.eq(killed.result.runs.requested, 4)
  T.eq(killed.result.runs.created, 4)
  T.eq(killed.result.runs.succeeded, a.result.runs.succeeded)
  -- judged on what the journal held: the histograms as the live run's
  -- (every call was journaled), the result's fields as the storm rebuilt them
  local by_name = {}
  for _, t in ipairs(a.thresholds) do by_name[t.name .. " " .. t.stat] = t end
  T.eq(#killed.thresholds, #a.thresholds, "a killed storm's thresholds are judged too")
  for _, t in ipairs(killed.thresholds) do
    local l = by_name[t.name .. " " .. t.stat]
    T.ok(l, "live threshold " .. t.name)
    T.eq(t.actual, l.actual, t.name .. " " .. t.stat)
    T.eq(t.passed, l.passed, t.name .. " passed")
  end
  local rows = require("kb.csv").parse(fs.read(fs.join(dir, "result", "runs.csv")), { header = true })
  T.eq(#rows, 4)
  local live_rows = require("kb.csv").parse(live["runs.csv"], { header = true })
  local ids = {}
  for _, row in ipairs(live_rows) do ids[row.id] = row end
  for _, row in ipairs(rows) do
    T.ok(ids[row.id], "run " .. row.id .. " in the live runs.csv")
    T.eq(row.state, ids[row.id].state)
    T.eq(row.duration, ids[row.id].duration)
    T.eq(row.finished_at, ids[row.id].finished_at)
  end
end)

-- A scenario with thresholds of each kind, one failing (exit 99).
local THRESHOLDS = [[
local kb = require "kb"
return {
  name = "threshold_probe",
  thresholds = {
    lat = { p50 = 0.5, p99 = 0.05, max = 2 },     -- p99 (0.1) fails
    ["lat{op=b}"] = { mean = 1 },
    requests = { max = 3, min = 1 },
    never = { p99 = 1, allow_missing = true },
    ["out.rate"] = 0.9,
    ["out.nested.v"] = { min = 2 },
  },
  run = function()
    for i = 1, 100 do kb.metrics.histogram("lat", { op = "a" }):record(i / 1000) end
    kb.metrics.histogram("lat", { op = "b" }):record(0.25)
    kb.metrics.counter("requests"):inc(3)
    return { out = { rate = 0.95, nested = { v = 3 } } }
  end,
}
]]

T.case("a rebuilt result.json judges the run's thresholds as the run did", function()
  local work = fs.tmpdir("kb-journal-thr-")
  local file = fs.join(work, "probe.lua")
  fs.write(file, THRESHOLDS)
  local r = kbrun({ "-q", "-o", fs.join(work, "out"), file })
  T.eq(r.code, 99, "a threshold fails: " .. r.stderr)
  local dir = only_dir(fs.join(work, "out"))
  local live = json.decode(fs.read(fs.join(dir, "result", "result.json")))
  T.eq(live.status, "failed")
  T.eq(#live.thresholds, 9, "every check of the spec")
  local failed = {}
  for _, t in ipairs(live.thresholds) do
    if not t.passed then failed[#failed + 1] = t.name .. " " .. t.stat end
  end
  T.same(failed, { "lat p99" }, "the one failing check")
  fs.remove(fs.join(dir, "result", "result.json"))
  local _, doc = rebuild.experiment(dir)
  local saved = json.decode(fs.read(fs.join(dir, "result", "result.json")))
  T.same(saved.thresholds, live.thresholds, "rebuilt thresholds")
  T.same(saved.result, live.result, "run()'s result")
  T.eq(saved.status, "failed", "the status of the end record")
  T.eq(doc.rebuilt.problems, nil)
  T.contains(fs.read(fs.join(dir, "result", "report.html")), "lat")

  -- killed before its end: no result, so the result's checks have no value
  local path = fs.join(dir, "output", "journal.jsonl")
  fs.write(path, (fs.read(path):gsub('{"[^\n]*"k":"end"[^\n]*\n$', "")))
  _, doc = rebuild.experiment(dir)
  T.eq(doc.status, "killed")
  T.eq(#doc.thresholds, #live.thresholds)
  for i, t in ipairs(doc.thresholds) do
    local l = live.thresholds[i]
    T.eq(t.name .. " " .. t.stat, l.name .. " " .. l.stat)
    if l.kind == "result" then
      T.eq(t.actual, nil, t.name .. ": no result to judge")
      T.eq(t.passed, false, t.name)
    else
      T.eq(t.actual, l.actual, t.name .. " " .. t.stat)
      T.eq(t.passed, l.passed, t.name .. " " .. t.stat .. " passed")
    end
  end
end)

T.case("rebuild errors", function()
  local work = fs.tmpdir("kb-journal-err-")
  T.eq(rebuild.needed(work), false, "no journal: nothing to rebuild")
  T.raises(rebuild.experiment, "kb.results.rebuild: '" .. work .. "' has no journal (output/journal.jsonl)", work)
  fs.mkdir(fs.join(work, "output"))
  fs.write(fs.join(work, "output", "journal.jsonl"), '{"event":"sweep.cell"}\n')
  T.raises(rebuild.experiment, "holds no kbrun run records", work)
  fs.write(fs.join(work, "output", "journal.jsonl"), "")
  T.raises(rebuild.experiment, "holds no kbrun run records", work)
end)

T.case("a replayed journal: orphans and unknown kinds are counted", function()
  local st = rebuild.replay({
    { k = "def", m = "c", name = "c", kind = "counter" },
    { k = "c", m = "c", d = 2, t = 1.5 },
    { k = "c", m = "gone", d = 1 },
    { k = "def", m = "x", name = "x", kind = "summary" },
    { k = "clock", speed = 600 },
    { event = "anything", t = 99 },
  })
  T.eq(st.orphans, 1)
  T.eq(#st.problems, 1)
  T.contains(st.problems[1], "unknown metric kind summary")
  T.eq(st.speed, 600)
  T.eq(st.last_t, 1.5)
  T.eq(#st.events, 1)
  T.eq(st.metrics.metrics[1].value, 2)
  local doc = rebuild.document(st, {})
  T.eq(doc.status, "killed")
  T.same(doc.clock, { kind = "virtual", speed = 600 })
end)

T.case("buffered journal: lines reach the file at flush, one view per path", function()
  local dir = fs.tmpdir("kb-journal-buf-")
  local path = fs.join(dir, "j.jsonl")
  local j = journal.open(path, { interval = 3600 })
  T.eq(j:write_through(), false)
  j:write({ a = 1 })
  T.eq(fs.read(path), "", "nothing written before the flush")
  local hooked = 0
  j:on_flush(function(jj)
    hooked = hooked + 1
    if hooked == 1 then jj:write({ b = 2 }) end
  end)
  j:flush()
  T.eq(fs.read(path), '{"a":1}\n{"b":2}\n')
  T.eq(hooked, 1)
  -- the run journal is shared by whoever opens its path
  local before = journal.active()
  journal.set_active(j)
  local view = journal.open(fs.join(dir, ".", "j.jsonl"))
  view:write({ c = 3 })
  view:close() -- a no-op: the owner closes
  journal.set_active(before)
  j:close()
  T.eq(fs.read(path), '{"a":1}\n{"b":2}\n{"c":3}\n')
  view:write({ d = 4 }) -- dropped once the owner closed it
  T.eq(fs.read(path), '{"a":1}\n{"b":2}\n{"c":3}\n')
  T.raises(j.write, "kb.journal: '" .. path .. "' is closed", j, {})
  T.raises(journal.open, "kb.journal.open: interval must be a number of seconds >= 0, got -1", path, { interval = -1 })
end)

T.case("a flush hook that returns false is dropped; the others run on, in order", function()
  local dir = fs.tmpdir("kb-journal-hooks-")
  local j = journal.open(fs.join(dir, "j.jsonl"), { interval = 3600 })
  local calls = {}
  j:on_flush(function() calls[#calls + 1] = "a" end)
  j:on_flush(function() calls[#calls + 1] = "once" return false end)
  j:on_flush(function() calls[#calls + 1] = "c" end)
  j:flush()
  j:flush()
  T.eq(table.concat(calls, ","), "a,once,c,a,c")
  j:close()
end)

T.case("a storm's buffered latencies.csv: flushed with the journal, written through after finish", function()
  local csv = require "kb.csv"
  local dir = fs.tmpdir("kb-journal-csv-")
  local j = journal.open(fs.join(dir, "j.jsonl"), { interval = 3600 })
  local file = fs.join(dir, "latencies.csv")
  local w = csv.writer(file, { "op", "latency" }, { buffered = true })
  local hooks = #j.hooks
  require("kb.kfp.storm_record").flush_with(j, w) -- the storm's own hook
  w:write({ "run.get", 0.5 })
  T.eq(fs.read(file), "op,latency\n")
  j:flush()
  T.eq(fs.read(file), "op,latency\nrun.get,0.5\n")
  w:write({ "run.get", 0.25 })
  w:set_buffered(false) -- what finish() does
  T.eq(fs.read(file), "op,latency\nrun.get,0.5\nrun.get,0.25\n")
  w:write({ "run.delete", 1 })
  T.eq(fs.read(file), "op,latency\nrun.get,0.5\nrun.get,0.25\nrun.delete,1\n", "at once")
  j:flush()
  T.eq(#j.hooks, hooks, "the hook let go of the writer")
  w:close()
  j:close()
end)

T.case("a bad KBRUN_JOURNAL_FLUSH_MS is refused with a warning", function()
  local work = fs.tmpdir("kb-journal-env-")
  local file = fs.join(work, "s.lua")
  fs.write(file, "return 1")
  local r = kbrun({ "-o", work, file }, { KBRUN_JOURNAL_FLUSH_MS = "soon" })
  T.eq(r.code, 0)
  T.contains(r.stderr, "KBRUN_JOURNAL_FLUSH_MS must be a number of milliseconds >= 0, got 'soon'; using 50")
end)

T.case("this run's own journal records its metrics", function()
  local j = metrics.journal()
  T.ok(j, "kbrun attached a journal")
  local h = metrics.histogram("test.journal.self")
  h:record(0.5)
  j:flush()
  local found = false
  for _, r in ipairs((journal.read(kb.exp:path("output", "journal.jsonl")))) do
    if r.k == "h" and r.m == "test.journal.self" then found = r.u[1] == 500000 end
  end
  T.ok(found, "0.5 s journaled as 500000 units of 1 us")
end)

return T.run()
