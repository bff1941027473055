--- kb.timeseries: per-interval figures of every registered metric. Ground
-- truth: values recorded at known times on the events clock, and a storm's
-- own totals (the series of a metric add up to its count).
local kb = require "kb"
local metrics = require "kb.metrics"
local ts = require "kb.timeseries"
local T = require "kb.testing"

T.case("values recorded at known times land in their intervals, with exact percentiles", function()
  local sim <close> = kb.sim.start { profile = "fast" }
  ts.start(10)
  local h = metrics.histogram("tsx.latency")
  local c = metrics.counter("tsx.done")
  for k = 0, 5 do
    kb.sleep(k == 0 and 1 or 10) -- 1, 11, 21, ... s: one interval each
    for v = 1, 9 do h:record(k + v / 10) end -- k+0.1 .. k+0.9
    c:inc(k + 1)
  end
  h:record(99, 3) -- weighted, in the last interval
  local snap = ts.snapshot()
  T.eq(snap.interval, 10)
  local rows = snap.histograms["tsx.latency"]
  T.eq(#rows, 6)
  for k = 0, 5 do
    local r = rows[k + 1]
    T.eq(r.t, k * 10)
    T.eq(r.count, k == 5 and 12 or 9)
    T.ok(math.abs(r.p50 - (k == 5 and k + 0.6 or k + 0.5)) < 1e-9, "p50 of interval " .. k .. ": " .. r.p50)
    T.eq(r.max, k == 5 and 99 or k + 0.9)
  end
  local crow = snap.counters["tsx.done"]
  T.eq(#crow, 6)
  for k = 0, 5 do T.eq(crow[k + 1].d, k + 1) end
  local csv = ts.csv(snap)
  T.contains(csv, "tsx.latency,histogram,50,12,")
  T.contains(csv, "tsx.done,counter,20,,,,,,3")
end)

T.case("the open rows are journaled at most every second, less often when sorting them costs", function()
  T.eq(ts.open_rows_wait(nil), 1)
  T.eq(ts.open_rows_wait(0.001), 1)
  T.near(ts.open_rows_wait(0.1), 0.1 / ts.OPEN_ROWS_CPU_SHARE, 1e-12, "5% of the CPU")
  T.ok(ts.open_rows_wait(0.1) > 1)
  local every = ts.OPEN_ROWS_EVERY
  ts.OPEN_ROWS_EVERY = 3
  T.eq(ts.open_rows_wait(0.1), 3)
  ts.OPEN_ROWS_EVERY = every
end)

T.case("--metrics-listen serves the last complete interval's figures", function()
  local sim <close> = kb.sim.start { profile = "fast" }
  local prometheus = require "kb.prometheus"
  local prom = require "kb.kfp.prom"
  ts.start(10)
  local h = metrics.histogram("tsp.latency")
  local c = metrics.counter("tsp.done")
  local g = metrics.gauge("tsp.running")
  kb.sleep(11) -- interval 1: [10, 20)
  for v = 1, 100 do h:record(v / 100) end -- 0.01 .. 1.00
  c:inc(7)
  g:set(5)
  g:set(9)
  g:set(4)
  kb.sleep(10) -- now in interval 2: interval 1 is the last complete one
  h:record(50) -- interval 2's: not served yet
  local scrape = prom.parse(prometheus.render())
  local function v(name, key) local x = scrape.samples[prom.key(name, { metric = key })] return x and x.value end
  T.eq(scrape.samples[prom.key("kbrun_interval_seconds", {})].value, 10)
  T.eq(scrape.samples[prom.key("kbrun_interval_start_seconds", {})].value, 10)
  T.eq(v("kbrun_interval_count", "tsp.latency"), 100)
  T.eq(v("kbrun_interval_p50_seconds", "tsp.latency"), 0.5, "nearest rank of 0.01 .. 1.00")
  T.eq(v("kbrun_interval_p99_seconds", "tsp.latency"), 0.99)
  T.eq(v("kbrun_interval_max_seconds", "tsp.latency"), 1)
  T.eq(v("kbrun_interval_increase", "tsp.done"), 7)
  T.eq(v("kbrun_interval_gauge", "tsp.running"), 4, "the value at the interval's end")
  T.eq(v("kbrun_interval_gauge_max", "tsp.running"), 9)
  kb.sleep(10) -- interval 2 complete: one value of 50, nothing counted, the gauge held
  scrape = prom.parse(prometheus.render())
  T.eq(v("kbrun_interval_count", "tsp.latency"), 1)
  T.eq(v("kbrun_interval_p99_seconds", "tsp.latency"), 50)
  T.eq(v("kbrun_interval_increase", "tsp.done"), 0)
  T.eq(v("kbrun_interval_gauge", "tsp.running"), 4, "held")
  T.eq(v("kbrun_interval_gauge_max", "tsp.running"), 4)
end)

T.case("a storm's series add up to its totals (result.json, timeseries.csv)", function()
  local bin = assert(os.getenv("KBRUN_BIN"), "run by ctest (KBRUN_BIN)")
  local src = assert(os.getenv("KBRUN_SOURCE_DIR"), "run by ctest (KBRUN_SOURCE_DIR)")
  local out = kb.fs.tmpdir("kbrun-test-timeseries")
  local r = kb.process.run { cmd = { bin, "-q", "-o", out, "--seed", "4",
    kb.fs.join(src, "scenarios", "taxi_50runs.lua"), "num_runs=12" }, timeout = 120 }
  T.eq(r.code, 0, r.stderr)
  local exp
  for _, e in ipairs(kb.fs.list(out)) do if e:find("^taxi") then exp = e end end
  local doc = kb.json.decode(kb.fs.read(kb.fs.join(out, exp, "result", "result.json")))
  T.eq(doc.timeseries.interval, 10)
  local checked = 0
  for _, m in ipairs(doc.metrics.metrics) do
    local key = m.key or m.name
    if m.kind == "histogram" and m.summary and m.summary.count > 0 and doc.timeseries.histograms[key] then
      local n = 0
      for _, row in ipairs(doc.timeseries.histograms[key]) do n = n + row.count end
      T.eq(n, m.summary.count, key .. ": the intervals hold every value")
      checked = checked + 1
    end
  end
  T.ok(checked >= 5, "histograms checked: " .. checked)
  local creates = doc.timeseries.histograms["run.create"]
  T.ok(creates and #creates >= 1, "run.create has a series")
  T.ok(kb.fs.read(kb.fs.join(out, exp, "result", "timeseries.csv")):find("run.create,histogram,0,12,", 1, true),
    "timeseries.csv: the 12 creates in the first interval")
  kb.fs.remove(out, { recursive = true })
end)

T.run()
