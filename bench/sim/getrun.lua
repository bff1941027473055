--- KFP GetRun served by the embedded simulator, v1beta1 against v2beta1,
-- side by side in one process: one finished run of the 10-step benchmark
-- pipeline (a 61 KB v1 workflow_manifest), then `n` GETs of it through each
-- API version, `concurrency` in flight. Reports the CPU seconds (user +
-- sys of the whole process: client and simulator) per 1,000 GETs and the
-- ratio v1/v2. CPU, not wall time: these machines are shared.
--
--   kbrun bench/sim/getrun.lua [n=4000] [concurrency=16]
local kb = require "kb"
local kfp = require "kb.kfp"

local PIPELINE = (os.getenv("KBRUN_SOURCE_DIR") or ".") .. "/tests/data/sim/v1_argo_benchmark_pipeline_10_nodes.yaml"

-- user + sys CPU seconds of this process (/proc/self/stat, clock ticks)
local function cpu_seconds()
  local stat = io.open("/proc/self/stat"):read("a")
  local rest = stat:match("%) (.*)")
  local fields = {}
  for f in rest:gmatch("%S+") do fields[#fields + 1] = f end
  return (tonumber(fields[12]) + tonumber(fields[13])) / 100 -- utime, stime (fields 14, 15)
end

local function storm(c, id, n, concurrency)
  local pool = kb.pool(concurrency)
  local bytes = 0
  local t0 = cpu_seconds()
  for _ = 1, n do
    pool:spawn(function()
      local body = c:request { op = "run.get", path = "/runs/" .. id, raw = true }
      bytes = #body
    end)
  end
  pool:wait()
  return cpu_seconds() - t0, bytes
end

return {
  name = "sim_getrun",
  params = { n = 4000, concurrency = 16 },
  run = function(p)
    local sim = kb.sim.start { profile = "fast", seed = 3 }
    local v2 = kfp.client { host = sim.url, api = "v2beta1" }
    local v1 = kfp.client { host = sim.url, api = "v1beta1" }
    local pl = v2:upload_pipeline { file = PIPELINE, name = "getrun-bench" }
    local run = v2:create_run { name = "getrun", pipeline_id = pl.id }
    v2:wait_run(run.id, { interval = 5, timeout = 7200 })
    storm(v1, run.id, 200, p.concurrency) -- warm up both
    storm(v2, run.id, 200, p.concurrency)
    local c1, b1 = storm(v1, run.id, p.n, p.concurrency)
    local c2, b2 = storm(v2, run.id, p.n, p.concurrency)
    print(string.format("v1beta1 GetRun: %.3f CPU s per 1,000 (%d B each)", c1 * 1000 / p.n, b1))
    print(string.format("v2beta1 GetRun: %.3f CPU s per 1,000 (%d B each)", c2 * 1000 / p.n, b2))
    print(string.format("v1/v2 CPU per GET: %.2f", c1 / c2))
    sim:stop()
    return { v1_cpu_per_1000 = c1 * 1000 / p.n, v2_cpu_per_1000 = c2 * 1000 / p.n, ratio = c1 / c2 }
  end,
}
