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

T.case("a counter never incremented is 0; a field missing from the result's table is missing", function()
  local checks, all = thresholds.evaluate({ ["api.errors"] = { max = 0 }, ["api.retries"] = { min = 1 },
    ["latency.p99"] = { max = 1 } }, snapshot_of(function() end), { latency = {} })
  local by = {}
  for _, c in ipairs(checks) do by[c.name] = c end
  T.eq(by["api.errors"].actual, 0)
  T.eq(by["api.errors"].kind, "counter")
  T.eq(by["api.errors"].passed, true)
  T.eq(by["api.retries"].actual, 0)
  T.eq(by["api.retries"].passed, false)   -- 0 >= 1 fails
  T.eq(by["latency.p99"].actual, nil)
  T.eq(by["latency.p99"].passed, false)
  T.eq(all, false)
end)

T.case("a histogram with no data fails unless allow_missing", function()
  local snap = snapshot_of(function()
    kb.metrics.histogram("registered.empty")     -- created, nothing recorded
  end)
  local checks = thresholds.evaluate({ ["registered.empty"] = { p99 = 1 }, absent = { p50 = 1 },
    spare = { p99 = 1, allow_missing = true } }, snap, nil)
  local by = {}
  for _, c in ipairs(checks) do by[c.name] = c end
  for _, name in ipairs({ "registered.empty", "absent" }) do
    T.eq(by[name].no_data, true, name)
    T.eq(by[name].passed, false, name)
    T.eq(by[name].actual, nil, name)
  end
  T.eq(by.spare.no_data, true)
  T.eq(by.spare.allowed, true)
  T.eq(by.spare.passed, true)
  T.eq(#checks, 3) -- allow_missing is an option, not a check
end)

T.case("labelled keys select label sets; 200 and \"200\" are one value", function()
  local snap = snapshot_of(function()
    kb.metrics.histogram("x.lat", { code = 200, method = "GET" }):record(0.1)
    kb.metrics.histogram("x.lat", { code = 200, method = "PUT" }):record(0.3)
    kb.metrics.histogram("x.lat", { code = 500, method = "GET" }):record(5)
    kb.metrics.counter("x.err", { class = "a b" }):inc(4)
  end)
  local checks = thresholds.evaluate({
    ["x.lat{code=200}"] = { max = 1 },
    ["x.lat{method=GET, code=500}"] = { max = 1 },
    ['x.lat{code="200",method=PUT}'] = { min = 0.2 },
    ['x.err{class="a b"}'] = { max = 3 },
    ["x.err{class=other}"] = { max = 0 },
  }, snap, nil)
  local by = {}
  for _, c in ipairs(checks) do by[c.name] = c end
  T.near(by["x.lat{code=200}"].actual, 0.3, 0.001)
  T.eq(by["x.lat{code=200}"].passed, true)
  T.near(by["x.lat{method=GET, code=500}"].actual, 5, 0.01)
  T.eq(by["x.lat{method=GET, code=500}"].passed, false)
  T.near(by['x.lat{code="200",method=PUT}'].actual, 0.3, 0.001)
  T.eq(by['x.err{class="a b"}'].actual, 4)
  T.eq(by["x.err{class=other}"].actual, 0)
  T.eq(by["x.err{class=other}"].passed, true)
  T.raises(function() thresholds.parse_key("x{code}") end, "name{label=value")
end)

T.case("bad specs are refused with the entry named", function()
  T.raises(function() thresholds.validate({ x = { p99x = 1 } }) end, "threshold 'x': unknown statistic 'p99x'")
  T.raises(function() thresholds.validate({ x = { p99 = "1s" } }) end, "the limit of p99 must be a number")
  T.raises(function() thresholds.validate({ x = { p99 = 1, allow_missing = 1 } }) end, "allow_missing wants true or false")
  T.raises(function() thresholds.validate("fast") end, "must be a table")
end)

T.case("an unknown result: a name that is no metric has no value, not a counter's 0", function()
  local snap = { metrics = {} }
  local spec = { ["runs.timed_out"] = { max = 0 }, success_rate = 0.9 }
  local known = thresholds.evaluate(spec, snap, nil)
  T.eq(known[1].name, "runs.timed_out")
  T.eq(known[1].kind, "counter", "result known (nil): a counter never incremented")
  T.eq(known[1].actual, 0)
  T.eq(known[1].passed, true)
  local checks, all = thresholds.evaluate(spec, snap, nil, { result_unknown = true })
  T.eq(all, false)
  T.eq(checks[1].kind, "result")
  T.eq(checks[1].actual, nil, "runs.timed_out: no value")
  T.eq(checks[1].passed, false)
  T.eq(checks[2].actual, nil)
  T.eq(checks[2].passed, false)
  T.eq(thresholds.describe(checks[1]), "runs.timed_out missing (limit <= 0)")
end)

T.case("described in the metric's unit", function()
  local d = thresholds.describe
  T.eq(d{ name = "op", stat = "p99", op = "<=", limit = 1, actual = 0.950134, unit = "s", kind = "histogram" },
    "op p99 0.95 s <= 1 s")
  T.eq(d{ name = "op", stat = "p99", op = "<=", limit = 0.1, actual = 0.5, unit = "s", kind = "histogram" },
    "op p99 500 ms <= 100 ms")
  T.eq(d{ name = "op", stat = "max", op = "<=", limit = 1, actual = 1.0004, unit = "s", kind = "histogram" },
    "op max 1.0004 s <= 1 s")
  T.eq(d{ name = "op", stat = "p50", op = "<=", limit = 0.0005, actual = 0.00012, unit = "s", kind = "histogram" },
    "op p50 120 us <= 500 us")
  T.eq(d{ name = "op", stat = "p99", op = "<=", limit = 1, unit = "s", kind = "histogram", no_data = true },
    "op p99 no data (limit <= 1 s)")
  T.eq(d{ name = "success_rate", stat = "value", op = ">=", limit = 0.98, actual = 0.975, kind = "result" },
    "success_rate 97.5% >= 98%")
  T.eq(d{ name = "runs.timed_out", stat = "value", op = "<=", limit = 0, actual = 3, kind = "counter" },
    "runs.timed_out 3 <= 0")
  T.eq(d{ name = "x.total", stat = "value", op = ">=", limit = 10, actual = 12.5, kind = "result" },
    "x.total 12.5 >= 10")
  T.eq(d{ name = "success_rate", stat = "value", op = ">=", limit = 0.9, kind = "result" },
    "success_rate missing (limit >= 90%)")
end)

T.run()
