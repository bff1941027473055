--- kb.kfp.storm at a rate (kb.kfp.storm_arrivals), end to end through
-- kbrun on the events clock: tests/lua/storm_rate_driver.lua runs the
-- storm and lists the simulator's runs before cleanup (result.truth), the
-- ground truth its counts and time series are checked against.
local kb = require "kb"
local T = require "kb.testing"
local fs = require "kb.fs"
local json = require "kb.json"
local csv = require "kb.csv"

local BIN = assert(os.getenv("KBRUN_BIN"), "run by ctest (KBRUN_BIN)")
local SRC = assert(os.getenv("KBRUN_SOURCE_DIR"), "run by ctest (KBRUN_SOURCE_DIR)")
local DRIVER = fs.join(SRC, "tests", "lua", "storm_rate_driver.lua")
local tmp = fs.tmpdir("kbrun-test-storm-rate")

-- one step of a fixed 30 s: runs finish, the cluster is never the limit
local SHORT = fs.join(tmp, "short.yaml")
fs.write(SHORT, [[
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: short-}
spec:
  entrypoint: main
  templates:
  - name: main
    metadata:
      annotations: {sim.kbrun.io/duration: "fixed:30"}
    container: {image: alpine, command: [sleep, "30"]}
]])

local nrun = 0

