-- Threshold evaluation: histogram statistics over all label sets, counters,
-- result fields, and the verdicts' shape.
local kb = require "kb"
local T = require "kb.testing"
local thresholds = require "kb.thresholds"

local function snapshot_of(fill)
  kb.metrics.clear()
  fill()
  return kb.metrics.snapshot()
end

T.case("any percentile, mean and max of a histogram", function()
  local snap = snapshot_of(function()
    local h = kb.metrics.histogram("op")
    for i = 1, 100 do h:record(i / 100) end
  end)
  local checks, all = thresholds.evaluate({ op = { p75 = 0.8, p999 = 0.5, mean = 1 } }, snap, nil)
  T.eq(all, false)
  local by = {}
  for _, c in ipairs(checks) do by[c.stat] = c end
  T.eq(by.p75.passed, true)
  T.near(by.p75.actual, 0.75, 0.001)
  T.eq(by.p999.passed, false)
  T.near(by.p999.actual, 1.0, 0.002)
  T.eq(by.mean.passed, true)
end)

T.case("label sets of one histogram are merged exactly", function()
  local snap = snapshot_of(function()
    kb.metrics.histogram("lat", { code = "200" }):record(0.1)
    kb.metrics.histogram("lat", { code = "500" }):record(2)
  end)
  local checks, all = thresholds.evaluate({ lat = { max = 0.5 } }, snap, nil)
  T.eq(all, false)
  T.near(checks[1].actual, 2, 0.01)
end)

T.case("counters are summed; result fields are at least the limit", function()
  local snap = snapshot_of(function()
    kb.metrics.counter("errors", { class = "timeout" }):inc(2)
    kb.metrics.counter("errors", { class = "reset" }):inc(1)
  end)
  local checks, all = thresholds.evaluate({ errors = { max = 2 }, success_rate = 0.9,
    ["latency.p99"] = { max = 1 } }, snap, { success_rate = 0.95, latency = { p99 = 0.5 } })
  T.eq(all, false)
  local by = {}
  for _, c in ipairs(checks) do by[c.name] = c end
  T.eq(by.errors.actual, 3)
  T.eq(by.errors.passed, false)
  T.eq(by.success_rate.passed, true)
  T.eq(by["latency.p99"].passed, true)
end)

T.case("a missing metric or field fails its threshold", function()
  local checks, all = thresholds.evaluate({ nothing = { p99 = 1 }, success_rate = 0.5 },
    snapshot_of(function() end), {})
  T.eq(all, false)
  for _, c in ipairs(checks) do
    T.eq(c.passed, false)
    T.eq(c.actual, nil)
  end
  T.raises(function() thresholds.evaluate({ x = "fast" }, nil, nil) end, "must be a number or a table")
end)

T.run()
