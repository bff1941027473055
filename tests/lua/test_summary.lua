--- kb.summary's histogram table: `.attempt` twins only where retries made
-- them differ, side calls (aux.*) after the scenario's own operations.
local T = require "kb.testing"
local summary = require "kb.summary"

local function hist(name, count, max, labels)
  return { kind = "histogram", name = name, labels = labels or {},
    summary = { count = count, p50 = max / 2, p90 = max, p99 = max, max = max } }
end

local function names(lines)
  local out = {}
  for i = 2, #lines do out[#out + 1] = lines[i]:match("^(%S+)") end
  return table.concat(out, " ")
end

T.case("an .attempt twin is hidden where it equals its call, shown where retries happened", function()
  local lines = summary.histogram_lines { metrics = {
    hist("run.create", 50, 0.66), hist("run.create.attempt", 50, 0.66),      -- no retries
    hist("run.get", 50, 1.9), hist("run.get.attempt", 53, 0.9),              -- 3 retries
    hist("aux.run.list", 1, 0.3), hist("aux.run.list.attempt", 1, 0.3),
    hist("poll.run.get", 498, 0.23),
  } }
  T.eq(lines[1]:match("^(%S+)"), "histogram")
  T.eq(names(lines), "poll.run.get run.create run.get run.get.attempt aux.run.list")
end)

T.case("labelled twins compare with their own call", function()
  local lines = summary.histogram_lines { metrics = {
    hist("op", 2, 1, { code = "200" }), hist("op.attempt", 2, 1, { code = "200" }),
    hist("op", 3, 1, { code = "500" }), hist("op.attempt", 5, 1, { code = "500" }),
  } }
  T.eq(names(lines), "op{code=200} op{code=500} op.attempt{code=500}")
end)

T.case("counters: the side calls' after the scenario's own", function()
  local lines = summary.counter_lines { metrics = {
    { kind = "counter", name = "aux.kfp.requests", labels = { op = "run.list" }, value = 1 },
    { kind = "counter", name = "kfp.requests", labels = { op = "run.create" }, value = 50 },
  } }
  T.eq(#lines, 2)
  T.ok(lines[1]:find("^kfp%.requests"), lines[1])
  T.ok(lines[2]:find("^aux%.kfp%.requests"), lines[2])
end)

T.run()