-- kbrun [opts] driver args...: the experiment's result.json, its runs.csv
-- rows and its folder.
local function storm(opts, args)
  nrun = nrun + 1
  local out = fs.join(tmp, "out" .. nrun)
  local cmd = { BIN, "-q", "-o", out, "--seed", "3" }
  for _, o in ipairs(opts) do cmd[#cmd + 1] = o end
  cmd[#cmd + 1] = DRIVER
  cmd[#cmd + 1] = "pipeline_file_url=" .. SHORT
  for _, a in ipairs(args) do cmd[#cmd + 1] = a end
  local r = kb.process.run { cmd = cmd, timeout = 300 }
  T.eq(r.code, 0, "kbrun " .. table.concat(args, " ") .. ": " .. r.stderr:sub(-2000))
  local dir
  for _, e in ipairs(fs.list(out)) do if e:find("^storm%-rate%-driver") then dir = fs.join(out, e) end end
  local doc = json.decode(fs.read(fs.join(dir, "result", "result.json")))
  local rows = (csv.parse(fs.read(fs.join(dir, "result", "runs.csv")), { header = true }))
  return doc, rows, dir
end

local function counter_rows(doc, key) return doc.timeseries.counters[key] or {} end

local function sum(rows, field)
  local n = 0
  for _, r in ipairs(rows) do n = n + r[field or "d"] end
  return n
end

local function count_rows(rows, field, value)
  local n = 0
  for _, r in ipairs(rows) do if r[field] == value then n = n + 1 end end
  return n
end

-- The time series add up to the totals, and runs in flight at the end of
-- each interval is what was created minus what finished until then.
local function check_series(doc, rows)
  local r = doc.result
  T.eq(sum(counter_rows(doc, "storm.created")), r.runs.created, "storm.created adds up to runs.created")
  T.eq(r.runs.created, r.truth.listed, "runs created = the simulator's own list")
  local finished, by_outcome = 0, {}
  for key, list in pairs(doc.timeseries.counters) do
    local state = key:match("^storm%.finished{state=\"?([^\"}]*)\"?}$")
    if state then
      by_outcome[state] = sum(list)
      finished = finished + by_outcome[state]
    end
  end
  for o, n in pairs(by_outcome) do T.eq(n, r.outcomes[o], "storm.finished{state=" .. o .. "}") end
  T.eq(finished, r.runs.created, "every created run finished")
  T.eq(sum(counter_rows(doc, "storm.arrivals.dropped")), r.runs.dropped or 0, "dropped adds up")
  T.eq(count_rows(rows, "outcome", "Dropped"), r.runs.dropped or 0, "a runs.csv row per dropped arrival")
  T.eq(sum(counter_rows(doc, "storm.arrivals.started")) + sum(counter_rows(doc, "storm.arrivals.dropped")),
    r.load.offered, "arrivals started + dropped = offered")
  -- in flight: cumulative created - finished at each interval's end
  local gauge = doc.timeseries.gauges["storm.in_flight"]
  T.ok(gauge and #gauge > 0, "storm.in_flight has a series")
  local function upto(list, t)
    local n = 0
    for _, x in ipairs(list) do if x.t <= t then n = n + x.d end end
    return n
  end
  for _, g in ipairs(gauge) do
    local fin = 0
    for key, list in pairs(doc.timeseries.counters) do
      if key:match("^storm%.finished") then fin = fin + upto(list, g.t) end
    end
    T.eq(g.v, upto(counter_rows(doc, "storm.created"), g.t) - fin, "in flight at the end of interval " .. g.t)
  end
  T.eq(gauge[#gauge].v, 0, "nothing in flight at the end")
end

for _, profile in ipairs({ "default", "degraded" }) do
  T.case("2 runs/s for 300 simulated s starts 600 runs on the " .. profile .. " profile", function()
    local doc, rows = storm({ "--sim-profile", profile }, { "arrival_rate=2", "duration=300" })
    local r = doc.result
    T.eq(r.load.offered, 600, "600 arrivals offered")
    T.eq(r.runs.requested, 600)
    T.eq(#rows, 600, "a runs.csv row per arrival")
    local started = r.load.started + r.load.dropped
    T.ok(math.abs(started - 600) <= 30, "created + dropped within 5% of 600: " .. started)
    T.eq(r.runs.created + (r.runs.dropped or 0) + r.runs.not_created, 600, "every arrival accounted for")
    -- each 10 s interval of the window saw its 20 arrivals
    local per = {}
    for _, x in ipairs(counter_rows(doc, "storm.arrivals.started")) do per[x.t] = (per[x.t] or 0) + x.d end
    for _, x in ipairs(counter_rows(doc, "storm.arrivals.dropped")) do per[x.t] = (per[x.t] or 0) + x.d end
    -- every 10 s interval inside the window [start, start + 300) holds 20
    local a0 = r.load.start
    T.ok(a0 > 0 and a0 < 10, "the arrivals begin after the pipeline and experiment: " .. a0)
    for t = 10, 290, 10 do T.eq(per[t], 20, "arrivals in [" .. t .. ", " .. (t + 10) .. ")") end
    T.eq(per[0] + per[300], 20, "the partial intervals at the ends")
    T.ok(math.abs(r.load.achieved_rate * 300 - r.runs.created) < 1e-6, "achieved rate = created / window")
    check_series(doc, rows)
  end)
end

T.case("a cap of 10 creates in flight against a slow CreateRun counts the dropped arrivals", function()
  local cfg = fs.join(tmp, "slow.yaml")
  fs.write(cfg, "profile: fast\nkfp_api:\n  CreateRun: {fixed: 5}\n")
  local doc, rows = storm({ "--sim-config", cfg }, { "arrival_rate=4", "duration=30", "max_in_flight=10" })
  local r = doc.result
  -- 4 a second, each create held 5 s: a wave of 10 every 5 s starts
  T.eq(r.load.offered, 120)
  T.eq(r.runs.created, 60, "10 per 5 s created")
  T.eq(r.runs.dropped, 60, "the rest dropped")
  T.eq(r.outcomes.Dropped, 60)
  T.eq(count_rows(rows, "state", "Dropped"), 60)
  T.ok(r.success_rate <= 0.5, "dropped arrivals count against success: " .. r.success_rate)
  check_series(doc, rows)
end)

T.case("with queueing, a stalling server makes the corrected create latency exceed the raw one", function()
  local cfg = fs.join(tmp, "stall.yaml")
  fs.write(cfg, "profile: fast\napi_faults: {stall_rate: 1, stall_seconds: 3, path_prefix: /apis/v1beta1/runs}\n")
  local doc, rows = storm({ "--sim-config", cfg },
    { "arrival_rate=2", "duration=10", "max_in_flight=2", "on_full=queue", "request_timeout=60" })
  local r = doc.result
  T.eq(r.runs.dropped, nil, "queued, not dropped")
  T.eq(r.runs.created, 20)
  local raw, corrected
  for _, m in ipairs(doc.metrics.metrics) do
    if m.key == "storm.arrivals.latency" then raw = m.summary end
    if m.key == "storm.arrivals.latency_corrected" then corrected = m.summary end
  end
  T.ok(raw.p50 >= 3, "raw: the 3 s stall and the modelled create: " .. raw.p50)
  T.ok(corrected.p99 > 2 * raw.p99, string.format("corrected p99 %.1f s > raw p99 %.1f s", corrected.p99, raw.p99))
  check_series(doc, rows)
end)

T.case("stages change the rate at their boundaries", function()
  local doc, rows = storm({ "--sim-profile", "fast" },
    { 'stages=[{duration: 60, target: 1}, {duration: 60, target: 1}, {duration: 60, target: 3}]' })
  local r = doc.result
  -- a ramp 0 -> 1 over 60 s (30), 1/s for 60 s (60), a ramp 1 -> 3 over 60 s (120)
  T.eq(r.load.offered, 210)
  local per = {}
  for _, x in ipairs(counter_rows(doc, "storm.arrivals.started")) do per[x.t] = (per[x.t] or 0) + x.d end
  -- the schedule begins at a0 on the series' axis: stage 2 is [a0 + 60, a0 + 120)
  local a0 = r.load.start
  T.ok(a0 > 0 and a0 < 10, "start " .. a0)
  local n = 0
  for _, c in pairs(per) do n = n + c end
  T.eq(n, 210, "every arrival in an interval")
  for t = 70, 110, 10 do T.eq(per[t], 10, "1/s inside stage 2: [" .. t .. ", " .. (t + 10) .. ")") end
  for t = 10, 50, 10 do T.ok(per[t] < 10 and per[t] >= per[t - 10], "ramping up to 1/s in stage 1 at " .. t) end
  for t = 130, 170, 10 do T.ok(per[t] > 10 and per[t] > per[t - 10], "ramping to 3/s in stage 3 at " .. t) end
  T.ok(per[170] >= 27, "near 3/s at the end: " .. per[170])
  check_series(doc, rows)
end)

-- The Argo and job storms at a rate: every arrival offered once, the
-- series adding up to the scenario's own counts.
for _, sc in ipairs({
  { file = "argo_storm.lua", args = { "arrival_rate=1", "duration=60" }, created = "submitted", done = "Succeeded" },
  { file = "job_storm.lua", args = { "arrival_rate=1", "arrival_duration=60" }, created = "created", done = "complete" },
}) do
  T.case(sc.file .. " at 1/s for 60 s", function()
    nrun = nrun + 1
    local out = fs.join(tmp, "out" .. nrun)
    local cmd = { BIN, "-q", "-o", out, "--seed", "3", fs.join(SRC, "scenarios", sc.file) }
    for _, a in ipairs(sc.args) do cmd[#cmd + 1] = a end
    local res = kb.process.run { cmd = cmd, timeout = 300 }
    T.eq(res.code, 0, res.stderr:sub(-2000))
    local doc = json.decode(fs.read(fs.join(out, fs.list(out)[1], "result", "result.json")))
    local r = doc.result
    T.eq(r.requested, 60)
    T.eq(r[sc.created], 60)
    T.eq(r.dropped, 0)
    T.eq(sum(counter_rows(doc, "storm.arrivals.started")), 60)
    T.eq(sum(counter_rows(doc, "storm.created")), r[sc.created])
    T.eq(sum(counter_rows(doc, "storm.finished{state=" .. sc.done .. "}")), 60, "every one finished")
    local per = {}
    for _, x in ipairs(counter_rows(doc, "storm.arrivals.started")) do per[x.t] = x.d end
    for t = 10, 50, 10 do T.eq(per[t], 10, "1/s in [" .. t .. ", " .. (t + 10) .. ")") end
    local g = doc.timeseries.gauges["storm.in_flight"]
    T.eq(g[#g].v, 0, "nothing in flight at the end")
  end)
end

T.case("killed with SIGKILL mid-storm, kbrun report rebuilds the time series from the journal", function()
  nrun = nrun + 1
  local out = fs.join(tmp, "out" .. nrun)
  -- the linear clock (x50): the storm takes real time, and is killed while runs arrive
  local child = kb.process.spawn { cmd = { BIN, "-q", "-o", out, "--seed", "3", "--sim-clock", "linear",
    "--sim-speed", "50", DRIVER, "pipeline_file_url=" .. SHORT, "arrival_rate=2", "duration=3000" } }
  local dir, journal
  local deadline = kb.time() + 60
  repeat
    kb.sleep(0.1)
    for _, e in ipairs(fs.exists(out) and fs.list(out) or {}) do
      if e:find("^storm%-rate%-driver") then dir = fs.join(out, e) end
    end
    local path = dir and fs.join(dir, "output", "journal.jsonl")
    journal = path and fs.exists(path) == "file" and fs.read(path) or ""
    local _, created = journal:gsub('"event":"run.created"', "")
  until created >= 40 or kb.time() > deadline
  T.eq(child:kill("SIGKILL"), true)
  T.eq(child:wait().signal, "SIGKILL")
  T.eq(fs.exists(fs.join(dir, "result", "result.json")), false, "killed before writing results")
  local res = kb.process.run { cmd = { BIN, "report", dir }, timeout = 120 }
  T.eq(res.code, 0, res.stderr)
  local doc = json.decode(fs.read(fs.join(dir, "result", "result.json")))
  T.eq(doc.status, "killed")
  T.ok(doc.timeseries, "result.json has the time series back")
  T.eq(doc.timeseries.interval, 10)
  local counters = {}
  for _, m in ipairs(doc.metrics.metrics) do if m.kind ~= "histogram" then counters[m.key] = m.value end end
  -- the series (ts rows) against the counters (c records), both as of the last flush
  for _, key in ipairs({ "storm.created", "storm.arrivals.started", "storm.finished{state=Succeeded}" }) do
    T.ok((counters[key] or 0) > 0 or key:find("finished"), key .. " counted")
    T.eq(sum(counter_rows(doc, key)), counters[key] or 0, key .. ": the rebuilt series add up to the counter")
  end
  T.ok(counters["storm.created"] >= 40, "killed after 40 creates: " .. counters["storm.created"])
  T.eq(sum(counter_rows(doc, "storm.created")), doc.result.runs.created, "= the runs the journal's events created")
  local g = doc.timeseries.gauges["storm.in_flight"]
  local fin = 0
  for key, list in pairs(doc.timeseries.counters) do if key:match("^storm%.finished") then fin = fin + sum(list) end end
  T.eq(g[#g].v, counters["storm.created"] - fin, "in flight at the kill: created - finished")
  local text = fs.read(fs.join(dir, "result", "timeseries.csv"))
  T.contains(text, "storm.created,counter,0,")
  T.contains(text, "storm.in_flight,gauge,")
end)

T.case("Poisson arrivals: about rate x duration, the same for a seed", function()
  local a = storm({ "--sim-profile", "fast" }, { "arrival=poisson", "arrival_rate=2", "duration=100" })
  local b = storm({ "--sim-profile", "fast" }, { "arrival=poisson", "arrival_rate=2", "duration=100" })
  T.eq(a.result.load.model, "poisson")
  T.eq(a.result.load.offered, b.result.load.offered, "--seed 3 both times: the same schedule")
  T.ok(math.abs(a.result.load.offered - 200) <= 4 * math.sqrt(200), "200 expected (sd 14): " .. a.result.load.offered)
  T.eq(a.result.runs.created + (a.result.runs.dropped or 0), a.result.load.offered)
end)

T.case("bad open-model parameters are refused before anything is created", function()
  for _, args in ipairs({ { "arrival_rate=2" }, { "arrival_rate=-1" }, { "arrival_rate=1", "duration=5", "arrival=bursty" },
    { "stages=[{duration: 0, target: 1}]" }, { "stages=nonsense" }, { "arrival_rate=1", "duration=5", "on_full=wait" } }) do
    local cmd = { BIN, "-q", "-o", fs.join(tmp, "bad"), DRIVER, "pipeline_file_url=" .. SHORT }
    for _, a in ipairs(args) do cmd[#cmd + 1] = a end
    local res = kb.process.run { cmd = cmd, timeout = 60 }
    T.eq(res.code, 2, table.concat(args, " ") .. ": " .. res.stderr)
    T.ok(res.stderr:find(args[#args]:match("^[%w_]+"), 1, true), "names the parameter: " .. res.stderr)
  end
end)

T.run()
