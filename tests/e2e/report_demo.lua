-- A small synthetic run shaped like the Kubeflow Pipelines benchmark notebook
-- (create N runs, poll them, delete them, list), for report_screenshot.sh:
-- latencies are drawn from fixed log-normal distributions, no cluster, no
-- sleeping, deterministic for a given `seed` parameter.
local kb = require "kb"
local report = require "kb.report"

-- Deterministic uniform numbers in (0, 1), independent of math.random.
local function lcg(seed)
  local s = seed
  return function()
    s = (s * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
    return ((s >> 11) + 0.5) / (1 << 52)
  end
end

local function lognormal(rand, median, sigma)
  local u1, u2 = rand(), rand()
  return median * math.exp(sigma * math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2))
end

return {
  name = "report_demo",
  params = { runs = 50, seed = 7, strict = false },
  thresholds = {
    ["run.create"] = { p99 = 0.6 },
    ["run.get"] = { p99 = 0.25, p50 = 0.08 },
    success_rate = 0.9,
  },
  run = function(p)
    local rand = lcg(p.seed)
    local create = kb.metrics.histogram("run.create")
    local get = kb.metrics.histogram("run.get")
    local delete = kb.metrics.histogram("run.delete")
    local list = kb.metrics.histogram("run.list")
    local duration = kb.metrics.histogram("run.duration")
    local requests = kb.metrics.counter("http.requests", { status = 200 })
    local durations, outcomes = {}, { Succeeded = 0, Failed = 0 }
    for i = 1, p.runs do
      create:record(lognormal(rand, 0.14, 0.35))
      -- a run takes minutes (virtual clock); polled every 10 s
      local d = lognormal(rand, 9 * 60, 0.25)
      durations[i] = d
      duration:record(d)
      for _ = 1, math.ceil(d / 10) // 6 do get:record(lognormal(rand, 0.035, 0.6)) end
      local ok = rand() > 0.06
      outcomes[ok and "Succeeded" or "Failed"] = outcomes[ok and "Succeeded" or "Failed"] + 1
      delete:record(lognormal(rand, 0.09, 0.3))
      requests:inc(3)
    end
    for _ = 1, 12 do list:record(lognormal(rand, 0.3, 0.5)) end
    kb.metrics.counter("http.requests", { status = 429 }):inc(4)
    kb.metrics.gauge("runs.in_flight"):set(0)
    if p.strict then kb.metrics.histogram("run.create"):record(2.5) end
    report.attach { samples = { ["run.duration"] = durations }, outcomes = outcomes }
    return { runs = p.runs, succeeded = outcomes.Succeeded, success_rate = outcomes.Succeeded / p.runs }
  end,
}
